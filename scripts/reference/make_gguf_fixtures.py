#!/usr/bin/env python3
"""GGUF fixtures for runner's GGUF loader, with gguf-py and HF transformers as the references.

Run with the reference venv (scripts/reference/setup.sh):
    .venv-reference/bin/python scripts/reference/make_gguf_fixtures.py [--out tests/fixtures/gguf]
        [--only blocks|tiny]

Writes into tests/fixtures/gguf/:

blocks.gguf + blocks_expected.safetensors
    One tensor per block type (F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K, then Q4_1 Q5_1, which
    llama.cpp's Q5_K_M preset writes for rows that are not whole 256-element super-blocks), named by
    the type in lower case (`q4_k`), each numpy shape (3, 512) (GGUF ne0=512, ne1=3), built from
    random block bytes: random quant bits, and the f16 scale fields (d, m for Q4_1/Q5_1, and dmin
    for Q4_K/Q5_K) set to positive,
    negative, +0, -0, f16 subnormal (positive and negative), the smallest normal, large (+-60000,
    65504) and ordinary magnitudes (1e-3..1e-1, either sign). The 6-bit sub-block scale/min codes of
    Q4_K/Q5_K cover 0..63 (all-63 and 0/63/1/62 patterns in both halves of the 12-byte packing,
    and every code at least once); Q6_K's int8 scales include -128, -1, 0, 1 and 127. F32/F16/BF16
    hold ordinary values, random finite bit patterns (subnormals, huge values) and +-0, min/max.
    NaN and inf are excluded everywhere (f16 bit patterns with exponent 0x1f, bf16/f32 with an
    all-ones exponent). blocks_expected.safetensors holds, under the same names, the f32 values
    `gguf.quants.dequantize(raw, type)` gives, shape (3, 512). This script also decodes every block
    with its own scalar decoder written from the format description and requires bit equality.

tests/fixtures/models/tiny-gguf/{model.gguf, expected.json, expected_logits.safetensors}
    A random-weight Gemma 3 text model written the way llama.cpp's convert_hf_to_gguf.py writes
    architecture `gemma3` (metadata keys, tokenizer.ggml.*, llama.cpp tensor names, no
    output.weight because the embedding is tied, RMSNorm weights stored as 1 + w in F32), its
    projections spread over all eleven block types, then loaded by transformers 5.24
    (`Gemma3ForCausalLM.from_pretrained(dir, gguf_file=..., dtype=torch.float32,
    attn_implementation="eager")`) and run greedily like scripts/reference/make_fixtures.py does.

tiny-gguf/expected.json (schema "runner-gemma3-gguf-fixture/1"); keys shared with
make_fixtures.py's expected.json mean the same (prompts, single[i].tokens/margins/first_stop_index,
batched.{input_ids, attention_mask, position_ids, results}, generation, generated_by):
{
  "schema", "fixture": "tiny-gemma3", "description",
  "generated_by": {"script", "torch", "transformers", "gguf", "accelerate", "numpy", "seed"},
  "checkpoint": {"file", "sha256", "size_bytes", "gguf_version", "architecture",
                 "metadata": {key: value},          # every non-array key as written
                 "tokenizer": {"n_tokens", "bos", "eos", "unk", "pad", ...},
                 "tensors": [{"name", "type", "shape" (numpy order), "hf_name"}],
                 "projection_types": {type: [gguf names]}, "n_params"},
  "model": {...},                    # what transformers derived from the metadata (see hf_config too)
  "hf_config": {...},                # transformers' Gemma3TextConfig.to_dict() for this file
  "hf_loading": {...},               # how HF treated the tensors (norm weights: stored - 1 in f32)
  "dequantized_samples": [{"type", "gguf_name", "hf_name", "index": [row, col], "stored_bits",
                           "gguf_py_value", "hf_value", "equal"}],
  "generation": {...}, "prompts": [[int]], "single": [...], "batched": {...},
  "single_equals_batched", "max_abs_logit_diff_single_vs_batched",
  "llama_cpp_attention_scale": {...},  # same run with llama.cpp's 1/sqrt(head_dim) score scale
  "checks": {...}
}
tiny-gguf/expected_logits.safetensors: "single.<i>" / "batched.<i>", f32 [4, 512], rows = the
prefill step and the next three decode steps (as make_fixtures.py's expected_logits).

Deterministic: fixed seeds, one torch thread, no timestamps; rerunning gives byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import string
import sys
from importlib.metadata import version
from pathlib import Path

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K", "Q4_1", "Q5_1"]
REPO = Path(__file__).resolve().parents[2]
BLOCKS_SEED = 20250301
TINY_SEED = 30270

# ---------------------------------------------------------------------------------------------
# f16 scale values


def f16_bits(x: float) -> int:
    return int(np.array(x, dtype=np.float16).view(np.uint16))


def f16_value(bits: int) -> float:
    return float(np.array(bits, dtype=np.uint16).view(np.float16))


# named f16 bit patterns for the d / dmin fields; NaN (exp 0x1f, mantissa != 0) and +-inf
# (0x7c00 / 0xfc00) are deliberately absent
SCALE_CASES = {
    "positive": f16_bits(0.0123),
    "negative": f16_bits(-0.0456),
    "+0": 0x0000,
    "-0": 0x8000,
    "min_subnormal": 0x0001,      # 2^-24
    "max_subnormal": 0x03FF,      # 1023 * 2^-24
    "neg_subnormal": 0x8155,
    "min_normal": 0x0400,         # 2^-14
    "large": f16_bits(60000.0),   # rounds to 60000
    "neg_large": f16_bits(-60000.0),
    "max": 0x7BFF,                # 65504
}


def ordinary_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    """f16 bits of +-10^U(-3,-1)."""
    mag = 10.0 ** rng.uniform(-3.0, -1.0, n)
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    return (sign * mag).astype(np.float16).view(np.uint16)


def u16_bytes(bits) -> np.ndarray:
    return np.asarray(bits, dtype="<u2").reshape(-1, 1).view(np.uint8)


# ---------------------------------------------------------------------------------------------
# block layouts (ggml's, as documented in ggml-common.h; packing written here from that layout)


def pack_k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K 12-byte scales: 8 six-bit scales and 8 six-bit mins per super-block.

    bytes 0-3: sc[j] low 6 bits | top 2 bits of sc[j+4] in bits 6-7
    bytes 4-7: m[j]  low 6 bits | top 2 bits of m[j+4] in bits 6-7
    bytes 8-11: low 4 bits of sc[j+4] | low 4 bits of m[j+4] << 4
    """
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    assert sc.max(initial=0) < 64 and m.max(initial=0) < 64
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        out[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 15) | ((m[:, j + 4] & 15) << 4)
    return out


def unpack_k_scale(scales: bytes, j: int) -> tuple[int, int]:
    if j < 4:
        return scales[j] & 63, scales[j + 4] & 63
    return (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4)


