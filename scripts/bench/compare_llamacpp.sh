#!/usr/bin/env bash
# Compares `runner bench` with llama.cpp (llama-batched-bench; f32, bf16 and Q4_K_M GGUF files) on
# the same Gemma 3 shape, alternating the programs within every round; prints medians per engine and
# batch size and the ratio runner / the best llama.cpp file, writes an SVG chart of decode tokens/s.
#
#   scripts/bench/compare_llamacpp.sh [--shape 270m|1b] [--batch 1,8,32,128] [--prompt 32] [--new 32]
#       [--threads 2] [--rounds 2] [--model-dir DIR] [--runner BIN] [--svg FILE] [--markdown FILE]
#       [--json FILE] [--torch] [--quantize] [--runner-reads q4_k_m|checkpoint] [--wait-idle SECONDS]
#       [--setup-only]
#
#   --shape       checkpoint shape (default 270m); without --model-dir a random-weight checkpoint of
#                 that shape is made once by scripts/reference/make_model.py (cached)
#   --model-dir   use this checkpoint (config.json + safetensors) for the conversions (and for the
#                 runner with --runner-reads checkpoint)
#   --runner-reads  which weights runner reads: q4_k_m (default), the same Q4_K_M GGUF file as
#                 llama.cpp's Q4_K_M column, or checkpoint, the bf16 safetensors the GGUF files
#                 were converted from (twice the bytes a step of the Q4_K_M file reads)
#   --runner      the runner binary (default: target/release/runner; build it first)
#   --svg         the chart (default docs/figures/decode-<shape>.svg)
#   --markdown    also write the tables as markdown;  --json: every figure as JSON
#   --torch       also HF transformers f32, through scripts/bench/compare_pytorch.py --dtypes f32
#   --quantize    make the Q4_K_M file with llama-quantize from the bf16 GGUF even for 270m (by
#                 default 270m uses the real model's own Q4_K_M file, scripts/fetch_model.sh gemma3-270m)
#   --wait-idle   before each engine's run wait up to this long for idle CPUs (default 90; 0: never);
#                 a run disturbed by other processes (over 10 % of the CPUs) is done again, twice at most
#   --setup-only  build, fetch and convert, then stop
#
# Everything it builds or downloads is cached under ${RUNNER_CACHE:-~/.cache/runner}/peers/, so a
# second run goes straight to the measurements:
#   llama.cpp-<v>/     llama.cpp as vendored in the PyPI sdist of llama_cpp_python <v> (src/), built
#                      CPU-only (build/bin/llama-batched-bench, llama-quantize); the newest cached
#                      version is reused, LLAMA_CPP_PYTHON_VERSION=<v> picks another (or the latest
#                      on PyPI when none is cached)
#   venv/              cmake, ninja, sentencepiece, protobuf; torch, transformers and numpy come from
#                      the reference venv (scripts/reference/setup.sh) through a .pth file
#   models/random-<shape>/          the random-weight checkpoint (make_model.py, seed 0)
#   models/gemma3-tokenizer.model   the real Gemma 3 vocabulary as a sentencepiece model, rebuilt
#                                   from the real GGUF (gguf_vocab_to_spm.py); the converter needs it
#   models/gguf-<dir>-<key>/        f32.gguf, bf16.gguf (convert_hf_to_gguf.py), q4_k_m.gguf
#                                   (llama-quantize), keyed by the checkpoint's config and file stamps
# Measuring is done by scripts/bench/compare_llamacpp.py (see its docstring for what is timed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${RUNNER_CACHE:-$HOME/.cache/runner}"
peers="$cache/peers"
ref="${RUNNER_REF_VENV:-$root/.venv-reference}"
me="compare_llamacpp.sh"

shape=270m batch=1,8,32,128 prompt=32 new=32 threads=2 rounds=2
model_dir="" runner_reads=q4_k_m runner="$root/target/release/runner" svg="" markdown="" json="" torch=0 quantize=0 setup_only=0 wait_idle=90

