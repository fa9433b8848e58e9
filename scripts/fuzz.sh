#!/usr/bin/env bash
# A fuzzing campaign anyone can rerun (docs/fuzzing.md):
#
#   scripts/fuzz.sh [--minutes N | --seconds N | --runs N] [TARGET...]
#
# Builds every target in fuzz/ with the stable-toolchain recipe (libFuzzer's coverage
# instrumentation, no nightly, no cargo-fuzz; scripts/fuzz-rustc.sh leaves the crates that only
# compute, ciphers, curves and hashes, uninstrumented, and other dependencies without compare
# tracing), seeds each corpus from a freshly generated demo directory and the repository's own
# fixtures, runs each target for N minutes (default 1), or for N executions with --runs, on one
# worker, and prints a table: target, executions, exec/s, seconds, coverage, crashes. Exits 1 if
# any target crashed, leaving the input in fuzz/artifacts/<target>/. Corpora stay in
# fuzz/corpus/<target>/, so a later run goes on from what this one found.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=60
runs_limit=
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs_limit="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^runner-fuzz$')
if [ ${#targets[@]} -eq 0 ]; then
  read -r -a targets <<<"$(echo $all)"
fi
for t in "${targets[@]}"; do
  echo "$all" | grep -qx "$t" || { echo "fuzz.sh: no target '$t' (targets: $(echo $all))" >&2; exit 2; }
done

# Targets whose bytes only choose what the harness builds (shard facts to sign, a program to
# generate, records to seal): the product never compares a byte the fuzzer wrote, so compare
# tracing has nothing to teach the fuzzer there, and it cost a third of every `merge_set` case
# (4,850 against 3,300 executions a second on Zen 5). They build without it, in their own
# target directory so the two builds do not undo each other.
choices=" merge_set engine_structured journal_roundtrip "

triple=$(rustc -vV | sed -n 's/^host: //p')
echo "fuzz.sh: building ${#targets[@]} targets for $triple (the first build takes minutes)" >&2
is_choice() { case "$choices" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
traced=()
untraced=()
for t in "${targets[@]}"; do
  if is_choice "$t"; then untraced+=(--bin "$t"); else traced+=(--bin "$t"); fi
done
bin_dir() {
  if is_choice "$1"; then echo "fuzz/target/choices/$triple/release"; else echo "fuzz/target/$triple/release"; fi
}
# Cargo does not see what the wrapper decides: a digest of it among the flags makes a changed
# wrapper rebuild every crate instead of leaving the old instrumentation in place.
wrapper_digest=$(cksum <scripts/fuzz-rustc.sh | cut -d' ' -f1)
build() { # build COMPARE_FLAG TARGET_DIR BINS...
  local compares="$1" dir="$2"
  shift 2
  (
    cd fuzz
    RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
      -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
      $compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks --cfg fuzz_rustc_$wrapper_digest" \
      RUSTC_WRAPPER="$root/scripts/fuzz-rustc.sh" \
      cargo build --locked --release --target "$triple" --target-dir "$dir" "$@" >&2
  )
}
if [ ${#traced[@]} -gt 0 ]; then
  build -Cllvm-args=-sanitizer-coverage-trace-compares target "${traced[@]}"
fi
if [ ${#untraced[@]} -gt 0 ]; then
  build "" target/choices "${untraced[@]}"
fi

# Seeds: a fresh demo directory (certificate, receipt, evidence, job, audit log) and fixtures.
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
demo="$seeds/demo"
cargo build --release --locked --bin runner >&2
target/release/runner demo --builtin --dir "$demo" >/dev/null
seed_files() {
  case "$1" in
    certificate) echo "$demo/cert.json" ;;
    dsse_envelope) echo "$demo/cert.json $demo/results/receipt.json $demo/evidence.json" ;;
    receipt) echo "$demo/results/receipt.json" ;;
    policy) echo "policies/gemma3.json" ;;
    job_spec) echo "$demo/job.toml examples/job.toml" ;;
    inputs) echo "examples/inputs.jsonl" ;;
    openai_batch) echo "$seeds/openai.jsonl" ;;
    model_config) ls tests/fixtures/models/*/config.json ;;
    gguf_header) echo "tests/fixtures/gguf/blocks.gguf tests/fixtures/models/tiny-gguf/model.gguf" ;;
    attestation) echo "$demo/evidence.json"; ls tests/fixtures/attestation/*.bin tests/fixtures/attestation/tdx_quote ;;
    audit_log) echo "$demo/state/audit.jsonl" ;;
    engine) ls engines/*.eng ;;
    sealed_file) ls "$demo"/*.age "$demo"/out/*.age ;;
    sealed_roundtrip) echo "$seeds/sealed-choices" ;;
    journal) echo "$seeds/journal" ;;
    engine_structured) echo "$seeds/engine-choices" ;;
  esac
}
cat >"$seeds/openai.jsonl" <<'EOF'
{"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 10, "temperature": 0.7, "top_p": 0.9, "seed": -3, "stop": ["\n", "END"], "n": 1}}
{"custom_id": "request-2", "method": "POST", "url": "/v1/completions", "body": {"prompt": [2, 5, 7], "max_completion_tokens": 4, "top_k": -1, "stream": false, "logprobs": null}}
EOF

# Choice strings for the structured targets: a sealed file for us and one for others, armored;
# a program with helpers, bodies and regions.
printf '\003\002\020\000\000private-bytes' >"$seeds/sealed-choices"
printf '\000\001\000\000\000\003\002\003\001\001\002\011\010\012\003\004\005\377\200\011\012\013' >"$seeds/engine-choices"
# A journal's shape: each record an 8-byte little-endian length, then an age file.
le64() {
  local n=$1 i
  for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(((n >> (8 * i)) & 255)))"; done
}
for f in "$demo"/*.age; do
  le64 "$(wc -c <"$f")"
  cat "$f"
done >"$seeds/journal"
report="$seeds/report"
crashed=0
printf '%-17s %14s %10s %8s %8s %8s\n' target executions exec/s seconds coverage crashes >"$report"
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "$seeds/in-$t"
  for f in $(seed_files "$t"); do
    [ -f "$f" ] && cp "$f" "$seeds/in-$t/"
  done
  log="$seeds/$t.log"
  if [ -n "$runs_limit" ]; then limit=(-runs="$runs_limit"); else limit=(-max_total_time="$seconds"); fi
  start=$(date +%s)
  set +e
  "$(bin_dir "$t")/$t" "$corpus" "$seeds/in-$t" \
    "${limit[@]}" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  took=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  # libFuzzer also leaves slow-unit-* files (a unit over 10 s, which a paused worker's unit
  # is too); only these four kinds are findings.
  crashes=$(find "$artifacts" -type f -newer "$seeds/openai.jsonl" \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
    crashed=1
    echo "fuzz.sh: $t crashed (exit $rc); input in $artifacts/; log:" >&2
    tail -20 "$log" >&2
  fi
  printf '%-17s %14s %10s %8s %8s %8s\n' "$t" "${runs:-?}" "${speed:-?}" "$took" "${cov:-?}" "$crashes" >>"$report"
done
if [ -n "$runs_limit" ]; then per="$runs_limit executions"; else per="$seconds s"; fi
echo "fuzz.sh: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $per per target, one worker"
cat "$report"
exit "$crashed"
