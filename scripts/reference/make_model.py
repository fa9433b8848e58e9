#!/usr/bin/env python3
"""Write a random-weight, full-size Gemma 3 checkpoint for benchmarks and memory checks (not committed).

    .venv-reference/bin/python scripts/reference/make_model.py --shape 270m --out /tmp/gemma3-270m [--layers N]
        [--seed S] [--form text|multimodal] [--check]

Writes DIR/config.json (as transformers 5.24 writes it) and DIR/model.safetensors (bf16). Tensors are
generated one at a time, in row blocks, and streamed into the safetensors file, so peak memory stays
around one block (~256 MiB) whatever the shape. Shapes are the real ones (see MISSION.md) with vocab
262144; `--layers` shortens the stack (layer types keep the 5-local-1-global pattern).

--form text (default for 270m and 1b): Gemma3ForCausalLM, tensors `model.*`.
--form multimodal (default for 4b): Gemma3ForConditionalGeneration config (text_config + a SigLIP
vision_config of the real size) with text tensors under `language_model.model.*` as transformers 5.24
saves them; no vision tensors are written (transformers initialises the tower on load; the runner skips it).

Weights use the same scaled random init as make_fixtures.py (so generations are not degenerate).
--check loads the result with transformers (bf16) and greedily generates 2 tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {
    # hidden, layers, heads, kv heads, head_dim, intermediate, sliding_window, qpas, rope scaling, max_pos
    "270m": dict(hidden_size=640, num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1,
                 head_dim=256, intermediate_size=2048, sliding_window=512, query_pre_attn_scalar=256,
                 rope_scaling=None, max_position_embeddings=32768),
    "1b": dict(hidden_size=1152, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
               head_dim=256, intermediate_size=6912, sliding_window=512, query_pre_attn_scalar=256,
               rope_scaling=None, max_position_embeddings=32768),
    "4b": dict(hidden_size=2560, num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4,
               head_dim=256, intermediate_size=10240, sliding_window=1024, query_pre_attn_scalar=256,
               rope_scaling={"rope_type": "linear", "factor": 8.0}, max_position_embeddings=131072),
}
VOCAB = 262144
BLOCK_ELEMS = 64 * 1024 * 1024  # f32 elements generated at once (256 MiB)


def text_config(shape: str, layers: int | None):
    from transformers import Gemma3TextConfig

    kw = dict(SHAPES[shape])
    if layers is not None:
        kw["num_hidden_layers"] = layers
    n = kw["num_hidden_layers"]
    kw["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    return Gemma3TextConfig(vocab_size=VOCAB, rms_norm_eps=1e-6, **kw)


def config_json(shape: str, layers: int | None, form: str) -> dict:
    from transformers import Gemma3Config, SiglipVisionConfig

    tc = text_config(shape, layers)
    if form == "text":
        tc.architectures = ["Gemma3ForCausalLM"]
        cfg = tc
    else:
        vision = SiglipVisionConfig(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                    num_attention_heads=16, image_size=896, patch_size=14,
                                    vision_use_head=False, layer_norm_eps=1e-6)
        cfg = Gemma3Config(text_config=tc, vision_config=vision, mm_tokens_per_image=256)
        cfg.architectures = ["Gemma3ForConditionalGeneration"]
    cfg.dtype = torch.bfloat16
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)
        return json.loads((Path(tmp) / "config.json").read_text())


def tensor_plan(tc, prefix: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init kind) for every text tensor, in file order."""
    h, hd, inter = tc.hidden_size, tc.head_dim, tc.intermediate_size
    q, kv = tc.num_attention_heads * hd, tc.num_key_value_heads * hd
    plan = [(f"{prefix}embed_tokens.weight", (tc.vocab_size, h), "embed")]
    for i in range(tc.num_hidden_layers):
        L = f"{prefix}layers.{i}."
        plan += [
            (L + "input_layernorm.weight", (h,), "norm"),
            (L + "self_attn.q_proj.weight", (q, h), "proj"),
            (L + "self_attn.k_proj.weight", (kv, h), "proj"),
            (L + "self_attn.v_proj.weight", (kv, h), "proj"),
            (L + "self_attn.q_norm.weight", (hd,), "norm"),
            (L + "self_attn.k_norm.weight", (hd,), "norm"),
            (L + "self_attn.o_proj.weight", (h, q), "proj"),
            (L + "post_attention_layernorm.weight", (h,), "post_norm"),
            (L + "pre_feedforward_layernorm.weight", (h,), "norm"),
            (L + "mlp.gate_proj.weight", (inter, h), "proj"),
            (L + "mlp.up_proj.weight", (inter, h), "proj"),
            (L + "mlp.down_proj.weight", (h, inter), "proj"),
            (L + "post_feedforward_layernorm.weight", (h,), "post_norm"),
        ]
    plan.append((f"{prefix}norm.weight", (h,), "final_norm"))
    return plan


