#!/usr/bin/env python3
"""Compare the binary's allocator (src/memory/heap.rs) with glibc's (same tuning) and mimalloc.

    scripts/bench/compare_allocators.py --model /tmp/m270 [--batch 1,8,32,128] [--prompt-len 32]
        [--new-tokens 32] [--threads 2] [--rounds 3] [--repeat 3] [--prefill] [--json OUT.json]

Builds `runner` three times (default features, `--features system-alloc`, `--features mimalloc`;
each in its own target directory under target/alloc-*), then runs `runner bench --json` with each
binary in turn, `--rounds` times, so a spell of load from another tenant slows every allocator
alike. Prints, per batch size, the median over rounds of each binary's prefill and decode tokens/s
and its peak RSS, and each alternative's ratio to ours (above 1 = the alternative is faster).
`--prefill` adds a prefill-heavy shape (batch 32, prompt 128, 2 new tokens), where large
activations come and go every layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = [("runner", []), ("system", ["--features", "system-alloc"]), ("mimalloc", ["--features", "mimalloc"])]


def build(skip: bool) -> dict[str, Path]:
    bins = {}
    for name, features in VARIANTS:
        target = ROOT / "target" / f"alloc-{name}"
        if not skip:
            subprocess.run(["cargo", "build", "--release", "--locked", "--quiet", "--target-dir", str(target),
                            *features], cwd=ROOT, check=True)
        bins[name] = target / "release" / "runner"
    return bins


def bench(binary: Path, args: argparse.Namespace, batch: str, prompt_len: int, new_tokens: int) -> dict:
    out = subprocess.run([str(binary), "bench", "--model", args.model, "--batch", batch, "--prompt-len", str(prompt_len),
                          "--new-tokens", str(new_tokens), "--threads", str(args.threads), "--repeat", str(args.repeat),
                          "--json"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", default="1,8,32,128")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--prefill", action="store_true")
    p.add_argument("--json")
    p.add_argument("--no-build", action="store_true", help="use the binaries already in target/alloc-*")
    args = p.parse_args()
    bins = build(args.no_build)
    shapes = [(args.batch, args.prompt_len, args.new_tokens)]
    if args.prefill:
        shapes.append(("32", 128, 2))
    # rows[(shape, batch)][variant] = list of (prefill, decode, rss)
    rows: dict[tuple, dict[str, list]] = {}
    machine = None
    for r in range(args.rounds):
        for shape in shapes:
            for name, _ in VARIANTS:
                report = bench(bins[name], args, *shape)
                machine = machine or report["machine"]
                if report["machine"]["allocator"] != name:
                    sys.exit(f"{bins[name]} runs allocator {report['machine']['allocator']}, not {name}")
                for b in report["batches"]:
                    key = (shape[1], shape[2], b["batch"])
                    rows.setdefault(key, {}).setdefault(name, []).append(
                        (b["prefill_tokens_per_s"], b["decode_tokens_per_s"], b["peak_rss_bytes"]))
                print(f"round {r + 1}/{args.rounds} {name} prompt {shape[1]} new {shape[2]} done "
                      f"(probe FMA {report['probes']['fma_flops_per_s'] / 1e9:.1f} GFLOP/s)", file=sys.stderr)
    print(f"machine: {machine['cpu']}, {machine['isa']}, {machine['threads']} threads; "
          f"medians of {args.rounds} alternating rounds, each a `runner bench --repeat {args.repeat}`")
    head = ["prompt", "new", "batch"]
    for name, _ in VARIANTS:
        head += [f"{name} prefill", f"{name} decode", f"{name} RSS MiB"]
    head += ["system/runner prefill", "system/runner decode", "mimalloc/runner prefill", "mimalloc/runner decode"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    summary = []
    for key in sorted(rows):
        med = {n: [statistics.median(v[i] for v in rows[key][n]) for i in range(3)] for n, _ in VARIANTS}
        cells = [str(k) for k in key]
        for name, _ in VARIANTS:
            cells += [f"{med[name][0]:.1f}", f"{med[name][1]:.1f}", f"{med[name][2] / 2**20:.1f}"]
        for alt in ("system", "mimalloc"):
            cells += [f"{med[alt][0] / med['runner'][0]:.3f}", f"{med[alt][1] / med['runner'][1]:.3f}"]
        print("| " + " | ".join(cells) + " |")
        summary.append({"prompt_len": key[0], "new_tokens": key[1], "batch": key[2], "medians": med,
                        "runs": rows[key]})
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": summary}, indent=2))


if __name__ == "__main__":
    main()
