#!/usr/bin/env python3
"""Run `runner bench` and llama.cpp's `llama-batched-bench` alternately; print medians, write SVG/markdown.

The measuring half of scripts/bench/compare_llamacpp.sh, which builds llama.cpp, converts the
checkpoint and then calls this with every file in place:

    compare_llamacpp.py --llama-bench BIN --gguf f32=FILE --gguf bf16=FILE --gguf Q4_K_M=FILE \
        --runner BIN --model DIR|FILE.gguf [--batch 1,8,32,128] [--prompt 32] [--new 32] \
        [--threads 2] [--rounds 2] [--torch-python PY [--torch-model DIR]] [--svg FILE] \
        [--markdown FILE] [--json FILE] [--info K=V ...]

Every round runs each engine once over all the batch sizes, in an order rotated by one every round
(a spell of load from another tenant falls on a different engine each time):
- llama.cpp, per GGUF file: `llama-batched-bench -m FILE -c MAX_BATCH*(PROMPT+NEW) -b 2048 -ub 512
  -npp PROMPT -ntg NEW -npl BATCHES -t THREADS --output-format jsonl`: per batch size B, B distinct
  prompts of PROMPT random tokens in one prefill, then NEW steps of B tokens. prefill tok/s =
  B*PROMPT / prefill time (`speed_pp`), decode tok/s = B*NEW / decode time (`speed_tg`). The
  smallest batch size is listed twice in -npl and its first row dropped: an untimed warm-up at
  batch size, as runner bench does one untimed step per batch size.
- runner: `runner bench --model DIR|FILE.gguf --batch BATCHES --prompt-len PROMPT --new-tokens NEW
  --threads THREADS --repeat 1 --json`: prefill_tokens_per_s = B*PROMPT / prefill time, decode_tokens_per_s =
  B*(NEW-1) / decode time (the first new token comes from the prefill).
- with --torch-python: HF transformers f32 through scripts/bench/compare_pytorch.py --dtypes f32
  --repeat 1 (which also runs runner bench once per batch size; those runner figures are not used).
Both sides time a decode *step* over the whole batch, so tokens/s compare per step; the prompt
tokens are random ids in both (no padding), the KV caches fresh for every batch size.

The machine is shared: before each engine's run the script waits (up to --wait-idle seconds) for
the CPUs to be idle, and for every run it prints the share of the machine's CPU time that other
processes used meanwhile (system busy time from /proc/stat less the run's own, plus steal); a run
during which they used more than --max-others of the machine is done again (at most --retries
times; the discarded runs stay in the JSON).

Figures are medians over rounds; the ratio is runner / the fastest llama.cpp file at that batch
size (above 1 = runner faster).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def cpu_times() -> tuple[float, float]:
    """(busy, steal) seconds summed over every CPU, from /proc/stat."""
    try:
        f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq = f[:7]
    steal = f[7] if len(f) > 7 else 0
    return (user + nice + system + irq + softirq) / hz, steal / hz


def children_cpu() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def busy_fraction(seconds: float = 1.0) -> float:
    """Share of all CPUs busy (or stolen) over a short sample, while this script only sleeps."""
    b0, s0 = cpu_times()
    time.sleep(seconds)
    b1, s1 = cpu_times()
    return (b1 - b0 + s1 - s0) / (seconds * (os.cpu_count() or 1))


def wait_idle(args) -> float:
    """Wait up to --wait-idle seconds for the machine to be idle (< --idle-busy busy); return the wait."""
    t0 = time.time()
    warned = False
    while True:
        busy = busy_fraction()
        if busy < args.idle_busy or time.time() - t0 >= args.wait_idle:
            if busy >= args.idle_busy:
                log(f"  the machine is still {busy:.0%} busy after {args.wait_idle:.0f} s; measuring anyway")
            return time.time() - t0
        if not warned:
            log(f"  the machine is {busy:.0%} busy (another tenant?); waiting up to {args.wait_idle:.0f} s")
            warned = True
        time.sleep(4)


def run_llama(args, name: str, path: Path, batches: list[int]) -> dict[int, tuple[float, float]]:
    ctx = max(batches) * (args.prompt + args.new)
    ctx = (ctx + 255) // 256 * 256
    cmd = [str(args.llama_bench), "-m", str(path), "-c", str(ctx), "-b", "2048", "-ub", "512",
           "-npp", str(args.prompt), "-ntg", str(args.new), "-npl", ",".join(map(str, [batches[0]] + batches)),
           "-t", str(args.threads), "--output-format", "jsonl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-25:])
        sys.exit(f"compare_llamacpp.py: llama-batched-bench failed on {name} ({done.returncode}):\n"
                 f"  {' '.join(cmd)}\n{tail}")
    rows = {}
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "speed_tg" in r and "pl" in r:  # the first batch size runs twice: the later row counts
            rows[int(r["pl"])] = (float(r["speed_pp"]), float(r["speed_tg"]))
            args.llama_meta = {k: r[k] for k in ("n_kv_max", "n_batch", "n_ubatch", "flash_attn",
                                                 "n_threads", "n_threads_batch") if k in r}
    missing = [b for b in batches if b not in rows]
    if missing:
        sys.exit(f"compare_llamacpp.py: llama-batched-bench printed no row for batch {missing} on {name} "
                 f"(-c {ctx} too small?):\n  {' '.join(cmd)}\n" + "\n".join(done.stderr.splitlines()[-15:]))
    return rows


def run_runner(args, batches: list[int]) -> tuple[dict[int, tuple[float, float]], dict]:
    cmd = [str(args.runner), "bench", "--model", str(args.model), "--engine", str(args.engine),
           "--policy", str(args.policy), "--batch", ",".join(map(str, batches)),
           "--prompt-len", str(args.prompt), "--new-tokens", str(args.new), "--threads", str(args.threads),
           "--repeat", "1", "--probe-mib", str(args.probe_mib), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"compare_llamacpp.py: runner bench failed ({done.returncode}):\n  {' '.join(cmd)}\n{done.stderr}")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        sys.exit(f"compare_llamacpp.py: runner bench printed no JSON ({e}):\n{done.stdout[:2000]}")
    rows = {int(r["batch"]): (float(r["prefill_tokens_per_s"]), float(r["decode_tokens_per_s"]))
            for r in report["batches"]}
    return rows, report


def run_torch(args, batches: list[int]) -> dict[int, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "torch.json"
        cmd = [str(args.torch_python), str(ROOT / "scripts/bench/compare_pytorch.py"),
               "--model", str(args.torch_model or args.model),
               "--batch", ",".join(map(str, batches)), "--prompt-len", str(args.prompt),
               "--new-tokens", str(args.new), "--threads", str(args.threads), "--repeat", "1",
               "--dtypes", "f32", "--runner", str(args.runner), "--engine", str(args.engine),
               "--policy", str(args.policy), "--json", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0 or not out.exists():
            sys.exit(f"compare_llamacpp.py: compare_pytorch.py failed ({done.returncode}):\n  {' '.join(cmd)}\n"
                     + "\n".join((done.stdout + done.stderr).splitlines()[-25:]))
        rep = json.loads(out.read_text())
        args.torch_version = rep.get("torch")
        return {int(r["batch"]): (float(r["torch_f32"]["prefill_tok_s"]), float(r["torch_f32"]["decode_tok_s"]))
                for r in rep["results"]}


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def svg_chart(title: str, subtitle: str, batches: list[int], series: list[tuple[str, dict[int, float]]]) -> str:
    """Decode tokens/s against batch size, log2 x axis, linear y from 0; one polyline per engine."""
    W, H = 760, 460
    left, right, top, bottom = 70, 190, 58, 56
    pw, ph = W - left - right, H - top - bottom
    ymax_data = max((v for _, s in series for v in s.values()), default=1.0)
    decade = 10 ** (math.floor(math.log10(max(ymax_data, 1e-9))) - 1)
    step = decade * 10
    for m in (1, 2, 2.5, 5, 10):
        if ymax_data / (m * decade) <= 8:
            step = m * decade
            break
    ymax = math.ceil(ymax_data * 1.05 / step) * step
    lo, hi = math.log2(min(batches)), math.log2(max(batches))
    span = hi - lo if hi > lo else 1.0

    def X(b: float) -> float:
        return left + (math.log2(b) - lo) / span * pw if hi > lo else left + pw / 2

    def Y(v: float) -> float:
        return top + ph - v / ymax * ph

    colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
    dashes = ["", "6 3", "2 3", "8 3 2 3", "4 2", "1 2", "10 4"]
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15" font-weight="bold">{esc(title)}</text>',
           f'<text x="{left}" y="40" font-size="11" fill="#555">{esc(subtitle)}</text>']
    v = 0.0
    while v <= ymax + 1e-9:
        y = Y(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    for b in batches:
        x = X(b)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{b}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + pw / 2}" y="{H - 14}" text-anchor="middle">batch size (log scale)</text>')
    out.append(f'<text transform="translate(18 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
               f'decode tokens/s</text>')
    for i, (name, s) in enumerate(series):
        c, d = colors[i % len(colors)], dashes[i % len(dashes)]
        pts = [(X(b), Y(s[b])) for b in batches if s.get(b) is not None]
        dash = f' stroke-dasharray="{d}"' if d else ""
        width = 3 if i == 0 else 2
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="{width}"{dash} points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{c}"/>')
        ly = top + 14 + i * 20
        out.append(f'<line x1="{left + pw + 14}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="{width}"{dash}/>')
        out.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bench", type=Path, required=True)
    ap.add_argument("--gguf", action="append", default=[], metavar="NAME=FILE",
                    help="a llama.cpp engine: label and GGUF file (repeat)")
    ap.add_argument("--runner", type=Path, default=ROOT / "target/release/runner")
    ap.add_argument("--engine", type=Path, default=ROOT / "engines/gemma3.eng")
    ap.add_argument("--policy", type=Path, default=ROOT / "policies/gemma3.json")
    ap.add_argument("--model", type=Path, required=True,
                    help="what runner bench reads: a checkpoint directory or a .gguf file")
    ap.add_argument("--torch-model", type=Path,
                    help="the safetensors checkpoint HF transformers reads (default: --model)")
    ap.add_argument("--batch", default="1,8,32,128")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--probe-mib", type=int, default=256, help="runner bench's bandwidth probe size")
    ap.add_argument("--torch-python", type=Path, help="also HF transformers f32 (compare_pytorch.py) with this Python")
    ap.add_argument("--wait-idle", type=float, default=90.0,
                    help="before each engine's run, wait up to this many seconds for an idle machine (0: never)")
    ap.add_argument("--idle-busy", type=float, default=0.15, help="busier than this share of all CPUs is not idle")
    ap.add_argument("--max-others", type=float, default=0.10,
                    help="a run during which other processes used more than this share of the CPUs is done again")
    ap.add_argument("--retries", type=int, default=2, help="at most this many repeats of a disturbed run")
    ap.add_argument("--shape", help="the shape's name in titles (default: the checkpoint's file name)")
    ap.add_argument("--svg", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--info", action="append", default=[], metavar="KEY=VALUE", help="header lines")
    args = ap.parse_args()
    if args.shape is None:
        args.shape = args.model.name
    batches = sorted({int(b) for b in args.batch.split(",") if b.strip()})
    if not batches or min(batches) < 1 or args.prompt < 1 or args.new < 2 or args.rounds < 1 or args.threads < 1:
        sys.exit("compare_llamacpp.py: need batch sizes >= 1, --prompt >= 1, --new >= 2, --rounds >= 1, --threads >= 1")
    ggufs = []
    for g in args.gguf:
        name, _, path = g.partition("=")
        if not path or not Path(path).is_file():
            sys.exit(f"compare_llamacpp.py: --gguf {g}: expected NAME=FILE with an existing file")
        ggufs.append((f"llama.cpp {name}", Path(path)))
    for p, what in ((args.llama_bench, "llama-batched-bench"), (args.runner, "runner binary")):
        if not p.is_file():
            sys.exit(f"compare_llamacpp.py: {what} {p} not found")
    args.llama_meta = {}
    args.torch_version = None

    engines = ["runner"] + [n for n, _ in ggufs] + (["HF transformers f32"] if args.torch_python else [])
    samples: dict[str, dict[int, list[tuple[float, float]]]] = {e: {b: [] for b in batches} for e in engines}
    probes = []
    rounds_log = []
    load_start = load_average()
    t_start = time.time()
    for r in range(args.rounds):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            for attempt in range(args.retries + 1):
                waited = wait_idle(args) if args.wait_idle > 0 else 0.0
                t0 = time.time()
                busy0, steal0 = cpu_times()
                child0 = children_cpu()
                report = None
                if e == "runner":
                    rows, report = run_runner(args, batches)
                elif e == "HF transformers f32":
                    rows = run_torch(args, batches)
                else:
                    rows = run_llama(args, e, dict(ggufs)[e], batches)
                took = time.time() - t0
                busy1, steal1 = cpu_times()
                # CPU time the rest of the machine used while this engine ran (its own is the children's)
                others = max(0.0, (busy1 - busy0) - (children_cpu() - child0) + (steal1 - steal0)) \
                    / (took * (os.cpu_count() or 1))
                discard = others > args.max_others and attempt < args.retries
                rounds_log.append({"round": r + 1, "engine": e, "seconds": round(took, 1),
                                   "waited_s": round(waited, 1), "others_cpu_share": round(others, 3),
                                   "discarded": discard, "rows": {b: rows[b] for b in batches}})
                log(f"round {r + 1}/{args.rounds} {e:<22} {took:6.1f} s  others {others:4.0%}  load {load_average()}  "
                    + "  ".join(f"b{b} {rows[b][0]:.1f}/{rows[b][1]:.1f}" for b in batches)
                    + ("  (discarded: others over --max-others; again)" if discard else ""))
                if discard:
                    continue
                if report is not None:
                    args.runner_model = report.get("model", {})
                    args.runner_machine = report.get("machine", {})
                    probes.append(report.get("probes", {}))
                for b in batches:
                    samples[e][b].append(rows[b])
                break
    load_end = load_average()

    def med(e: str, b: int, i: int) -> float | None:
        xs = [s[i] for s in samples[e][b]]
        return statistics.median(xs) if xs else None

    llama_names = [n for n, _ in ggufs]
    cpu = args.runner_machine.get("cpu") if hasattr(args, "runner_machine") else None
    info = dict(kv.partition("=")[::2] for kv in args.info)
    header = [f"date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}",
              f"cpu: {info.pop('cpu', cpu or 'unknown')}; threads: {args.threads}",
              f"shape: {args.shape}; prompt {args.prompt}, {args.new} new tokens; batches "
              f"{','.join(map(str, batches))}; " + (f"{args.rounds} alternating rounds, medians" if args.rounds > 1
                                                   else "one round, engines in turn"),
              f"runner model: {args.model} ({getattr(args, 'runner_model', {}).get('params', '?')} params, "
              f"{getattr(args, 'runner_model', {}).get('weight_dtype', '?')})"]
    for k, v in info.items():
        header.append(f"{k}: {v}")
    if args.llama_meta:
        header.append("llama-batched-bench: " + ", ".join(f"{k} {v}" for k, v in args.llama_meta.items()))
    if args.torch_version:
        header.append(f"torch: {args.torch_version} (compare_pytorch.py --dtypes f32)")
    fma = [p.get("fma_flops_per_s", 0) / 1e9 for p in probes]
    bw = [p.get("read_bandwidth_bytes_per_s", 0) / 1e9 for p in probes]
    header.append("runner probes per round: FMA peak " + ", ".join(f"{x:.1f}" for x in fma)
                  + " GFLOP/s; read bandwidth " + ", ".join(f"{x:.1f}" for x in bw) + " GB/s")
    header.append(f"load average: start {load_start}, end {load_end}; {time.time() - t_start:.0f} s")
    oth = [x["others_cpu_share"] for x in rounds_log if not x["discarded"]]
    n_disc = sum(x["discarded"] for x in rounds_log)
    header.append(f"CPU used by other processes during the counted runs: median {statistics.median(oth):.0%}, "
                  f"max {max(oth):.0%} of the machine; {n_disc} disturbed runs done again; "
                  f"{sum(x['waited_s'] for x in rounds_log):.0f} s spent waiting for idle CPUs")

    def table(i: int, what: str, markdown: bool) -> list[str]:
        cols = ["batch"] + engines + ["best llama.cpp", "runner / best"]
        rows = []
        for b in batches:
            vals = {e: med(e, b, i) for e in engines}
            best = max(llama_names, key=lambda n: vals[n] or 0.0) if llama_names else None
            ratio = (vals["runner"] / vals[best]) if best and vals[best] else None
            rows.append([str(b)] + [fmt(vals[e]) for e in engines]
                        + [best.replace("llama.cpp ", "") if best else "-", "-" if ratio is None else f"{ratio:.2f}"])
        if markdown:
            out = [f"{what} tokens/s (median of {args.rounds})", "",
                   "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(r) + " |" for r in rows]
            return out
        widths = [max(len(c), *(len(r[j]) for r in rows)) for j, c in enumerate(cols)]
        out = [f"{what} tokens/s (median of {args.rounds})",
               "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
        out += ["  ".join(x.rjust(w) for x, w in zip(r, widths)) for r in rows]
        return out

    def samples_lines(markdown: bool) -> list[str]:
        out = ["every run, prefill / decode tokens/s per round:"]
        if markdown:
            out = ["Every run, prefill / decode tokens/s, round by round:", "",
                   "| engine | batch | " + " | ".join(f"round {r + 1}" for r in range(args.rounds)) + " |",
                   "|" + "---|" * (2 + args.rounds)]
        for e in engines:
            for b in batches:
                cells = [f"{p:.1f} / {d:.1f}" for p, d in samples[e][b]]
                out.append(("| " + " | ".join([e, str(b)] + cells) + " |") if markdown
                           else f"  {e:<22} batch {b:>4}: " + ", ".join(cells))
            oth = [f"{x['others_cpu_share']:.0%}" for x in rounds_log if x["engine"] == e and not x["discarded"]]
            out.append(("| " + " | ".join([e, "others' CPU"] + oth) + " |") if markdown
                       else f"  {e:<22} others' CPU share: " + ", ".join(oth))
        return out

    text = header + [""] + table(1, "decode", False) + [""] + table(0, "prefill", False) + [""] + samples_lines(False)
    text.append("")
    text.append("ratios: runner / the fastest llama.cpp file at that batch size (above 1 = runner faster)")
    print("\n".join(text))

    if args.markdown:
        md = ["- " + h for h in header] + [""] + table(1, "Decode", True) + [""] + table(0, "Prefill", True) \
            + [""] + samples_lines(True) + ["", "Ratios: runner / the fastest llama.cpp file at that batch size."]
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text("\n".join(md) + "\n")
        log(f"wrote {args.markdown}")
    if args.svg:
        series = [(e, {b: med(e, b, 1) for b in batches}) for e in engines]
        sub = (f"{info.get('svg_subtitle') or ''}{cpu or ''}, {args.threads} threads; prompt {args.prompt}, "
               f"{args.new} new tokens; " + (f"medians of {args.rounds} alternating rounds" if args.rounds > 1
                                              else "one round, engines in turn"))
        svg = svg_chart(f"Gemma 3 {args.shape} decode throughput: runner and llama.cpp", sub, batches, series)
        args.svg.parent.mkdir(parents=True, exist_ok=True)
        args.svg.write_text(svg)
        log(f"wrote {args.svg}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "header": header, "shape": args.shape, "batches": batches, "prompt": args.prompt, "new": args.new,
            "threads": args.threads, "rounds": args.rounds, "engines": engines,
            "gguf": {n: str(p) for n, p in ggufs}, "runner_probes": probes,
            "median": {e: {b: {"prefill_tok_s": med(e, b, 0), "decode_tok_s": med(e, b, 1)} for b in batches}
                       for e in engines},
            "runs": rounds_log}, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
