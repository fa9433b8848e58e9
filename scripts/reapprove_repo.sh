#!/bin/sh
# Regenerate certs/: certificates for the engines this repository ships, signed by the DEMO owner
# key certs/demo-owner.key (created on first run). Run it after changing anything in engines/ or
# policies/gemma3.json; tests/lib/repo_certs.rs fails until you do.
#
# The model bound is the tiny-270m test fixture (real weights cannot be shipped), and the
# certificates expire 2036-01-01 so the test does not rot. Results are sealed to the DEMO
# recipient certs/demo-recipient.age (its public line in certs/demo-recipients.txt). Demo only:
# never trust these keys.
set -eu
cd "$(dirname "$0")/.."
RUNNER=${RUNNER:-target/debug/runner}
[ -x "$RUNNER" ] || cargo build --quiet
MODEL=tests/fixtures/models/tiny-270m
EXPIRES=2036-01-01T00:00:00Z
if [ ! -f certs/demo-owner.key ]; then
    "$RUNNER" keygen --out certs/demo-owner.key
fi
# git does not keep the 0600 mode keygen wrote, and the runner refuses a key others can read.
chmod 600 certs/demo-owner.key
for engine in gemma3 gemma3_unrolled; do
    "$RUNNER" approve --engine "engines/$engine.eng" --policy policies/gemma3.json \
        --model "$MODEL" --key certs/demo-owner.key --out "certs/$engine.cert.json" \
        --expires "$EXPIRES" --force --recipients-file certs/demo-recipients.txt \
        --note "DEMO ONLY: signed by certs/demo-owner.key over the tiny-270m test fixture"
done
