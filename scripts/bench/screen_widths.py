#!/usr/bin/env python3
"""How many of the output head's rows a cheaper screen than the runner's 8-bit one would keep,
on the real Gemma 3 270M Q4_K_M file and real hidden states.

    .venv-reference/bin/python scripts/bench/screen_widths.py [--model PATH] [--tokenizer PATH]
        [--new-tokens 24]

At batch 1 the head reads its whole 8-bit screen every step (168 MB for 262144 rows of 640), at
memory speed: a screen of fewer bytes would be the one way to a faster step there. This measures
whether one could narrow the head as well. HF transformers loads the GGUF (as
scripts/reference/gguf_parity.py does), greedy-generates from six prompts, and keeps the final
norm's output at every step (the x the head reads). For each candidate screen it counts, per x,
the rows whose upper bound reaches the best lower bound: the rows that would still have to be
read in full. Bounds are the screen's own quantisation terms only (no floating-point slack), and
the floor is at least the exact best score, so the counts are a floor on what a rigorous screen
would keep.

Screens: one scale per row with 127 levels (the runner's), 31, 15 and 7 levels; 7 levels per
32-element group; the top-d principal directions of the head's rows, the rest bounded by
Cauchy-Schwarz; the d channels largest on average in x, the rest bounded the same way.

The split screen (the high nibble of 127 levels per group of 32, centred, within 8 scales of
each weight; branch wip/split-screen) is counted twice more: with x rounded to 127 levels per
group of 32 as its first pass would read it, and, for that one, with the floor a two-pass screen
can actually reach (the best first-pass centre's row scored by the 8-bit second pass) instead of
the exact best score.

`--bench-prompts N` replaces the six text prompts with the first N of `runner bench`'s
random-token prompts (length 32, the ids compare_pytorch.py draws too): its decode states are
flatter than text's, and a screen is measured on them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("RUNNER_CACHE", Path.home() / ".cache" / "runner"))
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time there was a",
    "The mitochondria is the",
    "In 1905, Albert Einstein published",
    "Here is a list of fruits: apple, banana,",
]


def hidden_states(model_path: Path, tokenizer_path: Path, new_tokens: int, bench: int = 0):
    import torch
    from tokenizers import Tokenizer
    from transformers import Gemma3ForCausalLM

    tok = Tokenizer.from_file(str(tokenizer_path))
    model = Gemma3ForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32
    )
    model.eval()
    seen: list[np.ndarray] = []
    model.model.norm.register_forward_hook(
        lambda _m, _i, out: seen.append(out[0, -1].detach().numpy().astype(np.float64))
    )
    if bench:
        from compare_pytorch import prompts

        inputs = prompts(bench, 32, model.config.vocab_size, 2)
    else:
        inputs = [[2] + tok.encode(t, add_special_tokens=False).ids for t in PROMPTS]
    for ids in inputs:
        with torch.no_grad():
            model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False)
    head = model.lm_head.weight.detach().numpy().astype(np.float64)
    return np.array(seen), head


def kept_rows(bounds, best: np.ndarray) -> np.ndarray:
    """Per x, the rows whose upper bound reaches the larger of the screen's own best lower
    bound and the exact best score (as if the best row's lower bound were exact: the fewest any
    second pass could be left with)."""
    return np.array(
        [int((hi >= max(lo.max(), b)).sum()) for (lo, hi), b in zip(bounds, best)]
    )


def rounded(w: np.ndarray, levels: float, group: int | None) -> np.ndarray:
    shape = w.shape
    g = w.reshape(shape[0], -1, group) if group else w[:, None, :]
    s = np.abs(g).max(axis=2, keepdims=True) / levels
    s[s == 0] = 1.0
    return (np.clip(np.round(g / s), -levels, levels) * s).reshape(shape)


def quantised(x: np.ndarray, w: np.ndarray, levels: float, group: int | None = None):
    wq = rounded(w, levels, group)
    e = w - wq
    e_max, e_l2 = np.abs(e).max(axis=1), np.sqrt((e * e).sum(axis=1))
    for xi in x:
        score = wq @ xi
        r = np.minimum(np.abs(xi).sum() * e_max, np.linalg.norm(xi) * e_l2)
        yield score - r, score + r


def split(x: np.ndarray, w: np.ndarray, x_levels: float | None, group: int = 32):
    """The split screen's first pass: centres `s (16 floor(q / 16) + 7.5)` of 127 levels per
    group, within `8 s` of the weight; x in f32 or rounded to `x_levels` per group of 32 (its
    rounding error bounded by 120.5 s per unit). Yields (low, high, second-pass low)."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    s = np.abs(g).max(axis=2, keepdims=True) / 127
    s[s == 0] = 1.0
    q = np.clip(np.round(g / s), -127, 127)
    centres = (s * (16 * np.floor(q / 16) + 7.5)).reshape(n, k)
    full = (s * q).reshape(n, k)
    s = s[:, :, 0]
    for xi in x:
        xa = np.abs(xi).reshape(-1, group).sum(axis=1)
        xq, xe = xi, np.zeros_like(xa)
        if x_levels:
            xg = xi.reshape(-1, group)
            t = np.abs(xg).max(axis=1, keepdims=True) / x_levels
            t[t == 0] = 1.0
            xq = (np.round(xg / t) * t).reshape(-1)
            xe = np.abs(xi - xq).reshape(-1, group).sum(axis=1)
        score = centres @ xq
        r = s @ (8 * xa + 120.5 * xe)
        best = int(np.argmax(score))
        yield score - r, score + r, full[best] @ xi - s[best] @ xa / 2


