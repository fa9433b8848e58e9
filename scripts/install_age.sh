#!/usr/bin/env bash
# Installs the reference `age` tool (and age-keygen) from Debian's archive when it is missing:
# the sealing tests check interoperability against the real binary, not only the crate.
# Needs root or sudo; a no-op once `age` is on the PATH.
set -euo pipefail
if command -v age >/dev/null && command -v age-keygen >/dev/null; then
    exit 0
fi
as_root=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install_age.sh: need root (or sudo) to apt-get install age" >&2; exit 2; }
    as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get install -y --no-install-recommends age >/dev/null 2>&1 || {
    "${as_root[@]}" apt-get update >/dev/null
    "${as_root[@]}" apt-get install -y --no-install-recommends age >/dev/null
}
command -v age >/dev/null
