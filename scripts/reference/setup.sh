#!/usr/bin/env bash
# Creates the Python reference environment used by scripts/reference/*.py:
# CPU-only torch + transformers, from PyPI alone. Idempotent.
#
#   scripts/reference/setup.sh            # venv at <repo>/.venv-reference
#   RUNNER_REF_VENV=/some/dir scripts/reference/setup.sh
#   PYTHON=python3.12 scripts/reference/setup.sh
#
# PyPI's Linux torch wheel is the CUDA build and depends on several GB of
# nvidia-*/cuda-* wheels. We install every package with --no-deps from the
# fully pinned requirements.txt, then torch_cpu_stubs.py compiles tiny stand-ins
# for the CUDA shared libraries torch links against (needs `cc` and `readelf`).
# CPU kernels are the official wheel's; torch.cuda.is_available() is False.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${RUNNER_REF_VENV:-$root/.venv-reference}"
python="${PYTHON:-python3}"

for tool in cc readelf ldconfig; do
  command -v "$tool" >/dev/null || { echo "setup.sh: '$tool' is needed (apt-get install gcc binutils libc-bin)" >&2; exit 2; }
done

if [ ! -x "$venv/bin/python" ]; then
  echo "creating venv at $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"

"$py" -m pip install --quiet --disable-pip-version-check --no-deps -r "$here/requirements.txt"
"$py" "$here/torch_cpu_stubs.py"
"$py" - <<'PY'
import torch, transformers, safetensors, tokenizers, numpy, gguf, accelerate
from importlib.metadata import version
assert float(torch.ones(2) @ torch.ones(2)) == 2.0
assert not torch.cuda.is_available()
print(f"reference env ok: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"safetensors {safetensors.__version__}, tokenizers {tokenizers.__version__}, numpy {numpy.__version__}, "
      f"gguf {version('gguf')}, accelerate {accelerate.__version__}")
PY
echo "$venv"
