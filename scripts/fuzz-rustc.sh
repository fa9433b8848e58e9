#!/usr/bin/env bash
# The rustc wrapper scripts/fuzz.sh builds the fuzz targets with (RUSTC_WRAPPER). Three levels of
# libFuzzer instrumentation, by crate:
#
# - our own code (the runner and the fuzz targets): everything, edge counters and compare tracing
#   (the fuzzer learns the constants our parsers and checks compare bytes against);
# - crates that only compute (ciphers, curves, hashes, big integers): none. Their branches do not
#   depend on the bytes being parsed, so their coverage guided nothing and slowed every case: the
#   targets that seal, open or sign spent most of each execution in instrumented X25519, Ed25519
#   and ChaCha20-Poly1305;
# - every other dependency, among them the parsers of untrusted bytes (age's header, DER and
#   X.509, JSON, TOML, base64, bech32): edge coverage without compare tracing. New edges in them
#   still steer the fuzzer, but tracing each of their byte comparisons (a base64 alphabet, a
#   line's end) cost more than half of every `sealed_file` case inside age's header parser, and
#   those parsers are fuzzed by their own projects.
#
# Usage (cargo calls it): fuzz-rustc.sh RUSTC ARGS...
set -euo pipefail

rustc="$1"
shift
uninstrumented=" aes aes_gcm blake3 chacha20 chacha20poly1305 cipher crypto_bigint crypto_common \
curve25519_dalek digest ecdsa ed25519_dalek elliptic_curve fiat_crypto hkdf hmac num_bigint_dig p256 \
p384 pbkdf2 poly1305 polyval primeorder rand_chacha ring rsa salsa20 scrypt sha2 sha3 subtle \
universal_hash x25519_dalek zeroize "
ours=" runner runner_fuzz "

crate=
prev=
for arg in "$@"; do
  if [ "$prev" = "--crate-name" ]; then
    crate="$arg"
  fi
  prev="$arg"
done

# The fuzz targets' binaries take the crate name of their file (engine_structured, ...).
case "$ours" in *" $crate "*) exec "$rustc" "$@" ;; esac
for arg in "$@"; do
  case "$arg" in fuzz_targets/*) exec "$rustc" "$@" ;; esac
done

strip_all=0
case "$uninstrumented" in *" $crate "*) strip_all=1 ;; esac
args=()
for arg in "$@"; do
  case "$arg" in
    -Cpasses=sancov-module | -Cllvm-args=-sanitizer-coverage-*)
      if [ "$strip_all" = 1 ] || [ "$arg" = -Cllvm-args=-sanitizer-coverage-trace-compares ]; then
        continue
      fi
      ;;
  esac
  args+=("$arg")
done
exec "$rustc" "${args[@]}"
