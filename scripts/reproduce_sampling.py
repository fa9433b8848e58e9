#!/usr/bin/env python3
"""An auditor's reimplementation of runner-sampling/1 (docs/sampling.md), independent of the
runner's code: the per-input seed, the counter-based stream, and a draw over given logits.

    pip install blake3
    python3 scripts/reproduce_sampling.py            # prints the pinned test vectors

`src/job/sampling.rs` pins the same numbers in a unit test, so the two cannot drift apart.
"""
import math
import struct

import blake3


def derive(context: str, material: bytes) -> bytes:
    return blake3.blake3(material, derive_key_context=context).digest()


def input_seed(job_seed: int, index: int) -> int:
    """The seed of input `index` (0-based in the inputs file) that gives none of its own."""
    key = derive("runner sampling input seed v1", struct.pack("<QQ", job_seed, index))
    return struct.unpack("<Q", key[:8])[0]


def uniform(seed: int, step: int) -> float:
    """Draw `step` (0-based generated token) of the stream of `seed`, in [0, 1)."""
    key = derive("runner sampling stream v1", struct.pack("<Q", seed))
    block = blake3.blake3(struct.pack("<Q", step), key=key).digest()
    return (struct.unpack("<Q", block[:8])[0] >> 11) * (1.0 / (1 << 53))


def pick(logits, temperature: float, seed: int, step: int, top_k: int = 0, top_p: float = 1.0) -> int:
    """The token drawn from one sequence's logits (floats) at `step`."""
    scaled = [l / temperature for l in logits]
    top = max(scaled)
    weight = {i: math.exp(x - top) for i, x in enumerate(scaled)}
    if top_k == 0 and top_p >= 1.0:
        order = list(range(len(scaled)))  # index order: no sort needed
    else:
        order = sorted(range(len(scaled)), key=lambda i: (-scaled[i], i))
        if 0 < top_k < len(order):
            order = order[:top_k]
        if top_p < 1.0:
            goal = top_p * sum(weight[i] for i in sorted(order))
            acc, keep = 0.0, []
            for i in order:
                keep.append(i)
                acc += weight[i]
                if acc >= goal:
                    break
            order = keep
    total = sum(weight[i] for i in order)
    target = uniform(seed, step) * total
    acc = 0.0
    for i in order:
        acc += weight[i]
        if acc > target:
            return i
    return [i for i in order if weight[i] > 0][-1]


if __name__ == "__main__":
    print("input_seed(42, 0) =", input_seed(42, 0))
    print("input_seed(42, 1) =", input_seed(42, 1))
    print("uniform(42, 0) =", repr(uniform(42, 0)))
    print("uniform(42, 1) =", repr(uniform(42, 1)))
    logits = [i * 0.25 for i in range(10)]
    print("picks =", [pick(logits, 0.8, 42, t) for t in range(8)])
