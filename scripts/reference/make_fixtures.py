#!/usr/bin/env python3
"""Build tiny random-weight Gemma 3 checkpoints and HF transformers' greedy outputs for them.

Run with the reference venv (scripts/reference/setup.sh):
    .venv-reference/bin/python scripts/reference/make_fixtures.py [--out tests/fixtures/models] [--only NAME]

Each fixture is a directory tests/fixtures/models/<name>/ holding
    config.json                  as transformers 5.24 writes it (or, for tiny-oldpattern, the old
                                 hand-written form with `sliding_window_pattern`)
    model.safetensors            bf16 weights, tensor names as in real checkpoints of that kind
    expected.json                greedy generations and checks, schema below
    expected_logits.safetensors  f32 logits of the first LOGIT_STEPS steps of every sequence

Expected outputs are computed in **f32 from the saved bf16 weights**: the checkpoint is loaded with
`from_pretrained(dir, dtype=torch.float32, attn_implementation="eager")` (every parameter is checked to
equal the bf16 value that was written), then `generate(do_sample=False)` with eos stopping disabled.
The same is run in bf16 for reference (`tokens_bf16`, not required to match).

expected.json schema ("runner-gemma3-fixture/1"):
{
  "schema": "runner-gemma3-fixture/1",
  "fixture": str,                      # directory name
  "description": str,                  # which real shape it mimics and what it exercises
  "generated_by": {"script", "torch", "transformers", "seed"},
  "checkpoint": {
    "kind": "text" | "multimodal",     # multimodal: config.json has text_config + vision_config
    "config_form": "new" | "old",      # new: layer_types + rope_parameters; old: sliding_window_pattern + rope_theta/rope_local_base_freq/rope_scaling
    "tensor_prefix": str,              # prefix before "embed_tokens", "layers.N", "norm"
    "skipped_tensor_prefixes": [str],  # non-text tensors present in the file (vision tower, projector)
    "weights_dtype": "bfloat16",
    "model_safetensors_sha256": str,
    "n_text_params": int
  },
  "model": {                           # what transformers made of config.json (the engine must agree)
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "query_pre_attn_scalar", "sliding_window", "rms_norm_eps",
    "layer_types": [ "sliding_attention" | "full_attention", ...],
    "rope": {"sliding_attention": {"rope_type", "rope_theta", ["factor"]}, "full_attention": {...}},
    "rope_inv_freq": {"sliding_attention": [f32...], "full_attention": [f32...]},   # after scaling
    "attn_scaling": float,             # query_pre_attn_scalar ** -0.5 (python float)
    "embed_scale": float,              # sqrt(hidden) rounded to f32: what the f32 run multiplies by
    "embed_scale_bf16": float          # sqrt(hidden) rounded to bf16: what a bf16 run multiplies by
  },
  "generation": {
    "compute_dtype": "float32", "attn_implementation": "eager", "do_sample": false,
    "max_new_tokens": int, "stop_on_eos": false,     # every sequence runs the full max_new_tokens
    "stop_token_ids": [1, 106],                       # what runner stops on; see first_stop_index
    "pad_token_id": 0, "padding_side": "left",
    "logit_steps": int                                # LOGIT_STEPS
  },
  "prompts": [[int]],                  # token ids (no tokenizer; vocab is tiny), lengths differ
  "single": [                          # each prompt run alone (batch of 1), same order as prompts
    {"tokens": [int],                  # the max_new_tokens generated ids (prompt not included)
     "margins": [float],               # per step: top1 - top2 of the raw f32 logits
     "first_stop_index": int | null}   # index into tokens of the first id in stop_token_ids
  ],
  "batched": {                         # all prompts as one left-padded batch
    "input_ids": [[int]], "attention_mask": [[int]],
    "position_ids": [[int]],           # cumsum(attention_mask) - 1, pads set to 0 (HF's rule)
    "results": [{"tokens", "margins", "first_stop_index"}]
  },
  "single_equals_batched": bool,       # tokens identical for every prompt
  "max_abs_logit_diff_single_vs_batched": float,     # over the first logit_steps steps
  "tokens_bf16": {"single": [[int]], "batched": [[int]]},   # same model run in bf16 (reference only)
  "checks": {
    "all_params_equal_saved_bf16": true,
    "independent_reimplementation_max_abs_diff": float,   # this script's own f32 forward vs HF logits
    "independent_reimplementation_argmax_agrees": bool,   # on every generated step of every prompt
    "window_if_query_saw_window_plus_1_keys_max_abs_diff": float,  # > 0: the W-keys rule is the one HF uses
    "margin_min": float, "margin_median": float, "margins_below_1e-3": int,
    "distinct_tokens_min": int, "max_repeat_of_previous_token_fraction": float
  }
}
expected_logits.safetensors: "single.<i>" and "batched.<i>" (i = prompt index), f32 [logit_steps, vocab]:
row 0 = logits at the prompt's last position (prefill), rows 1.. = the following decode steps.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    SiglipVisionConfig,
)

SCHEMA = "runner-gemma3-fixture/1"
MAX_NEW_TOKENS = 48
LOGIT_STEPS = 4
PROMPT_LENGTHS = (3, 7, 12, 1)
STOP_TOKEN_IDS = (1, 106)
PAD_ID = 0
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Spec:
    name: str
    description: str
    seed: int
    text: dict  # Gemma3TextConfig kwargs (new form) / values for the old hand-written form
    kind: str = "text"  # "text" | "multimodal"
    config_form: str = "new"  # "new" | "old"
    tensor_prefix: str = "model."
    init: dict = field(default_factory=dict)


COMMON = dict(vocab_size=512, rms_norm_eps=1e-6, max_position_embeddings=4096)

SPECS = [
    Spec(
        name="tiny-270m",
        description="270m-like: 4 heads / 1 kv head, heads*head_dim (128) != hidden (72), 6 layers "
        "(layer 5 global), sliding window 8, no rope scaling, query_pre_attn_scalar == head_dim, new "
        "config form (layer_types + rope_parameters), text-only checkpoint (model.*). hidden 72 so "
        "sqrt(hidden) rounds differently in bf16 (8.5) and f32 (8.485281).",
        seed=271,
        text=dict(hidden_size=72, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                  layer_types=["sliding_attention"] * 5 + ["full_attention"]),
    ),
    Spec(
        name="tiny-4b",
        description="4b-like: GQA 2:1 (4 heads / 2 kv heads), head_dim 24, 6 layers (layer 5 global), "
        "sliding window 6, linear rope scaling factor 8 on global layers, multimodal checkpoint exactly "
        "as transformers 5.24 saves Gemma3ForConditionalGeneration: config.json with text_config + "
        "vision_config, text tensors under language_model.model.*, a tiny SigLIP tower under "
        "vision_tower.* and multi_modal_projector.* (to be skipped).",
        seed=4,
        kind="multimodal",
        tensor_prefix="language_model.model.",
        text=dict(hidden_size=80, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=24, sliding_window=6,
                  rope_scaling={"rope_type": "linear", "factor": 8.0}),
    ),
    Spec(
        name="tiny-27b",
        description="27b-like: query_pre_attn_scalar 24 != head_dim 32, GQA 2:1, 6 layers (layer 5 "
        "global), sliding window 10, linear rope scaling factor 8. Multimodal checkpoint whose "
        "config.json is hand-written in the OLD published style (transformers 4.50, like "
        "gemma-3-27b-it): text_config lists only non-default keys (no layer_types, rope_theta, "
        "rope_local_base_freq, sliding_window_pattern, rms_norm_eps, hidden_activation: transformers' "
        "Gemma3TextConfig defaults apply) and the old rope_scaling key. Tensor names as transformers "
        "4.52-4.57 saved them (5.x's in-memory paths): model.language_model.*, model.vision_tower.*, "
        "model.multi_modal_projector.*.",
        seed=27,
        kind="multimodal",
        config_form="old",
        tensor_prefix="model.language_model.",
        text=dict(hidden_size=68, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24, sliding_window=10,
                  rope_scaling={"rope_type": "linear", "factor": 8.0}),
    ),
    Spec(
        name="tiny-oldpattern",
        description="1b-like config.json in the OLD form written by transformers 4.50 (as published for "
        "gemma-3-1b): sliding_window_pattern 6, no layer_types, rope_theta / rope_local_base_freq / "
        "rope_scaling null, eos_token_id [1, 106]; 8 layers so layers 6 and 7 are local again after the "
        "global layer 5; sliding window 5 (odd); 4 heads / 1 kv head, head_dim 16.",
        seed=1,
        config_form="old",
        text=dict(hidden_size=60, intermediate_size=96, num_hidden_layers=8, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=5,
                  sliding_window_pattern=6),
    ),
]


def log(msg: str) -> None:
    print(msg, flush=True)


VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14, vision_use_head=False)


def old_form_config(spec: Spec) -> dict:
    """config.json as published with Gemma 3 (transformers 4.50): no layer_types / rope_parameters.

    Text-only (gemma-3-1b style): every key spelled out, sliding_window_pattern, rope_theta,
    rope_local_base_freq, rope_scaling null. Multimodal (gemma-3-27b-it style): text_config holds only
    the keys that differ from Gemma3TextConfig's defaults, rope_scaling in the old key.
    """
    t = spec.text
    if spec.kind == "multimodal":
        text = {k: t[k] for k in ("head_dim", "hidden_size", "intermediate_size", "num_attention_heads",
                                  "num_hidden_layers", "num_key_value_heads", "query_pre_attn_scalar",
                                  "rope_scaling", "sliding_window")}
        text.update(model_type="gemma3_text", vocab_size=COMMON["vocab_size"])
        return {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "boi_token_index": 255999,
            "eoi_token_index": 256000,
            "eos_token_id": [1, 106],
            "image_token_index": 262144,
            "initializer_range": 0.02,
            "mm_tokens_per_image": 4,
            "model_type": "gemma3",
            "text_config": text,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.50.0.dev0",
            "vision_config": {**VISION, "model_type": "siglip_vision_model"},
        }
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": [1, 106],
        "final_logit_softcapping": None,
        "head_dim": t["head_dim"],
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": t["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": t["intermediate_size"],
        "max_position_embeddings": COMMON["max_position_embeddings"],
        "model_type": "gemma3_text",
        "num_attention_heads": t["num_attention_heads"],
        "num_hidden_layers": t["num_hidden_layers"],
        "num_key_value_heads": t["num_key_value_heads"],
        "pad_token_id": 0,
        "query_pre_attn_scalar": t["query_pre_attn_scalar"],
        "rms_norm_eps": COMMON["rms_norm_eps"],
        "rope_local_base_freq": 10000,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": t["sliding_window"],
        "sliding_window_pattern": t["sliding_window_pattern"],
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "use_cache": True,
        "vocab_size": COMMON["vocab_size"],
    }


def text_config(spec: Spec) -> Gemma3TextConfig:
    return Gemma3TextConfig(**COMMON, **spec.text)


def model_class(spec: Spec):
    return Gemma3ForConditionalGeneration if spec.kind == "multimodal" else Gemma3ForCausalLM


def build_config(spec: Spec):
    if spec.config_form == "old":  # what transformers makes of the hand-written file
        cls = Gemma3Config if spec.kind == "multimodal" else Gemma3TextConfig
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "config.json").write_text(json.dumps(old_form_config(spec)))
            return cls.from_pretrained(tmp)
    tc = text_config(spec)
    if spec.kind == "text":
        return tc
    return Gemma3Config(text_config=tc, vision_config=SiglipVisionConfig(**VISION), mm_tokens_per_image=4)


def init_text_weights(model, cfg: Gemma3TextConfig, seed: int) -> None:
    """Scaled random init so greedy generations move and argmax margins are comfortable.

    HF's default (std 0.02, zero norm weights) gives near-uniform logits, and with tied embeddings a
    weak stack echoes its last token (the token's own embedding dominates the residual stream, and
    logit(t) ~ <h, E[t]>). Here: embeddings N(0, 0.6); projections N(0, 1.6/sqrt(fan_in)); the
    post-attention / post-feedforward norm weights 4 + N(0, 1) so each block's contribution (RMS ~5)
    outweighs the scaled embedding; other norms N(0, 0.5); and the final norm weight -1 + N(0, 1), so
    its gain (1 + w) has zero mean and the residual's copy of the last token's embedding no longer
    lines up with that token's row of the tied lm_head.
    """
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "vision_tower" in name or "multi_modal_projector" in name:
            continue
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            w = torch.randn(shape, generator=g) * 0.6
        elif name.endswith("_proj.weight"):
            w = torch.randn(shape, generator=g) * (1.6 / math.sqrt(shape[1]))
        elif "post_attention_layernorm" in name or "post_feedforward_layernorm" in name:
            w = 4.0 + torch.randn(shape, generator=g)
        elif name.endswith("language_model.norm.weight") or name == "model.norm.weight":
            w = -1.0 + torch.randn(shape, generator=g)
        elif name.endswith("norm.weight"):
            w = torch.randn(shape, generator=g) * 0.5
        elif name == "lm_head.weight":
            continue  # tied to embed_tokens
        else:
            raise RuntimeError(f"unexpected text parameter {name}")
        with torch.no_grad():
            p.copy_(w.to(torch.bfloat16).to(p.dtype))


def rename_prefix(name: str) -> str:
    """5.24's saved names (language_model.model.*, vision_tower.*, multi_modal_projector.*) -> the
    names transformers 4.52-4.57 saved, which are also 5.x's in-memory module paths."""
    for saved, other in (("language_model.model.", "model.language_model."),
                         ("vision_tower.", "model.vision_tower."),
                         ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(saved):
            return other + name[len(saved):]
    raise RuntimeError(f"unexpected tensor name {name}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_checkpoint(spec: Spec, out: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    torch.manual_seed(spec.seed)  # HF's own init (vision tower) draws from the global RNG
    cfg = build_config(spec)
    model = model_class(spec)(cfg).to(torch.float32)
    init_text_weights(model, cfg.get_text_config(), spec.seed)
    model = model.to(torch.bfloat16)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        written = load_file(str(Path(tmp) / "model.safetensors"))
        hf_config = json.loads((Path(tmp) / "config.json").read_text())
    if spec.tensor_prefix == "model.language_model.":
        written = {rename_prefix(k): v for k, v in written.items()}
    tensors = {k: v.contiguous() for k, v in sorted(written.items())}
    if not any(k.startswith(spec.tensor_prefix + "layers.0.") for k in tensors):
        raise RuntimeError(f"{spec.name}: no tensor under {spec.tensor_prefix}layers.0.: {list(tensors)[:5]}")
    depth = 2 if spec.tensor_prefix == "model.language_model." else 1
    skipped = sorted({".".join(k.split(".")[:depth]) + "." for k in tensors if not k.startswith(spec.tensor_prefix)})
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config_json = old_form_config(spec) if spec.config_form == "old" else hf_config
    (out / "config.json").write_text(json.dumps(config_json, indent=2, sort_keys=True) + "\n")
    for stale in ("generation_config.json",):
        (out / stale).unlink(missing_ok=True)
    return tensors, skipped


def load(spec: Spec, out: Path, dtype: torch.dtype):
    model, info = model_class(spec).from_pretrained(
        str(out), dtype=dtype, attn_implementation="eager", output_loading_info=True)
    model.eval()
    missing = [k for k in info["missing_keys"] if k != "lm_head.weight"]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        raise RuntimeError(f"{spec.name}: load info {info}")
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = PAD_ID
    gc.bos_token_id = None
    gc.do_sample = False
    gc.temperature = None
    gc.top_p = None
    gc.top_k = None
    return model


def text_model(model):
    return model.model.language_model if isinstance(model, Gemma3ForConditionalGeneration) else model.model


def check_params_equal(spec: Spec, model, tensors: dict[str, torch.Tensor]) -> None:
    """Every saved text tensor must be what transformers holds (catches silent re-init / renames)."""
    tm = text_model(model)
    own = {k: v for k, v in tm.state_dict().items()}
    n = 0
    for name, saved in tensors.items():
        if not name.startswith(spec.tensor_prefix):
            continue
        key = name[len(spec.tensor_prefix):]
        if key not in own:
            raise RuntimeError(f"{spec.name}: saved tensor {name} has no parameter {key}")
        if not torch.equal(own[key].float(), saved.float()):
            raise RuntimeError(f"{spec.name}: parameter {key} differs from saved bf16 tensor")
        n += 1
    expected = len([k for k in own if not k.endswith("inv_freq") and "embed_scale" not in k])
    if n != expected:
        raise RuntimeError(f"{spec.name}: checked {n} tensors, text model has {expected}")
    lm = model.lm_head.weight
    if lm.data_ptr() != tm.embed_tokens.weight.data_ptr():
        raise RuntimeError(f"{spec.name}: lm_head is not tied to embed_tokens")


def make_prompts(spec: Spec, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(spec.seed + 1000)
    prompts = []
    for n in PROMPT_LENGTHS:
        body = torch.randint(3, vocab, (n - 1,), generator=g).tolist() if n > 1 else []
        prompts.append([2] + body)  # bos first, as real prompts do
    return prompts


def left_pad(prompts: list[list[int]]):
    width = max(len(p) for p in prompts)
    ids = [[PAD_ID] * (width - len(p)) + p for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    m = torch.tensor(mask)
    pos = (m.cumsum(-1) - 1).masked_fill(m == 0, 0)
    return torch.tensor(ids), m, pos


def margins_of(logits: torch.Tensor) -> list[float]:
    top = torch.topk(logits.float(), 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).tolist()


def first_stop(tokens: list[int]):
    for i, t in enumerate(tokens):
        if t in STOP_TOKEN_IDS:
            return i
    return None


@torch.no_grad()
def generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                         max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=0, eos_token_id=None,
                         pad_token_id=PAD_ID, return_dict_in_generate=True, output_logits=True)
    new = out.sequences[:, input_ids.shape[1]:]
    if new.shape[1] != MAX_NEW_TOKENS:
        raise RuntimeError(f"generation stopped early: {new.shape[1]} tokens")
    logits = torch.stack(out.logits, dim=1)  # [batch, steps, vocab]
    if not torch.equal(logits.argmax(-1), new):
        raise RuntimeError("generated tokens are not the argmax of the raw logits (a processor interfered)")
    return new, logits


# ---------------------------------------------------------------------------------------------
# Independent f32 forward written from the Gemma 3 facts (not from transformers' modules), to
# cross-check HF's numbers and to pin down the sliding-window rule.


def rms(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())


def inv_freq(theta: float, dim: int, factor: float) -> torch.Tensor:
    exponent = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    return (1.0 / (theta ** exponent)) / factor


def rope(x, pos, inv):  # x [heads, T, d]
    freqs = pos[:, None].float() * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * emb.cos() + rot * emb.sin()


def reference_logits(params: dict[str, torch.Tensor], prefix: str, cfg: Gemma3TextConfig, ids: list[int],
                     window_extra: int = 0) -> torch.Tensor:
    P = lambda n: params[prefix + n].float()  # noqa: E731
    eps = cfg.rms_norm_eps
    H, K, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    T = len(ids)
    pos = torch.arange(T)
    scale = torch.tensor(math.sqrt(cfg.hidden_size), dtype=torch.float32)
    x = P("embed_tokens.weight")[torch.tensor(ids)] * scale
    causal = pos[None, :] <= pos[:, None]
    rp = cfg.rope_parameters
    invs = {lt: inv_freq(float(rp[lt]["rope_theta"]), D, float(rp[lt].get("factor", 1.0)) if rp[lt]["rope_type"] == "linear" else 1.0)
            for lt in ("sliding_attention", "full_attention")}
    for i, lt in enumerate(cfg.layer_types):
        L = f"layers.{i}."
        h = rms(x, P(L + "input_layernorm.weight"), eps)
        q = (h @ P(L + "self_attn.q_proj.weight").T).view(T, H, D).transpose(0, 1)
        k = (h @ P(L + "self_attn.k_proj.weight").T).view(T, K, D).transpose(0, 1)
        v = (h @ P(L + "self_attn.v_proj.weight").T).view(T, K, D).transpose(0, 1)
        q = rope(rms(q, P(L + "self_attn.q_norm.weight"), eps), pos, invs[lt])
        k = rope(rms(k, P(L + "self_attn.k_norm.weight"), eps), pos, invs[lt])
        k = k.repeat_interleave(H // K, 0)
        v = v.repeat_interleave(H // K, 0)
        s = (q @ k.transpose(1, 2)) * (cfg.query_pre_attn_scalar ** -0.5)
        allowed = causal
        if lt == "sliding_attention":
            w = cfg.sliding_window + window_extra
            allowed = allowed & (pos[None, :] > pos[:, None] - w)  # keys j with i - w < j <= i
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.softmax(s, -1) @ v
        o = a.transpose(0, 1).reshape(T, H * D) @ P(L + "self_attn.o_proj.weight").T
        x = x + rms(o, P(L + "post_attention_layernorm.weight"), eps)
        h = rms(x, P(L + "pre_feedforward_layernorm.weight"), eps)
        gate = torch.nn.functional.gelu(h @ P(L + "mlp.gate_proj.weight").T, approximate="tanh")
        m = (gate * (h @ P(L + "mlp.up_proj.weight").T)) @ P(L + "mlp.down_proj.weight").T
        x = x + rms(m, P(L + "post_feedforward_layernorm.weight"), eps)
    x = rms(x, P("norm.weight"), eps)
    return x @ P("embed_tokens.weight").T


# ---------------------------------------------------------------------------------------------


def quality(tokens: list[int]) -> dict:
    distinct = len(set(tokens))
    repeats = sum(1 for a, b in zip(tokens, tokens[1:]) if a == b) / max(1, len(tokens) - 1)
    tail = tokens[-24:]
    short_loop = any(all(tail[i] == tail[i + p] for i in range(len(tail) - p)) for p in range(1, 5))
    return {"distinct": distinct, "repeat_prev": repeats, "short_loop": short_loop}


def build(spec: Spec, root: Path) -> dict:
    out = root / spec.name
    if out.exists():
        shutil.rmtree(out)
    tensors, skipped = write_checkpoint(spec, out)
    model = load(spec, out, torch.float32)
    check_params_equal(spec, model, tensors)
    cfg = model.config.get_text_config()
    tm = text_model(model)
    vocab = cfg.vocab_size
    prompts = make_prompts(spec, vocab)

    single, single_logits = [], {}
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        new, logits = generate(model, ids, torch.ones_like(ids))
        toks = new[0].tolist()
        single.append({"tokens": toks, "margins": margins_of(logits[0]), "first_stop_index": first_stop(toks)})
        single_logits[f"single.{i}"] = logits[0, :LOGIT_STEPS].contiguous()

    ids, mask, pos = left_pad(prompts)
    new, logits = generate(model, ids, mask)
    batched, batched_logits = [], {}
    for i in range(len(prompts)):
        toks = new[i].tolist()
        batched.append({"tokens": toks, "margins": margins_of(logits[i]), "first_stop_index": first_stop(toks)})
        batched_logits[f"batched.{i}"] = logits[i, :LOGIT_STEPS].contiguous()
    same = all(s["tokens"] == b["tokens"] for s, b in zip(single, batched))
    diff = max(float((single_logits[f"single.{i}"] - batched_logits[f"batched.{i}"]).abs().max())
               for i in range(len(prompts)))

    # independent reimplementation over prompt + generated tokens, no cache
    params = {k: v for k, v in tensors.items() if k.startswith(spec.tensor_prefix)}
    ref_diff, agrees, wide_diff = 0.0, True, 0.0
    for i, p in enumerate(prompts):
        seq = p + single[i]["tokens"][:-1]
        ref = reference_logits(params, spec.tensor_prefix, cfg, seq)[len(p) - 1:]
        agrees &= ref.argmax(-1).tolist() == single[i]["tokens"]
        ref_diff = max(ref_diff, float((ref[:LOGIT_STEPS] - single_logits[f"single.{i}"]).abs().max()))
        wide = reference_logits(params, spec.tensor_prefix, cfg, seq, window_extra=1)[len(p) - 1:]
        wide_diff = max(wide_diff, float((wide[:LOGIT_STEPS] - single_logits[f"single.{i}"]).abs().max()))
    if not agrees or ref_diff > 1e-3:
        raise RuntimeError(f"{spec.name}: independent forward disagrees with HF (max diff {ref_diff})")

    # bf16 run of the same checkpoint, for reference
    model16 = load(spec, out, torch.bfloat16)
    tokens_bf16 = {"single": [], "batched": []}
    for p in prompts:
        t = torch.tensor([p])
        tokens_bf16["single"].append(generate(model16, t, torch.ones_like(t))[0][0].tolist())
    tokens_bf16["batched"] = generate(model16, ids, mask)[0].tolist()

    all_margins = [m for s in single + batched for m in s["margins"]]
    q = [quality(s["tokens"]) for s in single]
    if any(x["short_loop"] or x["distinct"] < 8 for x in q):
        raise RuntimeError(f"{spec.name}: degenerate generation {q}")

    rot = tm.rotary_emb
    embed_scale = float(tm.embed_tokens.embed_scale.to(torch.float32))
    rp = {lt: {k: v for k, v in sorted(cfg.rope_parameters[lt].items())} for lt in ("sliding_attention", "full_attention")}
    weights = out / "model.safetensors"
    expected = {
        "schema": SCHEMA,
        "fixture": spec.name,
        "description": spec.description,
        "generated_by": {"script": "scripts/reference/make_fixtures.py", "torch": torch.__version__.split("+")[0],
                         "transformers": transformers.__version__, "seed": spec.seed},
        "checkpoint": {
            "kind": spec.kind,
            "config_form": spec.config_form,
            "tensor_prefix": spec.tensor_prefix,
            "skipped_tensor_prefixes": skipped,
            "weights_dtype": "bfloat16",
            "model_safetensors_sha256": sha256(weights),
            "n_text_params": sum(v.numel() for v in params.values()),
        },
        "model": {
            "vocab_size": vocab,
            "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": cfg.head_dim,
            "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
            "sliding_window": cfg.sliding_window,
            "rms_norm_eps": cfg.rms_norm_eps,
            "layer_types": list(cfg.layer_types),
            "rope": rp,
            "rope_inv_freq": {lt: getattr(rot, f"{lt}_inv_freq").float().tolist() for lt in ("sliding_attention", "full_attention")},
            "attn_scaling": cfg.query_pre_attn_scalar ** -0.5,
            "embed_scale": embed_scale,
            "embed_scale_bf16": float(torch.tensor(math.sqrt(cfg.hidden_size)).to(torch.bfloat16)),
        },
        "generation": {
            "compute_dtype": "float32",
            "attn_implementation": "eager",
            "do_sample": False,
            "max_new_tokens": MAX_NEW_TOKENS,
            "stop_on_eos": False,
            "stop_token_ids": list(STOP_TOKEN_IDS),
            "pad_token_id": PAD_ID,
            "padding_side": "left",
            "logit_steps": LOGIT_STEPS,
        },
        "prompts": prompts,
        "single": single,
        "batched": {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "position_ids": pos.tolist(),
                    "results": batched},
        "single_equals_batched": same,
        "max_abs_logit_diff_single_vs_batched": diff,
        "tokens_bf16": tokens_bf16,
        "checks": {
            "all_params_equal_saved_bf16": True,
            "independent_reimplementation_max_abs_diff": ref_diff,
            "independent_reimplementation_argmax_agrees": agrees,
            "window_if_query_saw_window_plus_1_keys_max_abs_diff": wide_diff,
            "margin_min": min(all_margins),
            "margin_median": statistics.median(all_margins),
            "margins_below_1e-3": sum(1 for m in all_margins if m < 1e-3),
            "distinct_tokens_min": min(x["distinct"] for x in q),
            "max_repeat_of_previous_token_fraction": max(x["repeat_prev"] for x in q),
        },
    }
    save_file({**single_logits, **batched_logits}, str(out / "expected_logits.safetensors"), metadata={"format": "pt"})
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")

    bf16_same = sum(a == b["tokens"] for a, b in zip(tokens_bf16["single"], single))
    size = sum(f.stat().st_size for f in out.iterdir())
    log(f"== {spec.name}: {spec.kind}/{spec.config_form} prefix={spec.tensor_prefix} size={size / 1024:.0f} KiB")
    log(f"   layer_types: {''.join('G' if t == 'full_attention' else 'L' for t in cfg.layer_types)} "
        f"window={cfg.sliding_window} rope={json.dumps(rp)}")
    log(f"   embed_scale f32={embed_scale!r} bf16={expected['model']['embed_scale_bf16']!r}")
    log(f"   margins min={min(all_margins):.4g} median={statistics.median(all_margins):.4g} "
        f"<1e-3: {expected['checks']['margins_below_1e-3']}/{len(all_margins)}")
    log(f"   single==batched: {same} (max logit diff {diff:.3g}); reimpl diff {ref_diff:.3g}, "
        f"window+1 diff {wide_diff:.3g}; bf16 tokens equal f32 for {bf16_same}/{len(prompts)} prompts")
    log(f"   quality: {q}")
    log(f"   first stop index (single): {[s['first_stop_index'] for s in single]}")
    log(f"   tokens[0]: {single[0]['tokens']}")
    return expected


def main() -> int:
    ap = argparse.ArgumentParser(description="Build tiny Gemma 3 fixtures with HF transformers")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "models")
    ap.add_argument("--only", action="append", help="build only this fixture (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    specs = [s for s in SPECS if not args.only or s.name in args.only]
    if args.only and len(specs) != len(args.only):
        sys.exit(f"unknown fixture in {args.only}; known: {[s.name for s in SPECS]}")
    for spec in specs:
        build(spec, args.out)
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    log(f"total fixture size under {args.out}: {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