def blocks(shape: tuple[int, ...], kind: str, g: torch.Generator):
    """Yield the tensor's bf16 values in row blocks (same init scheme as make_fixtures.py)."""
    rows = shape[0]
    cols = math.prod(shape[1:]) if len(shape) > 1 else 1
    step = max(1, BLOCK_ELEMS // cols)
    for r0 in range(0, rows, step):
        n = min(step, rows - r0)
        x = torch.randn((n, cols) if len(shape) > 1 else (n,), generator=g)
        if kind == "embed":
            x.mul_(0.6)
        elif kind == "proj":
            x.mul_(1.6 / math.sqrt(shape[1]))
        elif kind == "post_norm":
            x.add_(4.0)
        elif kind == "final_norm":
            x.sub_(1.0)
        else:
            x.mul_(0.5)
        yield x.to(torch.bfloat16)


def write(out: Path, plan, seed: int) -> int:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in plan:
        nbytes = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    g = torch.Generator().manual_seed(seed)
    path = out / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape, kind in plan:
            for block in blocks(shape, kind, g):
                f.write(block.contiguous().view(torch.uint16).numpy().tobytes())
    return path.stat().st_size


def check(out: Path, form: str) -> None:
    from transformers import Gemma3ForCausalLM, Gemma3ForConditionalGeneration

    cls = Gemma3ForCausalLM if form == "text" else Gemma3ForConditionalGeneration
    t = time.time()
    model, info = cls.from_pretrained(str(out), dtype=torch.bfloat16, output_loading_info=True)
    model.eval()
    text_missing = [k for k in info["missing_keys"]
                    if "vision_tower" not in k and "multi_modal_projector" not in k and k != "lm_head.weight"]
    if text_missing or info["unexpected_keys"]:
        sys.exit(f"check: transformers did not load every text tensor: missing {text_missing[:5]}, "
                 f"unexpected {info['unexpected_keys'][:5]}")
    model.generation_config.eos_token_id = None
    ids = torch.tensor([[2, 9259, 236764, 1041, 4799, 563, 12864]])
    with torch.no_grad():
        seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=2, pad_token_id=0)
    print(f"check: loaded with {cls.__name__} and generated {seq[0, ids.shape[1]:].tolist()} "
          f"in {time.time() - t:.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, help="number of layers (default: the real count)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--form", choices=["text", "multimodal"])
    ap.add_argument("--check", action="store_true", help="load with transformers and generate 2 tokens")
    args = ap.parse_args()
    if args.layers is not None and args.layers < 1:
        sys.exit("--layers must be >= 1")
    form = args.form or ("multimodal" if args.shape == "4b" else "text")
    prefix = "model." if form == "text" else "language_model.model."
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = config_json(args.shape, args.layers, form)
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tc = text_config(args.shape, args.layers)
    plan = tensor_plan(tc, prefix)
    t = time.time()
    size = write(args.out, plan, args.seed)
    n = sum(math.prod(s) for _, s, _ in plan)
    print(f"wrote {args.out}/model.safetensors: {len(plan)} tensors, {n / 1e6:.1f}M params, "
          f"{size / 2**20:.0f} MiB in {time.time() - t:.1f}s ({form}, prefix {prefix})")
    if args.check:
        check(args.out, form)
    return 0


if __name__ == "__main__":
    sys.exit(main())
