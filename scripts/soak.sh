#!/usr/bin/env bash
# Long jobs hold steady: runs one job of each size given (default 1000 and 10000 token-id inputs)
# on the built-in random-weight model, through the whole verified flow (sealed inputs, sealed
# outputs, receipt), and prints the wall time and peak RSS of each `runner exec`
# (docs/scale-out.md).
#
#   scripts/soak.sh [N...]
#
# SOAK_NEW_TOKENS sets the new tokens per input (default 16): 1 measures memory against the
# number of inputs in a fraction of the time.
# RUNNER=PATH runs that binary instead of building this checkout's (to compare two builds).
# Needs the `age` tool (scripts/install_age.sh) and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1000 10000)
if [ -z "${RUNNER:-}" ]; then
  cargo build --release --locked --bin runner >&2
fi
runner="${RUNNER:-$(pwd)/target/release/runner}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$runner" demo --builtin --dir "$work/demo" >/dev/null
cd "$work/demo"
recipient=$("$runner" identity --state-dir state | grep -o 'age1[a-z0-9]*' | head -1)
vocab=$(python3 -c 'import json; print(json.load(open("model/config.json"))["vocab_size"])')
printf '%-8s %10s %12s %14s\n' inputs wall_s peak_rss_mib tokens
for n in "${sizes[@]}"; do
  python3 - "$n" "$vocab" >"$work/in.jsonl" <<'EOF'
import json, sys
n, vocab = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    print(json.dumps({"id": f"q{i}", "tokens": [2] + [(i * 7919 + j * 104729) % (vocab - 3) + 3 for j in range(8)]}))
EOF
  age -r "$recipient" -o "in-$n.jsonl.age" "$work/in.jsonl"
  cat >"job-$n.toml" <<EOF
engine = "engines/gemma3.eng"
model = "model"
inputs = "in-$n.jsonl.age"
output_dir = "soak-$n"

[generation]
batch_size = 32
max_new_tokens = ${SOAK_NEW_TOKENS:-16}
outputs = ["tokens"]
EOF
  /usr/bin/time -f '%e %M' -o "$work/time" "$runner" exec "job-$n.toml" --cert cert.json \
    --trust trust.toml --state-dir state --quiet --json >"$work/summary.json"
  read -r wall rss_kib <"$work/time"
  tokens=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["generated_tokens"])' "$work/summary.json")
  printf '%-8s %10s %12s %14s\n' "$n" "$wall" "$((rss_kib / 1024))" "$tokens"
done