die() { echo "$me: $*" >&2; exit 1; }
usage_err() { echo "$me: $*" >&2; echo "(see --help)" >&2; exit 2; }
need_val() { [ $# -ge 2 ] && [ -n "$2" ] || usage_err "$1 needs a value"; }

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --shape) need_val "$@"; shape="$2"; shift 2 ;;
    --batch) need_val "$@"; batch="$2"; shift 2 ;;
    --prompt) need_val "$@"; prompt="$2"; shift 2 ;;
    --new) need_val "$@"; new="$2"; shift 2 ;;
    --threads) need_val "$@"; threads="$2"; shift 2 ;;
    --rounds) need_val "$@"; rounds="$2"; shift 2 ;;
    --model-dir) need_val "$@"; model_dir="$2"; shift 2 ;;
    --runner-reads) need_val "$@"; runner_reads="$2"; shift 2 ;;
    --runner) need_val "$@"; runner="$2"; shift 2 ;;
    --svg) need_val "$@"; svg="$2"; shift 2 ;;
    --markdown) need_val "$@"; markdown="$2"; shift 2 ;;
    --json) need_val "$@"; json="$2"; shift 2 ;;
    --wait-idle) need_val "$@"; wait_idle="$2"; shift 2 ;;
    --torch) torch=1; shift ;;
    --quantize) quantize=1; shift ;;
    --setup-only) setup_only=1; shift ;;
    *) usage_err "unknown argument '$1'" ;;
  esac
done
case "$shape" in 270m|1b) ;; *) usage_err "--shape must be 270m or 1b (got '$shape')" ;; esac
case "$runner_reads" in q4_k_m|checkpoint) ;; *) usage_err "--runner-reads must be q4_k_m or checkpoint (got '$runner_reads')" ;; esac
[[ "$batch" =~ ^[0-9]+(,[0-9]+)*$ ]] || usage_err "--batch wants comma-separated sizes, e.g. 1,8,32 (got '$batch')"
for v in prompt new threads rounds; do
  [[ "${!v}" =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || usage_err "--$v wants a positive integer (got '${!v}')"
done
[[ "$wait_idle" =~ ^[0-9]+$ ]] || usage_err "--wait-idle wants whole seconds (got '$wait_idle')"
[ "$new" -ge 2 ] || usage_err "--new must be at least 2 (runner counts new - 1 decode steps)"
[ -n "$svg" ] || svg="$root/docs/figures/decode-$shape.svg"
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
svg="$(abspath "$svg")"; [ -z "$markdown" ] || markdown="$(abspath "$markdown")"; [ -z "$json" ] || json="$(abspath "$json")"
runner="$(abspath "$runner")"

t_all=$SECONDS
t_step=$SECONDS
step() { echo "== $*" >&2; t_step=$SECONDS; }
done_step() { echo "   done in $((SECONDS - t_step)) s" >&2; }
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
need_disk() { # dir, GiB
  local have; have="$(free_gb "$1")"
  [ "$have" -ge "$2" ] || die "$3 needs about $2 GiB free under $1, only $have GiB are"
}

# --- tools ------------------------------------------------------------------------------------
for tool in cc c++ make tar sha256sum unzip df lscpu; do
  command -v "$tool" >/dev/null || die "'$tool' is needed (apt-get install build-essential coreutils unzip util-linux)"
done
[ -x "$ref/bin/python" ] || die "the reference venv $ref is missing: run scripts/reference/setup.sh first (torch and transformers for make_model.py and the converter)"
"$ref/bin/python" -c 'import torch, transformers, safetensors, numpy' 2>/dev/null \
  || die "$ref/bin/python cannot import torch, transformers, safetensors and numpy: rerun scripts/reference/setup.sh"
if [ "$setup_only" = 0 ] && [ ! -x "$runner" ]; then
  die "$runner not found: cargo build --release first (or pass --runner BIN)"
fi
mkdir -p "$peers/models"

# --- the tool venv ----------------------------------------------------------------------------
venv="$peers/venv"
pins="cmake==4.4.5 ninja==1.13.2 sentencepiece==0.2.3 protobuf==7.36.2"
ref_site="$("$ref/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$(cat "$venv/.runner-pins" 2>/dev/null)" != "$pins $ref_site" ]; then
  step "tool venv $venv ($pins)"
  [ -x "$venv/bin/python" ] || "$ref/bin/python" -m venv "$venv" || die "could not create the venv $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --ignore-installed $pins \
    || die "pip install $pins failed (is PyPI reachable?)"
  venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  [ "$("$venv/bin/python" -c 'import sys; print(sys.version_info[:2])')" = "$("$ref/bin/python" -c 'import sys; print(sys.version_info[:2])')" ] \
    || die "$venv and $ref use different Python versions; delete $venv and rerun"
  # torch, transformers, numpy: the reference venv's, after the venv's own packages
  echo "$ref_site" > "$venv_site/zz-runner-reference-venv.pth"
  "$venv/bin/python" -c 'import torch, transformers, numpy, sentencepiece, google.protobuf' \
    || die "the tool venv $venv cannot import torch, transformers, numpy, sentencepiece and protobuf"
  echo "$pins $ref_site" > "$venv/.runner-pins"
  done_step
fi
export PATH="$venv/bin:$PATH"
py="$venv/bin/python"

# --- llama.cpp from the llama_cpp_python sdist --------------------------------------------------
version="${LLAMA_CPP_PYTHON_VERSION:-}"
if [ -z "$version" ]; then
  version="$(ls -d "$peers"/llama.cpp-*/src/CMakeLists.txt 2>/dev/null | sed 's#.*/llama\.cpp-##; s#/src/CMakeLists\.txt$##' | sort -V | tail -n1 || true)"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -z "$version" ] || [ ! -f "$peers/llama.cpp-$version/src/CMakeLists.txt" ]; then
  step "downloading the llama_cpp_python sdist ${version:-(latest)} from PyPI"
  spec="llama_cpp_python${version:+==$version}"
  "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama_cpp_python \
      --dest "$tmp/sdist" "$spec" >&2 || die "pip download $spec failed (is PyPI reachable?)"
  sdist="$(ls "$tmp"/sdist/llama_cpp_python-*.tar.gz 2>/dev/null | head -n1)"
  [ -n "$sdist" ] || die "pip download $spec produced no sdist"
  got="$(basename "$sdist" .tar.gz)"; got="${got#llama_cpp_python-}"
  [ -z "$version" ] || [ "$got" = "$version" ] || die "asked for llama_cpp_python $version, got $got"
  version="$got"
  tar -xzf "$sdist" -C "$tmp" || die "could not unpack $sdist"
  [ -f "$tmp/llama_cpp_python-$version/vendor/llama.cpp/CMakeLists.txt" ] \
    || die "the sdist has no vendor/llama.cpp/CMakeLists.txt"
  mkdir -p "$peers/llama.cpp-$version"
  rm -rf "$peers/llama.cpp-$version/src"
  mv "$tmp/llama_cpp_python-$version/vendor/llama.cpp" "$peers/llama.cpp-$version/src"
  cp "$tmp/llama_cpp_python-$version/CHANGELOG.md" "$peers/llama.cpp-$version/CHANGELOG.md" 2>/dev/null || true
  done_step
fi
lc="$peers/llama.cpp-$version"
commit="$(awk -v v="## [$version]" '$0 == v { on = 1; next } on && /^## \[/ { exit } on' "$lc/CHANGELOG.md" 2>/dev/null \
  | grep -o 'llama\.cpp@[0-9a-f]*' | head -n1 | sed 's/llama\.cpp@//' || true)"
