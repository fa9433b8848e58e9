#!/usr/bin/env bash
# The rustc wrapper scripts/fuzz.sh builds the fuzz targets with (RUSTC_WRAPPER): crates that only
# compute (ciphers, curves, hashes, big integers) are compiled without libFuzzer's coverage
# instrumentation, every other crate with it.
#
# Why: the targets that seal, open or sign (sealed_file, sealed_roundtrip, journal,
# journal_roundtrip, merge_set) spent most of each execution in instrumented X25519, Ed25519 and
# ChaCha20-Poly1305, whose branches do not depend on the bytes being parsed, so their coverage
# guides nothing and their counters only slow every case down. The parsers of untrusted bytes
# among the dependencies (age's header, DER and X.509 for attestation, JSON, TOML, base64,
# bech32) stay instrumented.
#
# Usage (cargo calls it): fuzz-rustc.sh RUSTC ARGS...
set -euo pipefail

rustc="$1"
shift
uninstrumented=" aes aes_gcm blake3 chacha20 chacha20poly1305 cipher crypto_bigint crypto_common \
curve25519_dalek digest ecdsa ed25519_dalek elliptic_curve fiat_crypto hkdf hmac num_bigint_dig p256 \
p384 pbkdf2 poly1305 polyval primeorder rand_chacha ring rsa salsa20 scrypt sha2 sha3 subtle \
universal_hash x25519_dalek zeroize "

crate=
prev=
for arg in "$@"; do
  if [ "$prev" = "--crate-name" ]; then
    crate="$arg"
  fi
  prev="$arg"
done

case "$uninstrumented" in
  *" $crate "*)
    args=()
    for arg in "$@"; do
      case "$arg" in
        -Cpasses=sancov-module | -Cllvm-args=-sanitizer-coverage-*) ;;
        *) args+=("$arg") ;;
      esac
    done
    exec "$rustc" "${args[@]}"
    ;;
  *) exec "$rustc" "$@" ;;
esac
