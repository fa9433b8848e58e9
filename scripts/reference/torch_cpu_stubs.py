#!/usr/bin/env python3
"""Make PyPI's Linux torch wheel importable without its multi-GB CUDA packages.

PyPI only serves the CUDA build of torch for Linux x86_64. Its shared objects
name the CUDA libraries (libcudart, libcublas, libcudnn, nccl, ...) as DT_NEEDED,
and those come from `nvidia-*` / `cuda-toolkit` packages of several GB. The
download host of the CPU-only wheels is not reachable here, so setup.sh
installs the PyPI wheel with `--no-deps` and this script writes tiny stand-in
libraries for every CUDA library torch links against:

* each stand-in carries the SONAME and the symbol-version nodes that torch's
  objects require (the dynamic loader checks those at load time);
* every CUDA symbol torch references is defined as a function that returns an
  error code (100 = cudaErrorNoDevice; non-zero for every other CUDA API), or an
  explanatory string for the *ErrorString / *GetErrorName style functions.

So `torch.cuda.is_available()` is False and every CPU code path is the same
binary code as the official wheel. Needs `readelf` (binutils) and a C compiler
(`cc`). Run it with the venv's python; it does not import torch.

Usage: python torch_cpu_stubs.py [--check]
  --check   only report which CUDA libraries are missing; exit 1 if any.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Libraries that belong to the CUDA stack (and are therefore stubbed) when they
# cannot be found. Anything else missing is a real problem and is reported.
CUDA_LIB = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|cudnn|cufft|cufile|cupti|curand|"
                      r"cusolver|cusparse|cusparseLt|nccl|nvrtc|nvshmem_host|nvJitLink|nvToolsExt)"
                      r"\.so(\.\d+)*$")
CUDA_SYMBOL = re.compile(r"^(cu|nccl|nvshmem|nvrtc|nvtx|cublas|cudnn|cufft|cusolver|cusparse|"
                         r"cupti|cuFile|CUPTI)")
STRING_RETURNING = re.compile(r"(ErrorString|GetErrorName|GetStatusString|GetStatusName|"
                              r"GetLastErrorString|GetErrorString)$")
STUB_MESSAGE = "CUDA is not installed (CPU-only torch: stand-in library from torch_cpu_stubs.py)"


def torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch_cpu_stubs: torch is not installed in this interpreter's environment")
    return Path(spec.origin).parent


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", *args], check=True, capture_output=True, text=True).stdout


def needed_libs(obj: Path) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", "-W", str(obj)))


def version_needs(obj: Path) -> dict[str, set[str]]:
    """file name -> version node names that `obj` requires from it."""
    out: dict[str, set[str]] = {}
    current = None
    for line in readelf("-V", "-W", str(obj)).splitlines():
        m = re.search(r"File: (\S+)\s+Cnt:", line)
        if m:
            current = m.group(1)
            out.setdefault(current, set())
            continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and current is not None:
            out[current].add(m.group(1))
    return out


def dyn_symbols(obj: Path) -> tuple[list[tuple[str, str | None, str]], set[str]]:
    """(undefined global symbols as (name, version, type), defined symbol names)."""
    undefined = []
    defined = set()
    for line in readelf("--dyn-syms", "-W", str(obj)).splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].endswith(":"):
            continue
        typ, bind, ndx, name = parts[3], parts[4], parts[6], parts[7]
        base, _, version = name.partition("@")
        version = version.lstrip("@") or None
        if ndx == "UND":
            if bind == "GLOBAL" and base:
                undefined.append((base, version, typ))
        else:
            defined.add(base)
    return undefined, defined


_LDCONFIG: str | None = None


def system_has(lib: str) -> bool:
    global _LDCONFIG
    if _LDCONFIG is None:
        _LDCONFIG = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    return any(line.split(" (")[0].strip() == lib for line in _LDCONFIG.splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    tdir = torch_dir()
    libdir = tdir / "lib"
    objects = sorted(libdir.glob("*.so*")) + sorted(tdir.glob("_C*.so"))
    present = {p.name for p in libdir.iterdir()}
    stamp = libdir / ".cpu_stubs"

    missing: set[str] = set()
    per_object_needed: dict[Path, list[str]] = {}
    for obj in objects:
        need = needed_libs(obj)
        per_object_needed[obj] = need
        for lib in need:
            if lib not in present and not system_has(lib):
                missing.add(lib)
    not_cuda = sorted(lib for lib in missing if not CUDA_LIB.match(lib))
    if not_cuda:
        print(f"torch_cpu_stubs: non-CUDA libraries missing, not stubbing: {not_cuda}", file=sys.stderr)
        return 1
    if args.check:
        print("missing CUDA libraries:", " ".join(sorted(missing)) or "none")
        return 1 if missing else 0
    if not missing:
        print("torch_cpu_stubs: nothing to do (no missing CUDA libraries)")
        return 0

    all_defined: set[str] = set()
    undefined_by_obj: dict[Path, list[tuple[str, str | None, str]]] = {}
    versions: dict[str, set[str]] = {lib: set() for lib in missing}
    for obj in objects:
        und, dfn = dyn_symbols(obj)
        all_defined |= dfn
        undefined_by_obj[obj] = und
        for file, names in version_needs(obj).items():
            if file in versions:
                versions[file] |= names

    # symbol -> (stub lib, version node or None, type)
    symbols: dict[str, dict[str, tuple[str | None, str]]] = {lib: {} for lib in missing}
    version_owner = {v: lib for lib, vs in versions.items() for v in vs}
    for obj, und in undefined_by_obj.items():
        own_missing = [lib for lib in per_object_needed[obj] if lib in missing]
        for name, version, typ in und:
            if name in all_defined:
                continue
            if version is not None:
                lib = version_owner.get(version)
                if lib is None:
                    continue  # a system library's versioned symbol (glibc, libstdc++...)
                symbols[lib][name] = (version, typ)
            elif CUDA_SYMBOL.match(name) and own_missing:
                symbols[own_missing[0]].setdefault(name, (None, typ))

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for lib in sorted(missing):
            c_lines = ["/* generated by torch_cpu_stubs.py: CUDA stand-in, every call fails */",
                       f'static const char stub_message[] = "{STUB_MESSAGE}";']
            by_version: dict[str | None, list[str]] = {}
            for name, (version, typ) in sorted(symbols[lib].items()):
                by_version.setdefault(version, []).append(name)
                if typ == "OBJECT":
                    c_lines.append(f"char {name}[256];")
                elif STRING_RETURNING.search(name):
                    c_lines.append(f"const char *{name}(void) {{ return stub_message; }}")
                else:
                    c_lines.append(f"long {name}(void) {{ return 100; }}")
            c_file = tmpdir / f"{lib}.c"
            c_file.write_text("\n".join(c_lines) + "\n")
            map_lines = []
            unversioned = by_version.pop(None, [])
            nodes = sorted(versions[lib] | set(by_version))
            for node in nodes:
                names = by_version.get(node, [])
                if node == nodes[-1]:
                    names = names + unversioned
                    unversioned = []
                body = "".join(f" {n};" for n in names)
                map_lines.append(f"{node} {{ global:{body} }};" if names else f"{node} {{ }};")
            cmd = ["cc", "-shared", "-fPIC", "-O1", "-o", str(libdir / lib), f"-Wl,-soname,{lib}",
                   str(c_file)]
            if map_lines:
                map_file = tmpdir / f"{lib}.map"
                map_file.write_text("\n".join(map_lines) + "\n")
                cmd.insert(-1, f"-Wl,--version-script={map_file}")
            subprocess.run(cmd, check=True)
            print(f"stub {lib}: {len(symbols[lib])} symbols, version nodes {sorted(versions[lib])}")
    stamp.write_text("".join(f"{lib}\n" for lib in sorted(missing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
