#!/usr/bin/env bash
# Run the kernel tests and the HF parity fixtures on an emulated CPU that has AVX-512, so the
# `Isa::Avx512` path is checked on a machine without it. Not part of .ci/run: it builds an
# emulator (a few minutes, once), then boots a kernel and runs the tests (about 8 minutes).
#
#   scripts/emulate/isa_paths.sh [--model corei7_skylake_x] [-- LIB TEST FILTER ARGS...]
#
# What it does, all from Debian's package archive (no other network):
#   1. builds Bochs 3.0 (trixie's source package) with AVX-512 and AMX support, --with-nogui.
#      The default CPU model, Skylake-X, has AVX-512F/CD/BW/DQ/VL. (Bookworm's kernel stops
#      booting on the tigerlake model inside an LSM's start-up, and on sapphire_rapids at
#      enabling AMX state: xsetbv faults.)
#   2. takes bookworm's kernel, isolinux, busybox-static and vgabios packages (unpacked, not
#      installed);
#   3. builds the lib's unit tests and the tests/lib binary (where the parity tests are)
#      statically (`+crt-static`, release);
#   4. boots them from an ISO, on one emulated CPU, with the serial console in a file; the
#      guest prints each test binary's output and `ISA-PATHS EXIT <code>`, then powers off.
# Exit status: 0 when every test binary passed in the guest, 1 when one failed, 2 when the
# guest never reported (the log is kept in $WORK/serial.log).
#
# Needs root (the initramfs's /dev/console is made with mknod) and Debian's apt lists.
# Cache: $RUNNER_EMU_DIR (default target/emulate); delete it to start over.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${RUNNER_EMU_DIR:-$ROOT/target/emulate}"
MODEL=corei7_skylake_x
FILTER=(kernels::)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --) shift; FILTER=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "isa_paths.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
TIMEOUT_S="${RUNNER_EMU_TIMEOUT:-5400}"

DEB=http://deb.debian.org/debian
BOCHS_SRC=pool/main/b/bochs/bochs_3.0+dfsg.orig.tar.xz
BOCHS_SRC_MD5=fbdcfe265449f5014d164dcafe1151ef
BOCHS_BIOS=pool/main/b/bochs/bochsbios_3.0+dfsg-1_all.deb
BOCHS_BIOS_MD5=37ee384b2ef6f8c16b67018aba29b00a
mkdir -p "$WORK"
cd "$WORK"

fetch() { # path md5 -> file in $WORK
  local file; file="$(basename "$1")"
  if [[ ! -f "$file" ]]; then
    curl -sSf --retry 3 -o "$file.part" "$DEB/$1"
    mv "$file.part" "$file"
  fi
  if [[ "$(md5sum "$file" | cut -d' ' -f1)" != "$2" ]]; then
    echo "isa_paths.sh: $file does not have the pinned MD5 $2; delete it and retry" >&2
    exit 2
  fi
}

# 1. Bochs.
if [[ ! -x bochs-3.0/bochs ]]; then
  fetch "$BOCHS_SRC" "$BOCHS_SRC_MD5"
  rm -rf bochs-3.0 && tar xf "$(basename "$BOCHS_SRC")"
  (cd bochs-3.0 && ./configure -q --enable-x86-64 --enable-cpu-level=6 --enable-avx \
      --enable-evex --enable-amx --enable-all-optimizations --enable-pci --with-nogui \
      --disable-docbook && make -j"$(nproc)") > bochs-build.log 2>&1 \
    || { echo "isa_paths.sh: building Bochs failed; see $WORK/bochs-build.log" >&2; exit 2; }
fi
fetch "$BOCHS_BIOS" "$BOCHS_BIOS_MD5"
rm -rf bios-deb && dpkg-deb -x "$(basename "$BOCHS_BIOS")" bios-deb

