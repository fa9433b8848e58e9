#!/usr/bin/env python3
"""HF transformers' greedy outputs for the real Gemma 3 270M Q4_K_M GGUF (the parity target for
runner's GGUF loader on real weights).

    scripts/fetch_model.sh gemma3-270m      # ~/.cache/runner/models/gemma-3-270m-q4_k_m.gguf (sha256-pinned)
    scripts/fetch_tokenizer.sh        # ~/.cache/runner/gemma3/tokenizer.json
    .venv-reference/bin/python scripts/reference/gguf_parity.py [--model PATH] [--tokenizer PATH]
        [--out tests/fixtures/gguf/gemma3-270m-q4_k_m.expected.json] [--max-new-tokens 48]
        [--any-model --out PATH]      # another GGUF (its sha256 not pinned)

The model is loaded as `Gemma3ForCausalLM.from_pretrained(dirname, gguf_file=basename,
dtype=torch.float32, attn_implementation="eager")`: transformers 5.24 dequantizes every tensor with
gguf-py (numpy f32) and subtracts 1 from the RMSNorm weights (llama.cpp stores 1 + w). It drops the
file's `gemma3.rope.scaling.*` (linear 8 in 4B-27B files), which is put back after loading
(`make_gguf_fixtures.restore_gemma3_config`, with the 27B's `query_pre_attn_scalar` of 168; the 270M has neither). Prompts are
text, tokenized with the official tokenizer.json by the `tokenizers` package without special tokens,
then bos (2) prepended. Each prompt runs alone (batch of 1) and all together as one left-padded batch
(pad 0, attention mask, positions cumsum(mask) - 1 with pads at 0), greedy, eos stopping off, in f32.
The long prompt (~700 tokens) is past the 512-token sliding window.

Output (schema "runner-gemma3-gguf-parity/1"):
{
  "schema", "description",
  "generated_by": {"script", "torch", "transformers", "gguf", "accelerate", "numpy", "tokenizers"},
  "model_file": {"name", "sha256", "size_bytes", "tensor_types": {type: count}, "metadata": {...}},
  "tokenizer": {"name": "tokenizer.json", "sha256"},
  "model": {...},                   # what transformers derived (as in tiny-gemma3.expected.json)
  "hf_config": {...},               # model.config.to_dict()
  "hf_loading": {"all_params_equal_gguf_py_dequantized", "norm_weights": {...}},
  "generation": {"compute_dtype", "attn_implementation", "do_sample", "max_new_tokens",
                 "stop_on_eos": false, "stop_token_ids", "pad_token_id", "padding_side",
                 "near_tie_threshold": 0.01, "torch_threads"},
  "prompts": [{"name", "text", "ids"}],          # ids start with bos 2
  "single": [{"tokens", "margins", "first_near_tie", "first_stop_index", "text"}],
  "batched": {"pad_counts": [int], "results": [{"tokens", "margins", "first_near_tie",
              "first_stop_index", "text"}]},
  "single_equals_batched": bool, "single_vs_batched_first_difference": [int | null],
  "max_abs_logit_diff_single_vs_batched": float     # over the first 4 steps of every prompt
}
`margins` are top-1 minus top-2 of the raw f32 logits per step; `first_near_tie` is the first step
whose margin is below 0.01 (null if none): a token mismatch at or after it may be rounding, not a bug.
`text` is the decoded generation (for humans; skip_special_tokens=False).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

import make_gguf_fixtures as mg

MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
CACHE = Path(os.environ.get("RUNNER_CACHE", Path.home() / ".cache" / "runner"))
DEFAULT_MODEL = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
DEFAULT_TOKENIZER = CACHE / "gemma3" / "tokenizer.json"
DEFAULT_OUT = mg.REPO / "tests" / "fixtures" / "gguf" / "gemma3-270m-q4_k_m.expected.json"
NEAR_TIE = 0.01
LOGIT_STEPS = 4

# Plain prose written for this fixture; long enough to pass the 512-token sliding window.
LONG_PARAGRAPHS = [
    "The town of Millbrook sits where two small rivers meet before they run together toward the "
    "sea. For most of its history it was a place that people passed through rather than a place "
    "they stayed. Farmers brought wool and grain down from the hills on market days, sold what "
    "they could, and walked home again before dark. The old stone bridge that crosses the wider "
    "of the two rivers was built by a mason whose name nobody remembers, and it has been repaired "
    "so many times that very little of the original work is left. Even so, people in Millbrook "
    "still call it the old bridge, as if it had never changed at all.",
    "In the spring the rivers rise quickly. Snow melts in the hills, the water turns brown and "
    "fast, and the lower fields flood for a week or two. When the flood goes down it leaves a thin layer of "
    "dark soil behind, and the farmers say that this is the reason their vegetables grow better "
    "than anyone else's. Whether or not that is true, the town has won the county prize for "
    "onions eleven years in a row, and nobody there is in a hurry to argue with the result.",
    "The library stands on the corner of the main square, in a building that used to be a bank. "
    "The heavy vault door is still there, propped open with a wooden wedge, and the room behind "
    "it now holds maps, old newspapers, and boxes of letters that families have given away over "
    "the years. The librarian, a patient woman named Ruth, has spent more than twenty years "
    "sorting those letters by date and by street. She says that if you read enough of them you "
    "start to recognise the handwriting of people who died long before you were born, and that "
    "after a while they feel less like strangers and more like neighbours you have not met yet.",
    "On the first Saturday of every month the square fills with stalls. There is a man who mends "
    "clocks, a woman who sells honey from her own hives, and a boy who has taught himself to fix "
    "bicycles and charges whatever people think is fair. Visitors who "
    "arrive expecting a quiet country town are sometimes surprised by the noise, but most of them "
    "stay longer than they planned, and a few of them come back the next month with friends.",
    "Not everything in Millbrook is peaceful. The town council has argued for years about whether "
    "to build a new road around the centre so that lorries no longer have to squeeze across the "
    "old bridge. Some people want the road because the bridge is narrow and the traffic is "
    "getting worse. Others fear that a bypass would take trade away from the shops in the square "
    "and turn the centre into a place that people only look at from a distance. Both sides have "
    "good reasons, and both sides have written a great many letters to the local newspaper, "
    "which Ruth will no doubt one day file away in a box with the rest.",
    "When you ask the oldest people in Millbrook what they like most about the town, they rarely "
    "talk about the bridge, the library, or the market. They talk about the evenings in late "
    "summer, when the light stays on the hills long after the streets have gone blue with shadow, "
    "and everyone seems to be outside at once. Doors stand open, radios play in kitchens, and the "
    "sound of the two rivers meeting carries all the way up to the church on the hill. If you "
    "stand there long enough, they say, you will understand why so few people who settle in "
    "Millbrook ever really leave.",
    "Here are the five things that visitors to Millbrook remember most:\n\n1.",
]
LONG_TEXT = "\n\n".join(LONG_PARAGRAPHS)

PROMPTS = [
    ("factual", "The capital of France is"),
    ("code", "def fibonacci(n):"),
    ("long", LONG_TEXT),
    ("story", "Once upon a time, there was a little robot who"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description="HF greedy reference for the real Gemma 3 270M Q4_K_M GGUF")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--any-model", action="store_true",
                    help="run on a GGUF other than the pinned 270M file (another quantization, a "
                         "random-weight checkpoint of another shape); needs --out")
    args = ap.parse_args()
    if args.any_model and args.out == DEFAULT_OUT:
        sys.exit("gguf_parity.py: --any-model writes another file's reference: give --out (the "
                 "default is the committed fixture of the pinned 270M file)")
    if not args.model.is_file():
        sys.exit(f"gguf_parity.py: model file {args.model} not found; run scripts/fetch_model.sh gemma3-270m "
                 f"(it prints the path) or pass --model")
    if not args.tokenizer.is_file():
        sys.exit(f"gguf_parity.py: tokenizer {args.tokenizer} not found; run scripts/fetch_tokenizer.sh "
                 f"or pass --tokenizer")

    import gguf
    import torch
    from tokenizers import Tokenizer

    model_sha = mg.sha256(args.model)
    if model_sha != MODEL_SHA256 and not args.any_model:
        sys.exit(f"gguf_parity.py: {args.model} has sha256 {model_sha}, expected {MODEL_SHA256} "
                 f"(the Q4_K_M file scripts/fetch_model.sh gemma3-270m fetches)")
    tok = Tokenizer.from_file(str(args.tokenizer))
    prompts = []
    for name, text in PROMPTS:
        ids = [2] + tok.encode(text, add_special_tokens=False).ids
        prompts.append({"name": name, "text": text, "ids": ids})
    mg.log("prompt lengths (with bos): " + ", ".join(f"{p['name']}={len(p['ids'])}" for p in prompts))
    long_len = len(prompts[2]["ids"])
    if not 600 <= long_len <= 800:
        raise RuntimeError(f"long prompt is {long_len} tokens, want ~700")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    mg.log(f"loading {args.model} ...")
    model = mg.load_hf_gguf(args.model)
    cfg = model.config
    print(cfg, flush=True)

    # HF's parameters against gguf-py's dequantization of the file (norms: stored - 1 in f32)
    reader = gguf.GGUFReader(str(args.model))
    sd = model.state_dict()
    types: dict[str, int] = {}
    norm = {"count": 0, "hf_gain_differs_from_stored": 0, "max_abs_hf_gain_minus_stored": 0.0,
            "stored_min": float("inf"), "stored_max": float("-inf")}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        vals = mg.decode(t.data, t.tensor_type.name).reshape([int(x) for x in reversed(t.shape)])
        hf = sd[mg.hf_name(t.name)].numpy()
        if t.name.endswith("norm.weight"):
            want = (vals - np.float32(1.0)).astype(np.float32)
            gain = (np.float32(1.0) + hf).astype(np.float32)
            norm["count"] += vals.size
            norm["hf_gain_differs_from_stored"] += int(np.sum(gain != vals))
            norm["max_abs_hf_gain_minus_stored"] = max(norm["max_abs_hf_gain_minus_stored"], float(np.abs(gain - vals).max()))
            norm["stored_min"] = min(norm["stored_min"], float(vals.min()))
            norm["stored_max"] = max(norm["stored_max"], float(vals.max()))
        else:
            want = vals
        if hf.shape != want.shape or not np.array_equal(hf.view(np.uint32), want.view(np.uint32)):
            raise RuntimeError(f"{t.name}: HF parameter is not the gguf-py value")
        del vals, want
    own = [k for k in sd if "inv_freq" not in k and "embed_scale" not in k and k != "lm_head.weight"]
    if len(reader.tensors) != len(own):
        raise RuntimeError(f"file has {len(reader.tensors)} tensors, HF model {len(own)}")
    metadata = {}
    for k, f in reader.fields.items():
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            metadata[k] = f"<array of {len(f.data)}>"
            continue
        v = f.contents()
        metadata[k] = v.item() if hasattr(v, "item") else v
    del reader, sd
    mg.log(f"params equal gguf-py dequantization; norm weights {norm}")

    n = args.max_new_tokens

    def result(tokens, logits):
        margins = mg.margins_of(logits)
        return {"tokens": tokens, "margins": margins, "first_near_tie": mg.first_near_tie(margins, NEAR_TIE),
                "first_stop_index": mg.first_stop(tokens), "text": tok.decode(tokens, skip_special_tokens=False)}

    single, single_logits = [], []
    for p in prompts:
        ids = torch.tensor([p["ids"]])
        new, logits = mg.generate(model, ids, torch.ones_like(ids), n)
        single.append(result(new[0].tolist(), logits[0]))
        single_logits.append(logits[0, :LOGIT_STEPS])
        mg.log(f"-- {p['name']}: {single[-1]['text']!r} (first near tie {single[-1]['first_near_tie']})")
    ids, mask, _ = mg.left_pad([p["ids"] for p in prompts])
    new, logits = mg.generate(model, ids, mask, n)
    batched = [result(new[i].tolist(), logits[i]) for i in range(len(prompts))]
    diff = max(float((single_logits[i] - logits[i, :LOGIT_STEPS]).abs().max()) for i in range(len(prompts)))
    first_diff = [next((j for j, (a, b) in enumerate(zip(s["tokens"], b_["tokens"])) if a != b), None)
                  for s, b_ in zip(single, batched)]
    same = all(d is None for d in first_diff)
    mg.log(f"single == batched: {same} (first differences {first_diff}; first-{LOGIT_STEPS}-step logit diff {diff:.3g})")

    summary = mg.hf_model_summary(model)
    expected = {
        "schema": "runner-gemma3-gguf-parity/1",
        "description": "HF transformers greedy outputs (f32, eager) for the real Gemma 3 270M Q4_K_M GGUF "
                       "(scripts/fetch_model.sh gemma3-270m), prompts tokenized with the official tokenizer.json.",
        "generated_by": {"script": "scripts/reference/gguf_parity.py", **mg.versions()},
        "model_file": {"name": args.model.name, "sha256": model_sha, "size_bytes": args.model.stat().st_size,
                       "tensor_types": dict(sorted(types.items())), "metadata": metadata},
        "tokenizer": {"name": args.tokenizer.name, "sha256": mg.sha256(args.tokenizer)},
        "model": summary,
        "hf_config": mg.hf_config_dict(model),
        "hf_loading": {"all_params_equal_gguf_py_dequantized": True, "norm_weights": norm},
        "generation": {"compute_dtype": "float32", "attn_implementation": "eager", "do_sample": False,
                       "max_new_tokens": n, "stop_on_eos": False, "stop_token_ids": list(mg.STOP_TOKEN_IDS),
                       "pad_token_id": mg.PAD_ID, "padding_side": "left", "near_tie_threshold": NEAR_TIE,
                       "torch_threads": 1},
        "prompts": prompts,
        "single": single,
        "batched": {"pad_counts": [int((m == 0).sum()) for m in mask], "results": batched},
        "single_equals_batched": same,
        "single_vs_batched_first_difference": first_diff,
        "max_abs_logit_diff_single_vs_batched": diff,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    mg.log(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