cmake_flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF
  -DGGML_VULKAN=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF -DGGML_OPENCL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
targets=(llama-batched-bench llama-quantize)
bench_bin="$lc/build/bin/llama-batched-bench"
quant_bin="$lc/build/bin/llama-quantize"
if [ "$(cat "$lc/build.ok" 2>/dev/null)" != "${cmake_flags[*]} ${targets[*]}" ] || [ ! -x "$bench_bin" ] || [ ! -x "$quant_bin" ]; then
  step "building llama.cpp (llama_cpp_python $version, llama.cpp ${commit:-commit unknown}): ${targets[*]}, CPU only"
  rm -f "$lc/build.ok"
  cmake -S "$lc/src" -B "$lc/build" "${cmake_flags[@]}" > "$lc/cmake-config.log" 2>&1 \
    || { tail -n 30 "$lc/cmake-config.log" >&2; die "cmake configure failed (log: $lc/cmake-config.log)"; }
  cmake --build "$lc/build" --target "${targets[@]}" -j "$(nproc)" > "$lc/cmake-build.log" 2>&1 \
    || { tail -n 30 "$lc/cmake-build.log" >&2; die "the llama.cpp build failed (log: $lc/cmake-build.log)"; }
  [ -x "$bench_bin" ] && [ -x "$quant_bin" ] || die "the build finished without $bench_bin or $quant_bin"
  echo "${cmake_flags[*]} ${targets[*]}" > "$lc/build.ok"
  done_step