# 2. Kernel, boot loader, shell, VGA BIOS (bookworm, the machine's own archive).
if [[ ! -d pkgs ]]; then
  mkdir -p pkgs.part && (cd pkgs.part && apt-get download -q linux-image-amd64 \
      "$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')" \
      isolinux syslinux-common genisoimage busybox-static vgabios >/dev/null 2>&1)
  mkdir -p pkgs.root && for f in pkgs.part/*.deb; do dpkg-deb -x "$f" pkgs.root; done
  mv pkgs.part pkgs
fi
P="$WORK/pkgs.root"

# 3. Static test binaries (a target of their own, so build scripts and proc macros stay dynamic).
TRIPLE=x86_64-unknown-linux-gnu
mapfile -t BINS < <(cd "$ROOT" && RUSTFLAGS="-C target-feature=+crt-static" \
  cargo test --release --locked --target "$TRIPLE" --target-dir "$WORK/cargo" \
    --lib --test lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
[[ ${#BINS[@]} -eq 2 ]] || { echo "isa_paths.sh: expected 2 test binaries, got ${#BINS[*]}" >&2; exit 2; }

# 4. The guest: busybox, the test binaries, and the parity fixtures, engines and policies at
#    their path on this machine (the parity tests find them through CARGO_MANIFEST_DIR).
rm -rf initrd && mkdir -p initrd/{bin,dev,proc,sys,tmp,t}
cp "$P/bin/busybox" initrd/bin/busybox
for b in "${BINS[@]}"; do strip -o "initrd/t/$(basename "$b" | sed 's/-[0-9a-f]*$//')" "$b"; done
mkdir -p "initrd$ROOT/tests" && cp -r "$ROOT/tests/fixtures" "initrd$ROOT/tests/"
cp -r "$ROOT/engines" "$ROOT/policies" "initrd$ROOT/"
mknod initrd/dev/console c 5 1
printf '%s\n' "${FILTER[@]}" > initrd/t/filter
cat > initrd/init <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "ISA-PATHS CPU $(grep -o -w 'avx512f\|avx512bw\|amx_tile\|amx_bf16\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
status=0
cd /t
echo "ISA-PATHS RUN lib $(cat filter | tr '\n' ' ')"
./runner $(cat filter) --test-threads=1 || status=1
echo "ISA-PATHS RUN parity"
./lib parity:: --test-threads=1 || status=1
echo "ISA-PATHS EXIT $status"
# The serial port drains after the echo returns; give it time before the power goes.
sync
sleep 5
poweroff -f
EOF
chmod +x initrd/init
(cd initrd && find . | "$P/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) > initrd.gz

rm -rf iso && mkdir -p iso
cp "$P/usr/lib/ISOLINUX/isolinux.bin" "$P/usr/lib/syslinux/modules/bios/ldlinux.c32" iso/
cp "$(ls "$P"/boot/vmlinuz-* | head -n1)" iso/vmlinuz
cp initrd.gz iso/initrd.gz
cat > iso/isolinux.cfg <<'EOF'
default run
prompt 0
label run
  kernel /vmlinuz
  append initrd=/initrd.gz console=ttyS0 quiet panic=-1
EOF
"$P/usr/bin/genisoimage" -quiet -o boot.iso -b isolinux.bin -c boot.cat -no-emul-boot \
  -boot-load-size 4 -boot-info-table iso

cat > bochsrc <<EOF
cpu: model=$MODEL, ips=400000000
memory: guest=2048, host=2048
romimage: file=$WORK/bios-deb/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=$P/usr/share/vgabios/vgabios.bin
ata0-master: type=cdrom, path=$WORK/boot.iso, status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev=$WORK/serial.log
display_library: nogui
clock: sync=none
log: $WORK/bochs.log
panic: action=fatal
error: action=report
info: action=ignore
EOF

rm -f serial.log
echo "booting the guest ($MODEL); serial console in $WORK/serial.log"
start=$(date +%s)
bochs-3.0/bochs -q -f bochsrc > bochs-run.log 2>&1 &
pid=$!
code=2
while kill -0 "$pid" 2>/dev/null; do
  if grep -q "ISA-PATHS EXIT" serial.log 2>/dev/null; then
    sleep 2
    break
  fi
  if (( $(date +%s) - start > TIMEOUT_S )); then
    echo "isa_paths.sh: no result after ${TIMEOUT_S}s" >&2
    break
  fi
  sleep 5
done
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
grep -a "ISA-PATHS\|test result\|FAILED\|panicked\|^test " serial.log || true
if line=$(grep -a "ISA-PATHS EXIT" serial.log); then
  code=${line##* }
  code=${code//[^0-9]/}
fi
[[ $code == 2 ]] && tail -n 20 bochs-run.log >&2
echo "guest time: $(( $(date +%s) - start )) s; exit $code"
exit "$code"