def kept_two_floors(bounds, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per x, in one pass over [`split`]'s bounds: the rows [`kept_rows`] keeps (the exact best
    score as floor), and the rows kept when the floor is the larger of the first pass's best
    lower bound and the second pass's lower bound on the row with the best centre (the floor a
    two-pass screen reaches)."""
    exact, reached = [], []
    for (lo, hi, second), b in zip(bounds, best):
        own = lo.max()
        exact.append(int((hi >= max(own, b)).sum()))
        reached.append(int((hi >= max(own, second)).sum()))
    return np.array(exact), np.array(reached)


def projected(x: np.ndarray, w: np.ndarray, basis: np.ndarray):
    wp = w @ basis
    rest_w = np.sqrt(np.maximum((w * w).sum(axis=1) - (wp * wp).sum(axis=1), 0.0))
    for xi in x:
        xp = basis.T @ xi
        rest_x = np.sqrt(max(xi @ xi - xp @ xp, 0.0))
        score = wp @ xp
        yield score - rest_w * rest_x, score + rest_w * rest_x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=CACHE / "models" / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--tokenizer", type=Path, default=CACHE / "gemma3" / "tokenizer.json")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--bench-prompts", type=int, default=0, metavar="N",
                    help="runner bench's first N random-token prompts instead of the text ones")
    args = ap.parse_args()
    for path, fix in [(args.model, "scripts/fetch_model.sh gemma3-270m"),
                      (args.tokenizer, "scripts/fetch_tokenizer.sh")]:
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: run {fix}")

    x, w = hidden_states(args.model, args.tokenizer, args.new_tokens, args.bench_prompts)
    best = (x @ w.T).max(axis=1)
    print(f"{len(x)} x rows, head {w.shape[0]} x {w.shape[1]}; rows kept (of {w.shape[0]}):")
    print(f"{'screen':34s} {'median':>8s} {'p90':>8s} {'max':>8s}")

    def report(name: str, kept: np.ndarray) -> None:
        print(f"{name:34s} {np.median(kept):8.0f} {np.percentile(kept, 90):8.0f} {kept.max():8d}")

    for levels in (127, 31, 15, 7):
        report(f"{levels} levels a row", kept_rows(quantised(x, w, levels), best))
    report("7 levels a group of 32", kept_rows(quantised(x, w, 7, 32), best))
    report("split, f32 x", kept_rows(((lo, hi) for lo, hi, _ in split(x, w, None)), best))
    exact, reached = kept_two_floors(split(x, w, 127), best)
    report("split, x 127 levels a group", exact)
    report("  same, floor the screen reaches", reached)
    _, vectors = np.linalg.eigh(w.T @ w)
    vectors = vectors[:, ::-1]
    for d in (64, 128, 256, 320):
        report(f"top {d} principal directions", kept_rows(projected(x, w, vectors[:, :d]), best))
    order = np.argsort(-np.abs(x).mean(axis=0))
    eye = np.eye(w.shape[1])
    for d in (64, 128, 256, 384):
        report(f"{d} largest channels of x", kept_rows(projected(x, w, eye[:, order[:d]]), best))


if __name__ == "__main__":
    main()