fi
bench_version="$("$bench_bin" --version 2>&1 | tr '\n' ' ' | sed 's/  */ /g; s/ $//')"
omp="no"; grep -q '^GGML_OPENMP:BOOL=ON' "$lc/build/CMakeCache.txt" 2>/dev/null && omp="yes"

# --- the checkpoint -----------------------------------------------------------------------------
if [ -n "$model_dir" ]; then
  model_dir="$(cd "$model_dir" 2>/dev/null && pwd)" || die "--model-dir: no such directory"
  [ -f "$model_dir/config.json" ] || die "$model_dir has no config.json"
  ls "$model_dir"/*.safetensors >/dev/null 2>&1 || die "$model_dir has no .safetensors file"
else
  model_dir="$peers/models/random-$shape"
  if [ ! -f "$model_dir/.complete" ]; then
    step "making a random-weight $shape checkpoint in $model_dir (make_model.py)"
    need_disk "$peers/models" 3 "the $shape checkpoint"
    rm -rf "$model_dir" "$model_dir.tmp"
    "$ref/bin/python" "$root/scripts/reference/make_model.py" --shape "$shape" --out "$model_dir.tmp" >&2 \
      || die "make_model.py --shape $shape failed"
    mv "$model_dir.tmp" "$model_dir"
    touch "$model_dir/.complete"
    done_step
  fi
fi
read -r cfg_hidden cfg_layers cfg_inter cfg_vocab < <("$py" - "$model_dir/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c = c.get("text_config", c)
print(c.get("hidden_size"), c.get("num_hidden_layers"), c.get("intermediate_size"), c.get("vocab_size"))
PY
) || die "cannot read $model_dir/config.json"
[ "$cfg_vocab" = 262144 ] || die "$model_dir has vocab_size $cfg_vocab; the converter is given the real Gemma 3 vocabulary (262144 tokens)"

# --- the real 270M GGUF (its vocabulary; its Q4_K_M weights for the 270m shape) --------------------
step "the real Gemma 3 270M Q4_K_M GGUF (scripts/fetch_model.sh gemma3-270m)"
real_gguf="$(PYTHON="$py" "$root/scripts/fetch_model.sh" gemma3-270m)" || die "fetching the real Gemma 3 270M GGUF failed"
done_step
spm="$peers/models/gemma3-tokenizer.model"
if [ ! -s "$spm" ]; then
  step "rebuilding tokenizer.model from the real GGUF's vocabulary"
  PYTHONPATH="$lc/src/gguf-py" "$py" "$here/gguf_vocab_to_spm.py" "$real_gguf" "$spm" \
    || die "could not rebuild tokenizer.model from $real_gguf"
  done_step
fi

# --- conversions ------------------------------------------------------------------------------
key="$( (cat "$model_dir/config.json"; cd "$model_dir" && stat -L -c '%n %s %Y' ./*.safetensors; echo "$model_dir") | sha256sum | cut -c1-12)"
conv="$peers/models/gguf-$(basename "$model_dir")-$key"
mkdir -p "$conv/hf"
for f in "$model_dir"/config.json "$model_dir"/*.safetensors "$model_dir"/model.safetensors.index.json; do
  [ -e "$f" ] && ln -sf "$f" "$conv/hf/$(basename "$f")"
done
cp -f "$spm" "$conv/hf/tokenizer.model"
st_gib="$(du -L -k -c "$model_dir"/*.safetensors | tail -n1 | awk '{ printf "%d", $1 / 1048576 + 1 }')"
for t in f32 bf16; do
  out="$conv/$t.gguf"
  [ -s "$out" ] && continue
  step "converting $model_dir to GGUF $t (convert_hf_to_gguf.py)"
  [ "$t" = f32 ] && need_gib=$(( 2 * st_gib + 1 )) || need_gib=$(( st_gib + 1 ))
  need_disk "$conv" "$need_gib" "the $t GGUF"
  "$py" "$lc/src/convert_hf_to_gguf.py" --outtype "$t" --outfile "$out.tmp" "$conv/hf" > "$conv/convert-$t.log" 2>&1 \
    || { rm -f "$out.tmp"; grep -v '^Writing:' "$conv/convert-$t.log" | tail -n 25 >&2; die "convert_hf_to_gguf.py --outtype $t failed (log: $conv/convert-$t.log)"; }
  mv -f "$out.tmp" "$out"
  done_step
done
is_270m=0
[ "$cfg_hidden $cfg_layers $cfg_inter" = "640 18 2048" ] && is_270m=1
if [ "$is_270m" = 1 ] && [ "$quantize" = 0 ]; then
  q4="$real_gguf"
  q4_note="the real Gemma 3 270M weights (scripts/fetch_model.sh gemma3-270m)"
else
  q4="$conv/q4_k_m.gguf"
  q4_note="llama-quantize Q4_K_M of the bf16 GGUF"
  if [ ! -s "$q4" ]; then
    step "quantizing $conv/bf16.gguf to Q4_K_M (llama-quantize)"
    need_disk "$conv" 2 "the Q4_K_M GGUF"
    "$quant_bin" "$conv/bf16.gguf" "$q4.tmp" Q4_K_M "$(nproc)" > "$conv/quantize.log" 2>&1 \
      || { rm -f "$q4.tmp"; tail -n 25 "$conv/quantize.log" >&2; die "llama-quantize failed (log: $conv/quantize.log)"; }
    mv -f "$q4.tmp" "$q4"
    done_step
  fi
fi

size_mib() { du -L -m "$1" | cut -f1; }
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -n1)"
isa="$(for f in avx2 fma f16c avx512f avx512_bf16 amx_bf16; do grep -qw "$f" /proc/cpuinfo && printf '%s ' "$f"; done; true)"; isa="${isa% }"
cores="$(nproc)"
runner_version="$("$runner" --version 2>/dev/null || echo unknown)"
git_rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$root" diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || git_rev="$git_rev (src/ has uncommitted changes now)"
runner_built="$(date -r "$runner" '+%Y-%m-%d %H:%M' 2>/dev/null || echo unknown)"
echo "llama_cpp_python $version; llama.cpp ${commit:-commit unknown}; llama-batched-bench: $bench_version" >&2
echo "GGUF files: f32 $conv/f32.gguf ($(size_mib "$conv/f32.gguf") MiB), bf16 $conv/bf16.gguf ($(size_mib "$conv/bf16.gguf") MiB), Q4_K_M $q4 ($(size_mib "$q4") MiB: $q4_note)" >&2
if [ "$setup_only" = 1 ]; then
  echo "setup done in $((SECONDS - t_all)) s" >&2
  exit 0
fi

# --- the measurements ---------------------------------------------------------------------------
if [ "$runner_reads" = q4_k_m ]; then
  runner_model="$q4"; runner_note="runner reads the Q4_K_M file"
else
  runner_model="$model_dir"; runner_note="runner reads the bf16 checkpoint"
fi
step "measuring: $rounds rounds, batches $batch, prompt $prompt, $new new tokens, $threads threads"
args=(--llama-bench "$bench_bin" --gguf "f32=$conv/f32.gguf" --gguf "bf16=$conv/bf16.gguf" --gguf "Q4_K_M=$q4"
  --runner "$runner" --model "$runner_model" --batch "$batch" --prompt "$prompt" --new "$new"
  --threads "$threads" --rounds "$rounds" --shape "$shape" --svg "$svg" --wait-idle "$wait_idle"
  --info "cpu=$cpu ($cores cores; $isa)"
  --info "runner=$runner_version, $runner built $runner_built; repo HEAD $git_rev; $runner_note"
  --info "llama.cpp=llama_cpp_python $version sdist, llama.cpp ${commit:-commit unknown} ($bench_version); CPU only, GGML_NATIVE, OpenMP $omp"
  --info "GGUF=f32 $(size_mib "$conv/f32.gguf") MiB and bf16 $(size_mib "$conv/bf16.gguf") MiB converted from the checkpoint $model_dir; Q4_K_M $(size_mib "$q4") MiB, $q4_note")
[ -z "$markdown" ] || args+=(--markdown "$markdown")
[ -z "$json" ] || args+=(--json "$json")
[ "$torch" = 0 ] || args+=(--torch-python "$ref/bin/python" --torch-model "$model_dir")
"$py" "$here/compare_llamacpp.py" "${args[@]}" || die "the measurements failed"
done_step
echo "total $((SECONDS - t_all)) s" >&2
