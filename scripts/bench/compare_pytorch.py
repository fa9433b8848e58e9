#!/usr/bin/env python3
"""Compare `runner bench` with HF transformers `generate` on the same checkpoint and shapes.

    .venv-reference/bin/python scripts/bench/compare_pytorch.py --model /tmp/m270 \
        [--batch 1,8] [--prompt-len 32] [--new-tokens 32] [--threads 2] [--repeat 3] \
        [--dtypes bf16,f32] [--runner target/release/runner] [--json OUT.json]

For each batch size it alternates the two programs, `--repeat` times: one `runner bench ... --json`
process (which itself runs the batch in a child process, after a warm-up step), then PyTorch in each
dtype (models loaded once, one warm-up generate per batch size). Reported numbers are medians.

PyTorch side, per run, under torch.inference_mode() with torch.set_num_threads(--threads):
- prefill: one forward over the prompts (use_cache=True, logits_to_keep=1, as generate's prefill),
  timed alone; prefill tokens/s = batch * prompt_len / time.
- decode: model.generate(greedy, max_new_tokens = min_new_tokens = new_tokens) with eos cleared on
  model.generation_config and pad_token_id set, so every run does exactly new_tokens steps; a
  streamer timestamps every new token, and decode time is from the first new token (the end of
  generate's own prefill) to the last, i.e. new_tokens - 1 decode steps, as runner bench counts them.
The prompts are runner bench's own (bos, then SplitMix64 ids from the same seed), so both programs
run identical inputs with no padding.

Ratios are runner / PyTorch (above 1 = runner faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT_SEED = 0x5EED0B0BBE4C0001  # src/bench/mod.rs PROMPT_SEED
FIRST_PLAIN_ID = 3
MASK = (1 << 64) - 1


def splitmix64(state: int):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def prompts(batch: int, prompt_len: int, vocab: int, bos: int) -> list[list[int]]:
    """runner bench's synthetic prompts (src/bench/mod.rs `prompts`)."""
    lo = FIRST_PLAIN_ID if vocab > FIRST_PLAIN_ID else 0
    rng = splitmix64(PROMPT_SEED)
    out = []
    for _ in range(batch):
        p = [bos] if prompt_len > 0 else []
        p += [lo + next(rng) % (vocab - lo) for _ in range(prompt_len - 1)]
        out.append(p)
    return out


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run_runner(args, batch: int) -> tuple[float, float, dict]:
    cmd = [str(args.runner), "bench", "--model", str(args.model), "--engine", str(args.engine),
           "--policy", str(args.policy), "--batch", str(batch), "--prompt-len", str(args.prompt_len),
           "--new-tokens", str(args.new_tokens), "--threads", str(args.threads), "--repeat", "1",
           "--probe-mib", "64", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"runner bench failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout)
    row = report["batches"][0]
    return row["prefill_s"], row["decode_s"], row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--runner", type=Path, default=ROOT / "target/release/runner")
    ap.add_argument("--engine", type=Path, default=ROOT / "engines/gemma3.eng")
    ap.add_argument("--policy", type=Path, default=ROOT / "policies/gemma3.json")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    batches = sorted({int(b) for b in args.batch.split(",")})
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if args.new_tokens < 2 or args.prompt_len < 1 or args.repeat < 1 or min(batches) < 1:
        sys.exit("need --new-tokens >= 2, --prompt-len >= 1, --repeat >= 1 and batch sizes >= 1")
    if not args.runner.exists():
        sys.exit(f"{args.runner} not found: cargo build --release first")

    import torch
    from transformers import Gemma3ForCausalLM
    from transformers.generation.streamers import BaseStreamer

    torch.set_num_threads(args.threads)
    torch_dtype = {"bf16": torch.bfloat16, "f32": torch.float32}

    class Clock(BaseStreamer):
        """Timestamps each put: the prompt first, then every new token."""

        def __init__(self):
            self.times: list[float] = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    models = {}
    for d in dtypes:
        m = Gemma3ForCausalLM.from_pretrained(str(args.model), dtype=torch_dtype[d])
        m.eval()
        gc = m.generation_config
        gc.eos_token_id = None
        gc.pad_token_id = m.config.pad_token_id if m.config.pad_token_id is not None else 0
        gc.do_sample = False
        gc.top_k = None
        gc.top_p = None
        models[d] = m
    cfg = next(iter(models.values())).config if models else None
    vocab = cfg.vocab_size if cfg else 262144
    bos = cfg.bos_token_id if cfg and cfg.bos_token_id is not None else 2

    def torch_run(model, ids, new_tokens: int) -> tuple[float, float]:
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            t = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
            prefill = time.perf_counter() - t
            clock = Clock()
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 streamer=clock)
        if out.shape[1] != ids.shape[1] + new_tokens or len(clock.times) != new_tokens + 1:
            sys.exit(f"generate did {out.shape[1] - ids.shape[1]} steps, expected {new_tokens}")
        return prefill, clock.times[-1] - clock.times[1]

    print(f"torch {torch.__version__}, {args.threads} threads; prompt {args.prompt_len}, "
          f"{args.new_tokens} new tokens ({args.new_tokens - 1} decode steps), medians of {args.repeat}")
    print(f"load average at start: {load_average()}")
    results = []
    for b in batches:
        ids = torch.tensor(prompts(b, args.prompt_len, vocab, bos), dtype=torch.long)
        for d, m in models.items():  # warm-up: one-time allocations, thread pools
            torch_run(m, ids, 2)
        ours, theirs = [], {d: [] for d in models}
        for _ in range(args.repeat):
            p, dec, _row = run_runner(args, b)
            ours.append((p, dec))
            for d, m in models.items():
                theirs[d].append(torch_run(m, ids, args.new_tokens))

        def rates(runs):
            pre = statistics.median(r[0] for r in runs)
            dec = statistics.median(r[1] for r in runs)
            return b * args.prompt_len / pre, b * (args.new_tokens - 1) / dec

        row = {"batch": b, "runner": dict(zip(("prefill_tok_s", "decode_tok_s"), rates(ours))),
               "runner_runs": ours}
        for d in models:
            row[f"torch_{d}"] = dict(zip(("prefill_tok_s", "decode_tok_s"), rates(theirs[d])))
            row[f"torch_{d}_runs"] = theirs[d]
        results.append(row)
        print(f"batch {b} done; load average {load_average()}", flush=True)

    head = f"{'batch':>5}  {'program':<12} {'prefill tok/s':>13} {'decode tok/s':>12}  {'prefill ratio':>13} {'decode ratio':>12}"
    print()
    print(head)
    for row in results:
        r = row["runner"]
        print(f"{row['batch']:>5}  {'runner':<12} {r['prefill_tok_s']:>13.1f} {r['decode_tok_s']:>12.1f}")
        for d in models:
            t = row[f"torch_{d}"]
            print(f"{'':>5}  {'torch ' + d:<12} {t['prefill_tok_s']:>13.1f} {t['decode_tok_s']:>12.1f}  "
                  f"{r['prefill_tok_s'] / t['prefill_tok_s']:>13.2f} {r['decode_tok_s'] / t['decode_tok_s']:>12.2f}")
    print(f"\nratios are runner / torch (above 1 = runner faster); load average at end: {load_average()}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "prompt_len": args.prompt_len,
                                         "new_tokens": args.new_tokens, "repeat": args.repeat,
                                         "torch": torch.__version__, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
