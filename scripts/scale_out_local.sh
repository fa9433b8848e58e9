#!/usr/bin/env bash
# Run a sharded job as local processes, the way a Kubernetes Indexed Job runs pods
# (docs/scale-out.md): N runners, each with its own state directory and identity, each given
# JOB_COMPLETION_INDEX; one is killed mid-run and restarted (it resumes from its journal); the
# shards are merged and the result verified, and compared with the same job run as one shard.
# Prints the wall time of 1 shard and of N shards on the same inputs.
#
#   scripts/scale_out_local.sh [N] [INPUTS]      (default 2 shards, 4000 inputs)
#
# Needs: a built runner (cargo build --release), the `age` tools (scripts/test.sh installs
# them), python3. Uses the tiny test model, so it runs offline in a minute or two.
set -euo pipefail
N=${1:-2}
INPUTS=${2:-4000}
repo=$(cd "$(dirname "$0")/.." && pwd)
runner="$repo/target/release/runner"
[ -x "$runner" ] || (cd "$repo" && cargo build --release --bin runner)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
cp -r "$repo/engines" "$repo/policies" .
cp -r "$repo/tests/fixtures/models/tiny-270m" model
export RUNNER_THREADS=${RUNNER_THREADS:-$(( $(nproc) / N > 0 ? $(nproc) / N : 1 ))}

"$runner" keygen --out owner.key >/dev/null
printf 'required_signatures = 1\nowners = ["owner.key.pub"]\nrevoked = []\n' > trust.toml
age-keygen -o reader.age 2>/dev/null
"$runner" approve --engine engines/gemma3.eng --policy policies/gemma3.json --model model \
  --key owner.key --out cert.json --recipient "$(age-keygen -y reader.age)" >/dev/null
: > runners.txt
recipients=()
for k in $(seq 0 $((N - 1))) one; do
  "$runner" init --state-dir "state-$k" >/dev/null
  recipients+=(-r "$("$runner" identity --state-dir "state-$k" --recipient)")
  [ "$k" = one ] || echo "state-$k/runner.key.pub" >> runners.txt
done
python3 - "$INPUTS" > inputs.jsonl <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"id": f"q{i}", "tokens": [2] + [(7 * i + j) % 490 + 10 for j in range(1 + i % 9)]}))
PY
age "${recipients[@]}" -o inputs.jsonl.age inputs.jsonl
rm inputs.jsonl
job() {
  printf 'engine = "engines/gemma3.eng"\nmodel = "model"\ninputs = "inputs.jsonl.age"\noutput_dir = "%s"\n\n[generation]\nbatch_size = 8\nmax_new_tokens = 16\noutputs = ["tokens"]\n' "$1" > "$2"
}
job one one.toml
job out job.toml
exec_shard() { # STATE K N JOB: the runner itself (env execs it), so that $! is its pid
  env RUNNER_STATE_DIR="$1" JOB_COMPLETION_INDEX="$2" "$runner" exec --shard-from-env "$3" \
    --cert cert.json --trust trust.toml --quiet "$4"
}

t0=$(date +%s.%N)
exec_shard state-one 0 1 one.toml >/dev/null
t1=$(date +%s.%N)

pids=()
for k in $(seq 0 $((N - 1))); do
  env RUNNER_STATE_DIR="state-$k" JOB_COMPLETION_INDEX="$k" "$runner" exec --shard-from-env "$N" \
    --cert cert.json --trust trust.toml --quiet job.toml > "shard-$k.log" 2>&1 &
  pids+=($!)
done
# Kill the last shard once its journal holds a few batches, as an eviction would; restart it.
last=$((N - 1))
for _ in $(seq 1 600); do
  size=$( (cat "state-$last"/journals/*.journal 2>/dev/null || true) | wc -c)
  [ "$size" -gt 4000 ] && break
  sleep 0.05
done
kill -9 "${pids[$last]}" 2>/dev/null && echo "killed shard $last of $N mid-run"
wait "${pids[$last]}" 2>/dev/null || true
# Restarted at once, as Kubernetes retries the index; the others keep running.
env RUNNER_STATE_DIR="state-$last" JOB_COMPLETION_INDEX="$last" "$runner" exec --shard-from-env "$N" \
  --cert cert.json --trust trust.toml --quiet job.toml > "shard-$last.log" 2>&1 &
pids[$last]=$!
for pid in "${pids[@]}"; do wait "$pid"; done
cat "shard-$last.log"
t2=$(date +%s.%N)

"$runner" merge --cert cert.json --runner-keys runners.txt --out merged out
"$runner" verify merged --cert cert.json --runner-keys runners.txt | head -1
for k in $(seq 0 $((N - 1))); do
  age -d -i reader.age "merged/shard-$k-of-$N.outputs.jsonl.age"
done > merged.jsonl
age -d -i reader.age one/shard-0-of-1/outputs.jsonl.age > one.jsonl
cmp merged.jsonl one.jsonl && echo "merged outputs of $N shards = the 1-shard run's ($(wc -l < one.jsonl) lines)"
python3 - "$t0" "$t1" "$t2" "$INPUTS" "$N" "$RUNNER_THREADS" "$(nproc)" <<'PY'
import sys
t0, t1, t2 = (float(x) for x in sys.argv[1:4])
n, shards, threads, cores = sys.argv[4:8]
print(f"wall time, {n} inputs: 1 shard {t1 - t0:.2f} s; {shards} shards {t2 - t1:.2f} s "
      f"(kill and restart included; RUNNER_THREADS={threads} per runner, {cores} cores)")
PY