def pack_nibbles_k(q: np.ndarray) -> np.ndarray:
    """256 4-bit values per super-block -> 128 bytes: per 64-value chunk c, byte c*32+l holds
    value c*64+l in the low nibble and value c*64+32+l in the high nibble."""
    q = q.reshape(-1, 4, 2, 32).astype(np.uint8)
    return (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)


def pack_q5k_high(q: np.ndarray) -> np.ndarray:
    """bit j of qh[l] = bit 4 of value j*32 + l."""
    hi = (q.reshape(-1, 8, 32) >> 4) & 1
    return np.sum(hi.astype(np.uint16) << np.arange(8, dtype=np.uint16)[None, :, None], axis=1).astype(np.uint8)


def pack_q6k(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """256 unsigned 6-bit values -> ql (128 bytes) and qh (64 bytes).

    Value h*128 + k*32 + l (h in 0..1, k in 0..3, l in 0..31): low 4 bits in ql[h*64 + (k%2)*32 + l]
    (low nibble for k < 2, high nibble for k >= 2), high 2 bits in qh[h*32 + l] at bit 2*k.
    """
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)
    lo, hi = q & 0xF, q >> 4
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=-1)  # (n,2,64)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)  # (n,2,32)
    return ql.reshape(-1, 128), qh.reshape(-1, 64)


# ---------------------------------------------------------------------------------------------
# my own simple K-quantizers (valid, not llama.cpp-optimal): per-sub-block scale/min, 6-bit
# (Q4_K/Q5_K) or 8-bit (Q6_K) codes, super-block f16 d/dmin


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _div0(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0.0, a / np.where(b == 0, 1.0, b))


def quantize_kq_asym(w: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K (nbits 4) / Q5_K (nbits 5): x ~ d*sc[j]*q - dmin*m[j], 8 sub-blocks of 32."""
    qmax = (1 << nbits) - 1
    x = w.astype(np.float32).reshape(-1, 8, 32)
    lo = np.minimum(x.min(-1), 0.0)                      # (n, 8) <= 0
    hi = x.max(-1)
    scale = (hi - lo) / qmax                             # >= 0
    d = _f16(scale.max(-1) / 63.0)
    dmin = _f16((-lo).max(-1) / 63.0)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.rint(_div0(scale, d32[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_div0(-lo, dmin32[:, None])), 0, 63).astype(np.uint8)
    eff_scale = (d32[:, None] * sc).astype(np.float32)
    eff_min = (dmin32[:, None] * m).astype(np.float32)
    q = np.clip(np.rint(_div0(x + eff_min[..., None], eff_scale[..., None])), 0, qmax).astype(np.uint8)
    return d, dmin, pack_k_scales(sc, m), q.reshape(-1, 256)


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = quantize_kq_asym(w, 4)
    blocks = np.concatenate([u16_bytes(d.view(np.uint16)), u16_bytes(dmin.view(np.uint16)), scales,
                             pack_nibbles_k(q)], axis=1)
    return blocks.reshape(w.shape[0], -1)


def quantize_q5_k(w: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = quantize_kq_asym(w, 5)
    blocks = np.concatenate([u16_bytes(d.view(np.uint16)), u16_bytes(dmin.view(np.uint16)), scales,
                             pack_q5k_high(q), pack_nibbles_k(q & 0xF)], axis=1)
    return blocks.reshape(w.shape[0], -1)


def quantize_q6_k(w: np.ndarray) -> np.ndarray:
    """x ~ d*sc[j]*(q-32), 16 sub-blocks of 16, sc int8."""
    x = w.astype(np.float32).reshape(-1, 16, 16)
    scale = np.abs(x).max(-1) / 31.0
    d = _f16(scale.max(-1) / 127.0)
    d32 = d.astype(np.float32)
    sc = np.clip(np.rint(_div0(scale, d32[:, None])), -128, 127).astype(np.int8)
    eff = (d32[:, None] * sc).astype(np.float32)
    q = (np.clip(np.rint(_div0(x, eff[..., None])), -32, 31) + 32).astype(np.uint8).reshape(-1, 256)
    ql, qh = pack_q6k(q)
    blocks = np.concatenate([ql, qh, sc.view(np.uint8), u16_bytes(d.view(np.uint16))], axis=1)
    return blocks.reshape(w.shape[0], -1)


def encode(w: np.ndarray, type_name: str) -> np.ndarray:
    """f32 (rows, cols) -> what GGUFWriter.add_tensor takes for that type."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if type_name == "F32":
        return w
    if type_name == "F16":
        return w.astype(np.float16)
    if type_name in ("BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1"):
        return gguf.quants.quantize(w, QT[type_name])
    return {"Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}[type_name](w)


def decode(raw: np.ndarray, type_name: str) -> np.ndarray:
    return np.asarray(gguf.quants.dequantize(raw, QT[type_name]), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# an independent scalar decoder (per element, np.float32 arithmetic), to cross-check gguf-py


def _f32(x) -> np.float32:
    return np.float32(x)


def _half(b: bytes, off: int) -> np.float32:
    return np.float32(np.frombuffer(b, dtype="<f2", count=1, offset=off)[0])


def scalar_decode_block(type_name: str, b: bytes) -> list[np.float32]:
    out: list[np.float32] = []
    if type_name == "Q8_0":
        d = _half(b, 0)
        return [d * _f32(v - 256 if v > 127 else v) for v in b[2:34]]
    if type_name == "Q4_0":
        d = _half(b, 0)
        qs = b[2:18]
        return [d * _f32((qs[i] & 0xF) - 8) for i in range(16)] + [d * _f32((qs[i] >> 4) - 8) for i in range(16)]
    if type_name == "Q5_0":
        d = _half(b, 0)
        qh = int.from_bytes(b[2:6], "little")
        qs = b[6:22]
        vals = [0] * 32
        for i in range(16):
            vals[i] = (qs[i] & 0xF) | (((qh >> i) & 1) << 4)
            vals[i + 16] = (qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4)
        return [d * _f32(v - 16) for v in vals]
    if type_name in ("Q4_1", "Q5_1"):
        d, m = _half(b, 0), _half(b, 2)
        if type_name == "Q4_1":
            qs = b[4:20]
            vals = [qs[i] & 0xF for i in range(16)] + [qs[i] >> 4 for i in range(16)]
        else:
            qh = int.from_bytes(b[4:8], "little")
            qs = b[8:24]
            vals = [(qs[i] & 0xF) | (((qh >> i) & 1) << 4) for i in range(16)]
            vals += [(qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4) for i in range(16)]
        return [d * _f32(v) + m for v in vals]
    if type_name in ("Q4_K", "Q5_K"):
        d, dmin = _half(b, 0), _half(b, 2)
        scales = b[4:16]
        if type_name == "Q4_K":
            qh, qs = None, b[16:144]
        else:
            qh, qs = b[16:48], b[48:176]
        for j in range(8):
            sc, m = unpack_k_scale(scales, j)
            d1, m1 = d * _f32(sc), dmin * _f32(m)
            chunk, high = divmod(j, 2)
            for l in range(32):
                byte = qs[chunk * 32 + l]
                q = (byte >> 4) if high else (byte & 0xF)
                if qh is not None:
                    q |= ((qh[l] >> j) & 1) << 4
                out.append(d1 * _f32(q) - m1)
        return out
    if type_name == "Q6_K":
        ql, qh, sc = b[0:128], b[128:192], np.frombuffer(b[192:208], dtype=np.int8)
        d = _half(b, 208)
        for n in range(256):
            h, r = divmod(n, 128)
            k, l = divmod(r, 32)
            byte = ql[h * 64 + (k % 2) * 32 + l]
            lo = (byte >> 4) if k >= 2 else (byte & 0xF)
            hi = (qh[h * 32 + l] >> (2 * k)) & 3
            out.append((d * _f32(sc[n // 16])) * _f32((lo | (hi << 4)) - 32))
        return out
    raise ValueError(type_name)


def scalar_decode(raw: np.ndarray, type_name: str) -> np.ndarray:
    if type_name == "F32":
        return np.ascontiguousarray(raw, dtype=np.float32).copy()
    if type_name == "F16":
        return np.array([_f32(v) for v in np.asarray(raw, dtype=np.float16).ravel()], dtype=np.float32).reshape(raw.shape)
    if type_name == "BF16":
        u = np.ascontiguousarray(raw).view("<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(raw.shape[0], -1)
    block, size = gguf.GGML_QUANT_SIZES[QT[type_name]]
    rows = []
    for row in np.ascontiguousarray(raw):
        data = row.tobytes()
        vals = []
        for off in range(0, len(data), size):
            vals.extend(scalar_decode_block(type_name, data[off:off + size]))
        rows.append(vals)
    return np.array(rows, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# blocks.gguf


def finite_bits(rng: np.random.Generator, n: int, width: int, exp_shift: int, exp_mask: int) -> np.ndarray:
    """Random bit patterns with the all-ones exponent (inf/NaN) turned finite by clearing the
    exponent's top bit."""
    b = rng.integers(0, 1 << width, n, dtype=np.uint64)
    bad = ((b >> exp_shift) & exp_mask) == exp_mask
    b[bad] ^= np.uint64(1 << (exp_shift + exp_mask.bit_length() - 1))
    return b


def float_block_tensor(rng: np.random.Generator, type_name: str) -> np.ndarray:
    n = 512
    if type_name == "F32":
        row0 = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 1, n)).astype(np.float32)
        row1 = finite_bits(rng, n, 32, 23, 0xFF).astype(np.uint32).view(np.float32)
        special = np.array([0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x80000001, 0x00800000, 0x7F7FFFFF,
                            0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F000000, 0x3A83126F, 0x4769E000, 0x40490FDB],
                           dtype=np.uint32).view(np.float32)
        row2 = (rng.standard_normal(n) * 0.05).astype(np.float32)
        row2[: len(special)] = special
        return np.stack([row0, row1, row2])
    if type_name == "F16":
        row0 = (rng.standard_normal(n) * 0.05).astype(np.float16)
        row1 = finite_bits(rng, n, 16, 10, 0x1F).astype(np.uint16).view(np.float16)
        special = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00,
                            SCALE_CASES["large"], 0x3555], dtype=np.uint16).view(np.float16)
        row2 = (rng.standard_normal(n) * 2.0).astype(np.float16)
        row2[: len(special)] = special
        return np.stack([row0, row1, row2])
    if type_name == "BF16":
        row0 = gguf.quants.quantize((rng.standard_normal(n) * 0.05).astype(np.float32), QT.BF16).view("<u2")
        row1 = finite_bits(rng, n, 16, 7, 0xFF).astype("<u2")
        row2 = gguf.quants.quantize((rng.standard_normal(n) * 2.0).astype(np.float32), QT.BF16).view("<u2").copy()
        special = np.array([0x0000, 0x8000, 0x0001, 0x007F, 0x8001, 0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x4770],
                           dtype="<u2")
        row2[: len(special)] = special
        return np.stack([row0, row1, row2]).view(np.uint8)
    raise ValueError(type_name)


def quant_block_tensor(rng: np.random.Generator, type_name: str) -> np.ndarray:
    """(3, row_bytes) uint8 of random blocks with chosen scale fields."""
    block, size = gguf.GGML_QUANT_SIZES[QT[type_name]]
    nb = 3 * 512 // block
    if block == 32:
        named = [SCALE_CASES[k] for k in ("positive", "negative", "+0", "-0", "min_subnormal", "max_subnormal",
                                          "neg_subnormal", "min_normal", "large", "neg_large", "max")]
        d = np.concatenate([np.array(named, dtype=np.uint16), ordinary_scales(rng, nb - len(named))])
        fields = [u16_bytes(d)]
        if type_name in ("Q4_1", "Q5_1"):
            # the minimum: the same cases, in another order against d
            m = np.concatenate([np.array(named[::-1], dtype=np.uint16), ordinary_scales(rng, nb - len(named))])
            fields.append(u16_bytes(m))
        body = rng.integers(0, 256, (nb, size - 2 * len(fields)), dtype=np.uint8)
        blocks = np.concatenate(fields + [body], axis=1)
        return blocks.reshape(3, -1)
    # super-blocks: 6 per tensor, every (d, dmin) case below appears once
    assert nb == 6
    d_cases = ["positive", "negative", "+0", "min_subnormal", "large", "neg_subnormal"]
    dmin_cases = ["positive", "max_subnormal", "large", "negative", "-0", "max"]
    d = np.array([SCALE_CASES[k] for k in d_cases], dtype=np.uint16)
    if type_name == "Q6_K":
        ql = rng.integers(0, 256, (nb, 128), dtype=np.uint8)
        qh = rng.integers(0, 256, (nb, 64), dtype=np.uint8)
        sc = rng.integers(-128, 128, (nb, 16), dtype=np.int16).astype(np.int8)
        sc[0, :6] = [-128, 127, 0, -1, 1, -64]
        sc[1, -3:] = [127, -128, 0]
        blocks = np.concatenate([ql, qh, sc.view(np.uint8), u16_bytes(d)], axis=1)
        return blocks.reshape(3, -1)
    dmin = np.array([SCALE_CASES[k] for k in dmin_cases], dtype=np.uint16)
    sc = np.zeros((nb, 8), dtype=np.uint8)
    m = np.zeros((nb, 8), dtype=np.uint8)
    sc[0], m[0] = 63, 63                                   # every packed bit set
    sc[1] = [0, 63, 1, 62, 63, 0, 62, 1]
    m[1] = [63, 0, 62, 1, 0, 63, 1, 62]
    perm = rng.permutation(64).astype(np.uint8)            # every code once over blocks 2..5
    sc[2:] = perm[:32].reshape(4, 8)
    m[2:] = perm[32:].reshape(4, 8)
    qs = rng.integers(0, 256, (nb, 128), dtype=np.uint8)
    parts = [u16_bytes(d), u16_bytes(dmin), pack_k_scales(sc, m)]
    if type_name == "Q5_K":
        parts.append(rng.integers(0, 256, (nb, 32), dtype=np.uint8))
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(3, -1)


def write_gguf(path: Path, arch: str, kv: callable, tensors: list[tuple[str, np.ndarray, str]]) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    kv(w)
    for name, arr, type_name in tensors:
        if type_name in ("F32", "F16"):
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=QT[type_name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_blocks(out: Path) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(BLOCKS_SEED)
    tensors, expected = [], {}
    for t in TYPES:
        raw = float_block_tensor(rng, t) if t in ("F32", "F16", "BF16") else quant_block_tensor(rng, t)
        vals = decode(raw, t)
        assert vals.shape == (3, 512) and vals.dtype == np.float32, (t, vals.shape)
        if not np.isfinite(vals).all():
            raise RuntimeError(f"{t}: non-finite expected value")
        mine = scalar_decode(raw, t)
        if not np.array_equal(mine.view(np.uint32), vals.view(np.uint32)):
            bad = int(np.sum(mine.view(np.uint32) != vals.view(np.uint32)))
            raise RuntimeError(f"{t}: own scalar decoder differs from gguf-py in {bad} elements")
        tensors.append((t.lower(), raw, t))
        expected[t.lower()] = np.ascontiguousarray(vals)

    def kv(w):
        w.add_type("model")
        w.add_name("runner block-type fixture")
        w.add_string("runner.fixture", "blocks: one (3, 512) tensor per block type, named by type")

    path = out / "blocks.gguf"
    write_gguf(path, "runner-blocks", kv, tensors)

    # read back: the file's bytes give the same values
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        got = decode(t.data, t.tensor_type.name)
        if t.tensor_type.name.lower() != t.name or not np.array_equal(got.view(np.uint32), expected[t.name].view(np.uint32)):
            raise RuntimeError(f"blocks.gguf read-back mismatch for {t.name}")
        if [int(x) for x in t.shape] != [512, 3]:
            raise RuntimeError(f"{t.name}: GGUF ne {list(t.shape)}")
    save_file(expected, str(out / "blocks_expected.safetensors"),
              # one key only: safetensors writes metadata from a hash map, so several keys come out in
              # a different order from run to run
              metadata={"source": "blocks.gguf via gguf.quants.dequantize (gguf-py 0.19.0)"})
    log(f"== blocks.gguf {path.stat().st_size} bytes, blocks_expected.safetensors "
        f"{(out / 'blocks_expected.safetensors').stat().st_size} bytes")
    for name, v in expected.items():
        nz = int(np.count_nonzero(v))
        log(f"   {name:5s} min {v.min():.4g} max {v.max():.4g} nonzero {nz}/1536 "
            f"subnormal-f32 {int(np.sum((v != 0) & (np.abs(v) < np.finfo(np.float32).tiny)))} "
            f"negzero {int(np.sum(np.signbit(v) & (v == 0)))}")


# ---------------------------------------------------------------------------------------------
# tiny-gemma3.gguf

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FF, WINDOW = 512, 256, 6, 2, 1, 256, 256, 8
RMS_EPS, ROPE_BASE, CONTEXT = 1e-6, 1_000_000.0, 4096
MAX_NEW_TOKENS = 48
LOGIT_STEPS = 4
PROMPT_LENGTHS = (3, 7, 12, 1)
STOP_TOKEN_IDS = (1, 106)
PAD_ID = 0

PROJ = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
NORMS = ["attn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"]
# every block type on at least one projection; the big float types only on the small k/v matrices
# (plus the embedding in Q8_0) to keep the file small
PLAN = {
    0: ("Q4_K", "F32", "F16", "Q5_0", "Q4_0", "Q4_K", "Q6_K"),
    1: ("Q5_K", "BF16", "Q8_0", "Q4_K", "Q5_0", "Q4_1", "Q5_K"),
    2: ("Q4_0", "Q6_K", "Q4_K", "Q5_K", "Q4_K", "Q5_0", "Q6_K"),
    3: ("Q5_0", "Q8_0", "Q5_K", "Q4_0", "Q5_K", "Q4_K", "Q8_0"),
    4: ("Q4_K", "Q4_0", "Q8_0", "Q6_K", "Q4_0", "Q5_K", "Q5_0"),
    5: ("Q5_K", "Q4_K", "Q5_0", "Q5_1", "Q6_K", "Q4_0", "Q4_K"),
}
HF_NAMES = {
    "attn_norm": "input_layernorm.weight", "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
    "attn_q_norm": "self_attn.q_norm.weight", "attn_k_norm": "self_attn.k_norm.weight",
    "post_attention_norm": "post_attention_layernorm.weight", "ffn_norm": "pre_feedforward_layernorm.weight",
    "ffn_gate": "mlp.gate_proj.weight", "ffn_up": "mlp.up_proj.weight", "ffn_down": "mlp.down_proj.weight",
    "post_ffw_norm": "post_feedforward_layernorm.weight",
}


def hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    _, n, kind, _ = gguf_name.split(".")
    return f"model.layers.{n}.{HF_NAMES[kind]}"


def proj_shape(kind: str) -> tuple[int, int]:  # numpy (out, in) = GGUF (ne1, ne0)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {"attn_q": (q, HIDDEN), "attn_k": (kv, HIDDEN), "attn_v": (kv, HIDDEN), "attn_output": (HIDDEN, q),
            "ffn_gate": (FF, HIDDEN), "ffn_up": (FF, HIDDEN), "ffn_down": (HIDDEN, FF)}[kind]


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """512 SentencePiece-style pieces laid out like Gemma's: control tokens at 0-4 and 105/106,
    byte tokens, then plain pieces. Only ids matter to the fixture; this keeps the metadata
    realistic for a loader that reads it."""
    tokens: list[str | None] = [None] * VOCAB
    types = [int(gguf.TokenType.NORMAL)] * VOCAB
    scores = [0.0] * VOCAB
    for i, s in {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 105: "<start_of_turn>",
                 106: "<end_of_turn>"}.items():
        tokens[i] = s
        types[i] = int(gguf.TokenType.UNKNOWN if s == "<unk>" else gguf.TokenType.CONTROL)
        scores[i] = -1000.0
    for b in range(256):
        tokens[107 + b] = f"<0x{b:02X}>"
        types[107 + b] = int(gguf.TokenType.BYTE)
    pieces = ["\u2581"] + list(string.ascii_lowercase) + ["\u2581" + c for c in string.ascii_lowercase]
    pieces += list(string.ascii_uppercase) + ["\u2581" + c for c in string.ascii_uppercase]
    pieces += list(string.digits) + list(".,;:!?'\"()-")
    pieces += ["\u2581" + a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    free = [i for i in range(VOCAB) if tokens[i] is None]
    for rank, i in enumerate(free):
        tokens[i] = pieces[rank]
        scores[i] = -float(rank)
    assert len(set(tokens)) == VOCAB
    return tokens, scores, types  # type: ignore[return-value]


def tiny_weights(seed: int) -> dict[str, np.ndarray]:
    """f32 weights in HF's convention (norm weights w; the file stores 1 + w).

    Scales as make_fixtures.py's init_text_weights (there: why): embedding N(0, 0.6), projections
    N(0, 1.6/sqrt(fan_in)), post-attention / post-feedforward norm w = 4 + N(0,1), final norm
    w = -1 + N(0,1), other norms N(0, 0.5)."""
    rng = np.random.default_rng(seed)
    w = {"token_embd.weight": rng.standard_normal((VOCAB, HIDDEN)) * 0.6}
    for i in range(LAYERS):
        for kind in PROJ:
            out_f, in_f = proj_shape(kind)
            w[f"blk.{i}.{kind}.weight"] = rng.standard_normal((out_f, in_f)) * (1.6 / math.sqrt(in_f))
        for kind in NORMS:
            n = HEAD_DIM if kind in ("attn_q_norm", "attn_k_norm") else HIDDEN
            if kind in ("post_attention_norm", "post_ffw_norm"):
                w[f"blk.{i}.{kind}.weight"] = 4.0 + rng.standard_normal(n)
            else:
                w[f"blk.{i}.{kind}.weight"] = rng.standard_normal(n) * 0.5
    w["output_norm.weight"] = -1.0 + rng.standard_normal(HIDDEN)
    return {k: v.astype(np.float32) for k, v in w.items()}


def tiny_tensor_list(seed: int) -> list[tuple[str, np.ndarray, str]]:
    """(gguf name, array as written, type) in file order: token_embd, blk.0.* .. blk.5.* (sorted
    by name within a block), output_norm."""
    w = tiny_weights(seed)
    out = [("token_embd.weight", encode(w["token_embd.weight"], "Q8_0"), "Q8_0")]
    for i in range(LAYERS):
        items = []
        for kind, t in zip(PROJ, PLAN[i]):
            name = f"blk.{i}.{kind}.weight"
            items.append((name, encode(w[name], t), t))
        for kind in NORMS:
            name = f"blk.{i}.{kind}.weight"
            items.append((name, (w[name] + np.float32(1.0)).astype(np.float32), "F32"))
        out.extend(sorted(items))
    out.append(("output_norm.weight", (w["output_norm.weight"] + np.float32(1.0)).astype(np.float32), "F32"))
    # the quantizers must be close to the f32 weights they came from
    for name, arr, t in out:
        if name.endswith("norm.weight"):
            continue
        ref = w[name]
        rel = float(np.sqrt(np.mean((decode(arr, t) - ref) ** 2)) / np.sqrt(np.mean(ref ** 2)))
        if rel > {"Q4_0": 0.15, "Q4_1": 0.15, "Q4_K": 0.15, "Q5_0": 0.08, "Q5_1": 0.08, "Q5_K": 0.08, "Q6_K": 0.04}.get(t, 0.01):
            raise RuntimeError(f"{name} {t}: relative rms error {rel:.3g}")
    return out


def tiny_kv(w: gguf.GGUFWriter) -> None:
    """Metadata in the order and with the value types llama.cpp's converter uses for gemma3."""
    w.add_type("model")
    w.add_name("tiny gemma3 fixture")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_sliding_window(WINDOW)
    w.add_head_count_kv(KV_HEADS)
    tokens, scores, types = tiny_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_sep_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_file_type(int(gguf.LlamaFileType.GUESSED))  # mixed types: no single llama.cpp ftype fits


# ---------------------------------------------------------------------------------------------
# shared with gguf_parity.py


def log(msg: str) -> None:
    print(msg, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions() -> dict:
    import torch
    import transformers

    return {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
            "gguf": version("gguf"), "accelerate": version("accelerate"), "numpy": np.__version__,
            "tokenizers": version("tokenizers")}


def load_hf_gguf(path: Path):
    import torch
    from transformers import Gemma3ForCausalLM

    model, info = Gemma3ForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                    attn_implementation="eager", output_loading_info=True)
    model.eval()
    missing = [k for k in info["missing_keys"] if k != "lm_head.weight"]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        raise RuntimeError(f"{path.name}: load info {info}")
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = PAD_ID
    gc.bos_token_id = None
    gc.do_sample = False
    gc.temperature = None
    gc.top_p = None
    gc.top_k = None
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise RuntimeError("lm_head is not tied to embed_tokens")
    restore_gemma3_config(model, path)
    return model


def restore_gemma3_config(model, path: Path) -> None:
    """Put back what transformers 5.24's GGUF loader drops from a Gemma 3 file, as the runner and
    llama.cpp read it, so that HF's reference is the file's model:
    - the global layers' rope scaling (`gemma3.rope.scaling.type` and `.factor`: linear 8 in 4B,
      12B and 27B files; the loader reads only `gemma3.rope.freq_base`);
    - `query_pre_attn_scalar`, which GGUF does not store: `hidden / heads` (168) for the 62-layer
      27B shape, else the key length (llama.cpp's rule; the loader keeps HF's default 256).
    A file with a key this cannot represent (a local rope base or a layer pattern of its own) is
    refused rather than given a wrong reference. A no-op for the 270M, 1B and the fixtures."""
    import gguf
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    fields = gguf.GGUFReader(str(path)).fields

    def value(key):
        f = fields.get(f"gemma3.{key}")
        return None if f is None else f.contents()

    cfg = model.config
    # Keys the loader also drops, checked against what HF runs instead of applied.
    local_base = value("rope.freq_base_swa")
    if local_base is not None and float(local_base) != float(cfg.rope_parameters["sliding_attention"]["rope_theta"]):
        raise RuntimeError(f"{path.name}: gemma3.rope.freq_base_swa = {local_base}; this reference does not apply it")
    pattern = value("attention.sliding_window_pattern")
    if pattern is not None:
        if isinstance(pattern, list):
            kinds = ["sliding_attention" if p else "full_attention" for p in pattern]
        else:
            kinds = ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention"
                     for i in range(cfg.num_hidden_layers)]
        if kinds != list(cfg.layer_types):
            raise RuntimeError(f"{path.name}: gemma3.attention.sliding_window_pattern gives layers "
                               f"{kinds}, HF runs {cfg.layer_types}; this reference does not apply it")
    kind = value("rope.scaling.type")
    if kind is not None:
        if kind != "linear":
            raise RuntimeError(f"{path.name}: rope scaling {kind!r}; only linear is Gemma 3's")
        factor = float(value("rope.scaling.factor"))
        full = dict(cfg.rope_parameters["full_attention"])
        if not (full.get("rope_type") == "linear" and float(full.get("factor", 0.0)) == factor):
            full.update({"rope_type": "linear", "factor": factor})
            cfg.rope_parameters["full_attention"] = full
            model.model.rotary_emb = Gemma3RotaryEmbedding(cfg)
            log(f"{path.name}: restored the global layers' rope scaling (linear, factor {factor})")
    layers, hidden, heads = (value(k) for k in ("block_count", "embedding_length", "attention.head_count"))
    scalar = hidden // heads if layers == 62 else value("attention.key_length")
    if scalar is not None and float(cfg.query_pre_attn_scalar) != float(scalar):
        cfg.query_pre_attn_scalar = scalar
        for layer in model.model.layers:
            layer.self_attn.scaling = scalar ** -0.5
        log(f"{path.name}: query_pre_attn_scalar set to {scalar} (the loader's default was another)")


def hf_model_summary(model) -> dict:
    import torch

    cfg = model.config
    rot = model.model.rotary_emb
    rp = {lt: {k: v for k, v in sorted(cfg.rope_parameters[lt].items())} for lt in ("sliding_attention", "full_attention")}
    return {
        "model_type": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "sliding_window": cfg.sliding_window,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "hidden_activation": cfg.hidden_activation,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "final_logit_softcapping": cfg.final_logit_softcapping,
        "attn_logit_softcapping": cfg.attn_logit_softcapping,
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": cfg.pad_token_id,
        "layer_types": list(cfg.layer_types),
        "rope": rp,
        "rope_inv_freq": {lt: getattr(rot, f"{lt}_inv_freq").float().tolist() for lt in ("sliding_attention", "full_attention")},
        "attn_scaling": cfg.query_pre_attn_scalar ** -0.5,
        "attn_scaling_used": sorted({float(l.self_attn.scaling) for l in model.model.layers}),
        "embed_scale": float(model.model.embed_tokens.embed_scale.to(torch.float32)),
    }


def hf_config_dict(model) -> dict:
    d = model.config.to_dict()
    d.pop("_name_or_path", None)  # the directory it was loaded from: machine-specific
    return json.loads(json.dumps(d, sort_keys=True, default=str))


def left_pad(prompts: list[list[int]]):
    import torch

    width = max(len(p) for p in prompts)
    ids = [[PAD_ID] * (width - len(p)) + p for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    m = torch.tensor(mask)
    pos = (m.cumsum(-1) - 1).masked_fill(m == 0, 0)
    return torch.tensor(ids), m, pos


def margins_of(logits) -> list[float]:
    import torch

    top = torch.topk(logits.float(), 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).tolist()


def first_stop(tokens: list[int]):
    return next((i for i, t in enumerate(tokens) if t in STOP_TOKEN_IDS), None)


def first_near_tie(margins: list[float], eps: float = 0.01):
    return next((i for i, m in enumerate(margins) if m < eps), None)


def generate(model, input_ids, attention_mask, max_new_tokens: int):
    import torch

    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                             max_new_tokens=max_new_tokens, min_new_tokens=0, eos_token_id=None,
                             pad_token_id=PAD_ID, return_dict_in_generate=True, output_logits=True)
    new = out.sequences[:, input_ids.shape[1]:]
    if new.shape[1] != max_new_tokens:
        raise RuntimeError(f"generation stopped early: {new.shape[1]} tokens")
    logits = torch.stack(out.logits, dim=1)  # [batch, steps, vocab]
    if not torch.equal(logits.argmax(-1), new):
        raise RuntimeError("generated tokens are not the argmax of the raw logits (a processor interfered)")
    return new, logits


def quality(tokens: list[int]) -> dict:
    distinct = len(set(tokens))
    repeats = sum(1 for a, b in zip(tokens, tokens[1:]) if a == b) / max(1, len(tokens) - 1)
    tail = tokens[-24:]
    short_loop = any(all(tail[i] == tail[i + p] for i in range(len(tail) - p)) for p in range(1, 5))
    return {"distinct": distinct, "repeat_prev": repeats, "short_loop": short_loop}


# ---------------------------------------------------------------------------------------------
# an independent f32 forward over the GGUF tensors (llama.cpp's view: norm gain = stored weight)


def reference_logits(params: dict, ids: list[int], gains: str, qpas: float, layer_types: list[str]):
    """params: gguf name -> f32 torch tensor (dequantized, norms as stored). gains: "stored" multiplies
    by the stored norm weight (llama.cpp), "hf" by f32(1 + f32(stored - 1)) (what transformers does)."""
    import torch

    def gain(name):
        g = params[name]
        return g if gains == "stored" else (1.0 + (g - 1.0))

    def rms(x, name):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * gain(name)

    def rope(x, pos, theta):
        inv = 1.0 / (theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        f = pos[:, None].float() * inv[None, :]
        emb = torch.cat([f, f], -1)
        half = HEAD_DIM // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * emb.cos() + rot * emb.sin()

    T = len(ids)
    pos = torch.arange(T)
    x = params["token_embd.weight"][torch.tensor(ids)] * torch.tensor(math.sqrt(HIDDEN), dtype=torch.float32)
    causal = pos[None, :] <= pos[:, None]
    for i, lt in enumerate(layer_types):
        P = lambda k: params[f"blk.{i}.{k}.weight"]  # noqa: E731
        h = rms(x, f"blk.{i}.attn_norm.weight")
        q = (h @ P("attn_q").T).view(T, HEADS, HEAD_DIM).transpose(0, 1)
        k = (h @ P("attn_k").T).view(T, KV_HEADS, HEAD_DIM).transpose(0, 1)
        v = (h @ P("attn_v").T).view(T, KV_HEADS, HEAD_DIM).transpose(0, 1)
        theta = 10000.0 if lt == "sliding_attention" else ROPE_BASE
        q = rope(rms(q, f"blk.{i}.attn_q_norm.weight"), pos, theta)
        k = rope(rms(k, f"blk.{i}.attn_k_norm.weight"), pos, theta)
        k = k.repeat_interleave(HEADS // KV_HEADS, 0)
        v = v.repeat_interleave(HEADS // KV_HEADS, 0)
        s = (q @ k.transpose(1, 2)) * (qpas ** -0.5)
        allowed = causal & (pos[None, :] > pos[:, None] - WINDOW) if lt == "sliding_attention" else causal
        a = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v
        o = a.transpose(0, 1).reshape(T, HEADS * HEAD_DIM) @ P("attn_output").T
        x = x + rms(o, f"blk.{i}.post_attention_norm.weight")
        h = rms(x, f"blk.{i}.ffn_norm.weight")
        g = torch.nn.functional.gelu(h @ P("ffn_gate").T, approximate="tanh")
        x = x + rms((g * (h @ P("ffn_up").T)) @ P("ffn_down").T, f"blk.{i}.post_ffw_norm.weight")
    x = rms(x, "output_norm.weight")
    return x @ params["token_embd.weight"].T


def make_prompts(seed: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed + 1000)
    prompts = []
    for n in PROMPT_LENGTHS:
        body = torch.randint(3, VOCAB, (n - 1,), generator=g).tolist() if n > 1 else []
        prompts.append([2] + body)
    return prompts


def build_tiny(out: Path) -> None:
    import torch
    from safetensors.torch import save_file

    path = out / "model.gguf"
    tensors = tiny_tensor_list(TINY_SEED)
    write_gguf(path, "gemma3", tiny_kv, tensors)
    size = path.stat().st_size
    log(f"== tiny-gemma3.gguf {size} bytes")
    log(f"   {'tensor':32s} {'type':5s} numpy shape")
    for name, arr, t in tensors:
        shape = decode(arr, t).shape
        log(f"   {name:32s} {t:5s} {tuple(shape)}")
    if size > 3_100_000:
        raise RuntimeError(f"tiny-gemma3.gguf is {size} bytes")
    used = {t for i in PLAN for t in PLAN[i]}
    if used != set(TYPES):
        raise RuntimeError(f"projection types {sorted(used)} miss {sorted(set(TYPES) - used)}")

    # what the file holds, read back with gguf-py
    reader = gguf.GGUFReader(str(path))
    stored: dict[str, np.ndarray] = {}
    types: dict[str, str] = {}
    for t in reader.tensors:
        stored[t.name] = decode(t.data, t.tensor_type.name).reshape([int(x) for x in reversed(t.shape)])
        types[t.name] = t.tensor_type.name
    metadata = {}
    for k, f in reader.fields.items():
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        v = f.contents()
        metadata[k] = v.item() if hasattr(v, "item") else v
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = load_hf_gguf(path)
    sd = model.state_dict()

    # every tensor is what gguf-py dequantizes; norm weights are stored - 1 (f32 numpy subtraction)
    n_checked, norm_info = 0, {"count": 0, "stored_minus_1_exact": 0, "hf_gain_differs_from_stored": 0,
                               "max_abs_hf_gain_minus_stored": 0.0}
    for name, vals in stored.items():
        hf = sd[hf_name(name)].numpy()
        if name.endswith("norm.weight"):
            want = (vals - np.float32(1.0)).astype(np.float32)
            gain = (np.float32(1.0) + hf).astype(np.float32)  # what Gemma3RMSNorm multiplies by
            norm_info["count"] += vals.size
            norm_info["stored_minus_1_exact"] += int(np.sum(want.astype(np.float64) == vals.astype(np.float64) - 1.0))
            norm_info["hf_gain_differs_from_stored"] += int(np.sum(gain != vals))
            norm_info["max_abs_hf_gain_minus_stored"] = max(norm_info["max_abs_hf_gain_minus_stored"],
                                                            float(np.abs(gain - vals).max()))
        else:
            want = vals
        if hf.shape != want.shape or not np.array_equal(hf.view(np.uint32), want.view(np.uint32)):
            raise RuntimeError(f"{name}: HF parameter {hf_name(name)} is not the gguf-py value")
        n_checked += 1
    own = [k for k in sd if "inv_freq" not in k and "embed_scale" not in k and k != "lm_head.weight"]
    if n_checked != len(own):
        raise RuntimeError(f"checked {n_checked} tensors, HF model has {len(own)}")

    # one element per type as HF sees it
    samples = []
    for t in TYPES:
        name = next(n for n, _, tt in tensors if tt == t and not n.endswith("norm.weight"))
        r, c = 1, 37
        while stored[name][r, c] == 0:  # a nonzero element says more
            c += 1
        raw_bits = None
        if t in ("F32", "F16", "BF16"):
            arr = next(a for n, a, _ in tensors if n == name)
            raw = arr.view(np.uint16 if t != "F32" else np.uint32) if t != "BF16" else arr.view("<u2")
            raw_bits = f"0x{int(raw[r, c]):0{8 if t == 'F32' else 4}x}"
        v = float(stored[name][r, c])
        hv = float(sd[hf_name(name)][r, c])
        samples.append({"type": t, "gguf_name": name, "hf_name": hf_name(name), "index": [r, c],
                        "stored_bits": raw_bits, "gguf_py_value": v, "hf_value": hv, "equal": v == hv})
    for name in ("blk.0.attn_norm.weight", "output_norm.weight"):
        v = float(stored[name][5])
        samples.append({"type": "F32 (norm)", "gguf_name": name, "hf_name": hf_name(name), "index": [5],
                        "stored_bits": f"0x{int(np.float32(v).view(np.uint32)):08x}", "gguf_py_value": v,
                        "hf_value": float(sd[hf_name(name)][5]),
                        "equal": float(np.float32(v) - np.float32(1)) == float(sd[hf_name(name)][5]),
                        "note": "hf_value = f32(stored - 1); Gemma3RMSNorm multiplies by f32(1 + hf_value)"})

    cfg = model.config
    summary = hf_model_summary(model)
    prompts = make_prompts(TINY_SEED)
    single, single_logits = [], {}
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        new, logits = generate(model, ids, torch.ones_like(ids), MAX_NEW_TOKENS)
        toks = new[0].tolist()
        single.append({"tokens": toks, "margins": margins_of(logits[0]), "first_stop_index": first_stop(toks)})
        single_logits[f"single.{i}"] = logits[0, :LOGIT_STEPS].contiguous()
    ids, mask, pos = left_pad(prompts)
    new, logits = generate(model, ids, mask, MAX_NEW_TOKENS)
    batched, batched_logits = [], {}
    for i in range(len(prompts)):
        toks = new[i].tolist()
        batched.append({"tokens": toks, "margins": margins_of(logits[i]), "first_stop_index": first_stop(toks)})
        batched_logits[f"batched.{i}"] = logits[i, :LOGIT_STEPS].contiguous()
    same = all(s["tokens"] == b["tokens"] for s, b in zip(single, batched))
    diff = max(float((single_logits[f"single.{i}"] - batched_logits[f"batched.{i}"]).abs().max())
               for i in range(len(prompts)))

    # independent forward over the file's tensors
    params = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in stored.items()}
    ref = {}
    for variant, gains, qpas in (("hf", "hf", float(cfg.query_pre_attn_scalar)),
                                 ("stored_gain", "stored", float(cfg.query_pre_attn_scalar)),
                                 ("llama_cpp_scale", "stored", float(HEAD_DIM))):
        d, agree = 0.0, True
        for i, p in enumerate(prompts):
            seq = p + single[i]["tokens"][:-1]
            lg = reference_logits(params, seq, gains, qpas, list(cfg.layer_types))[len(p) - 1:]
            if variant != "llama_cpp_scale":
                agree &= lg.argmax(-1).tolist() == single[i]["tokens"]
                d = max(d, float((lg[:LOGIT_STEPS] - single_logits[f"single.{i}"]).abs().max()))
            else:
                d = max(d, float((lg[:LOGIT_STEPS] - single_logits[f"single.{i}"]).abs().max()))
        ref[variant] = (d, agree)
    if not ref["hf"][1] or ref["hf"][0] > 1e-3:
        raise RuntimeError(f"independent forward disagrees with HF: {ref['hf']}")

    # the same model with llama.cpp's attention scale 1/sqrt(head_dim) (HF takes 1/sqrt(256))
    for layer in model.model.layers:
        layer.self_attn.scaling = HEAD_DIM ** -0.5
    alt = []
    for p in prompts:
        t = torch.tensor([p])
        new_alt, lg_alt = generate(model, t, torch.ones_like(t), MAX_NEW_TOKENS)
        alt.append({"tokens": new_alt[0].tolist(), "margins": margins_of(lg_alt[0])})

    all_margins = [m for s in single + batched for m in s["margins"]]
    q = [quality(s["tokens"]) for s in single]
    if any(x["short_loop"] or x["distinct"] < 8 for x in q):
        raise RuntimeError(f"degenerate generation {q}")
    if not same:
        raise RuntimeError("single and batched tokens differ")

    tensor_rows = [{"name": n, "type": types[n], "shape": list(stored[n].shape), "hf_name": hf_name(n)}
                   for n, _, _ in tensors]
    proj_types = {t: [n for n, _, tt in tensors if tt == t and not n.endswith("norm.weight")] for t in TYPES}
    expected = {
        "schema": "runner-gemma3-gguf-fixture/1",
        "fixture": "tiny-gemma3",
        "description": "Random-weight Gemma 3 text model as llama.cpp's convert_hf_to_gguf.py writes arch gemma3: "
                       "vocab 512, hidden 256, 6 layers (HF's default pattern: 0-4 sliding, 5 global), 2 heads / 1 "
                       "kv head, head_dim 256, intermediate 256, sliding window 8, rms eps 1e-6, rope base 1e6 "
                       "(local 10000 is HF's default). token_embd Q8_0 (tied output), projections spread over "
                       "F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K, norms F32 stored as 1 + w. Note "
                       "query_pre_attn_scalar: the file cannot state it; HF takes its default 256, llama.cpp "
                       "head_dim (hidden/heads for the 27B); head_dim is 256 here so both agree, as they do "
                       "for every published Gemma 3 but the 27B.",
        "generated_by": {"script": "scripts/reference/make_gguf_fixtures.py", **versions(), "seed": TINY_SEED},
        "checkpoint": {
            "file": path.name, "sha256": sha256(path), "size_bytes": size,
            "gguf_version": int(reader.fields["GGUF.version"].contents()),
            "architecture": metadata["general.architecture"],
            "metadata": metadata,
            "tokenizer": {"n_tokens": n_tokens, "model": metadata["tokenizer.ggml.model"],
                          "bos": 2, "eos": 1, "unk": 3, "pad": 0},
            "tensors": tensor_rows,
            "projection_types": proj_types,
            "n_params": int(sum(v.size for v in stored.values())),
        },
        "model": summary,
        "hf_config": hf_config_dict(model),
        "hf_loading": {
            "path": "transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint (legacy loader: gemma3 is not "
                    "in integrations/gguf GGUF_ARCHS); tensors dequantized by gguf.dequantize (numpy f32), then "
                    "Gemma2TensorProcessor (also used for gemma3) subtracts 1 from every tensor whose name "
                    "contains 'norm.weight', in numpy f32, then torch.from_numpy(...).to(float32)",
            "all_params_equal_gguf_py_dequantized": True,
            "norm_weights": norm_info,
        },
        "dequantized_samples": samples,
        "generation": {
            "compute_dtype": "float32", "attn_implementation": "eager", "do_sample": False,
            "max_new_tokens": MAX_NEW_TOKENS, "stop_on_eos": False, "stop_token_ids": list(STOP_TOKEN_IDS),
            "pad_token_id": PAD_ID, "padding_side": "left", "logit_steps": LOGIT_STEPS,
        },
        "prompts": prompts,
        "single": single,
        "batched": {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "position_ids": pos.tolist(),
                    "results": batched},
        "single_equals_batched": same,
        "max_abs_logit_diff_single_vs_batched": diff,
        "llama_cpp_attention_scale": {
            "note": "HF model with every layer's score scale set to head_dim**-0.5 (llama.cpp's rule for gemma3 "
                    "except 27B) instead of query_pre_attn_scalar**-0.5; reference only",
            "scale": HEAD_DIM ** -0.5,
            "single": alt,
            "tokens_equal_hf": [a["tokens"] == s["tokens"] for a, s in zip(alt, single)],
        },
        "checks": {
            "independent_reimplementation_max_abs_diff": ref["hf"][0],
            "independent_reimplementation_argmax_agrees": ref["hf"][1],
            "stored_gain_reimplementation_max_abs_diff": ref["stored_gain"][0],
            "stored_gain_reimplementation_argmax_agrees": ref["stored_gain"][1],
            "llama_cpp_scale_max_abs_logit_diff": ref["llama_cpp_scale"][0],
            "margin_min": min(all_margins), "margin_median": statistics.median(all_margins),
            "margins_below_1e-3": sum(1 for m in all_margins if m < 1e-3),
            "first_near_tie_single": [first_near_tie(s["margins"]) for s in single],
            "distinct_tokens_min": min(x["distinct"] for x in q),
            "max_repeat_of_previous_token_fraction": max(x["repeat_prev"] for x in q),
        },
    }
    save_file({**single_logits, **batched_logits}, str(out / "expected_logits.safetensors"),
              metadata={"format": "pt"})
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")

    log(f"   HF config: qpas={cfg.query_pre_attn_scalar} head_dim={cfg.head_dim} layer_types="
        f"{''.join('G' if t == 'full_attention' else 'L' for t in cfg.layer_types)} window={cfg.sliding_window} "
        f"rope={json.dumps(summary['rope'])} vocab={cfg.vocab_size} eps={cfg.rms_norm_eps!r} tie={cfg.tie_word_embeddings}")
    log(f"   norm weights: {norm_info}")
    log(f"   margins min={min(all_margins):.4g} median={statistics.median(all_margins):.4g}; single==batched "
        f"{same} (logit diff {diff:.3g}); reimpl diff {ref['hf'][0]:.3g}, stored-gain diff {ref['stored_gain'][0]:.3g}, "
        f"llama.cpp-scale diff {ref['llama_cpp_scale'][0]:.3g}")
    log(f"   quality: {q}")
    log(f"   llama.cpp-scale tokens equal HF: {expected['llama_cpp_attention_scale']['tokens_equal_hf']}")
    for i, s in enumerate(single):
        log(f"   tokens[{i}]: {s['tokens']}")


def main() -> int:
    ap = argparse.ArgumentParser(description="Build the GGUF fixtures (gguf-py + HF transformers references)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "gguf")
    ap.add_argument("--tiny-out", type=Path, default=REPO / "tests" / "fixtures" / "models" / "tiny-gguf",
                    help="where the tiny model goes: beside the safetensors fixtures, so every parity test runs it")
    ap.add_argument("--only", choices=["blocks", "tiny"], action="append")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.tiny_out.mkdir(parents=True, exist_ok=True)
    if not args.only or "blocks" in args.only:
        build_blocks(args.out)
    if not args.only or "tiny" in args.only:
        build_tiny(args.tiny_out)
    for d in (args.out, args.tiny_out):
        total = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        log(f"total under {d}: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
