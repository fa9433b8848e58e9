#!/usr/bin/env python3
"""Rebuild a sentencepiece `tokenizer.model` from the vocabulary stored in a GGUF file.

    PYTHONPATH=<llama.cpp>/gguf-py python scripts/bench/gguf_vocab_to_spm.py IN.gguf OUT/tokenizer.model

llama.cpp's convert_hf_to_gguf.py wants a Gemma 3 checkpoint directory to hold `tokenizer.model`
(sentencepiece) or `tokenizer.json`. The random-weight checkpoints of scripts/reference/make_model.py
have neither, but their vocabulary size (262144) is the real one, so compare_llamacpp.sh gives the
converter the real Gemma 3 vocabulary, read from the real Q4_K_M GGUF (scripts/fetch_model.sh gemma3-270m):
`tokenizer.ggml.tokens`, `.scores` and `.token_type` become the pieces of a sentencepiece BPE
ModelProto (byte fallback, identity normalizer, no dummy prefix, as Gemma 3's own model), with the
piece at `tokenizer.ggml.unknown_token_id` typed UNKNOWN (sentencepiece requires one). GGUF token
types and sentencepiece piece types share their numbering (1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte). The benchmark feeds token ids, so only the vocabulary size and
the special ids matter to it; the file is checked by loading it back with sentencepiece.

Needs: gguf (llama.cpp's gguf-py), numpy, sentencepiece, protobuf.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        import gguf
        import sentencepiece as spm
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        sys.exit(f"gguf_vocab_to_spm.py: {e} (needs llama.cpp's gguf-py on PYTHONPATH, sentencepiece, protobuf)")

    reader = gguf.GGUFReader(str(src))

    def field(name: str, required: bool = True):
        f = reader.fields.get(name)
        if f is None:
            if required:
                sys.exit(f"gguf_vocab_to_spm.py: {src} has no {name}")
            return None
        return f.contents()

    model = field("tokenizer.ggml.model")
    if model != "llama":
        sys.exit(f"gguf_vocab_to_spm.py: {src} has tokenizer.ggml.model = {model!r}, expected 'llama' (sentencepiece)")
    tokens = field("tokenizer.ggml.tokens")
    scores = field("tokenizer.ggml.scores")
    types = field("tokenizer.ggml.token_type")
    if not (len(tokens) == len(scores) == len(types)):
        sys.exit(f"gguf_vocab_to_spm.py: {src}: {len(tokens)} tokens, {len(scores)} scores, {len(types)} types")
    unk = field("tokenizer.ggml.unknown_token_id", required=False)
    bos = field("tokenizer.ggml.bos_token_id", required=False)
    eos = field("tokenizer.ggml.eos_token_id", required=False)
    pad = field("tokenizer.ggml.padding_token_id", required=False)
    unk = 3 if unk is None else int(unk)

    m = pb.ModelProto()
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id = unk
    ts.bos_id = -1 if bos is None else int(bos)
    ts.eos_id = -1 if eos is None else int(eos)
    ts.pad_id = -1 if pad is None else int(pad)
    ts.split_digits = True
    ts.allow_whitespace_only_pieces = True
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = False
    for i, (tok, score, kind) in enumerate(zip(tokens, scores, types)):
        p = m.pieces.add()
        p.piece = tok
        p.score = float(score)
        kind = int(kind)
        if i == unk:
            kind = pb.ModelProto.SentencePiece.UNKNOWN
        elif kind == pb.ModelProto.SentencePiece.UNKNOWN or kind not in (1, 3, 4, 5, 6):
            kind = pb.ModelProto.SentencePiece.NORMAL
        p.type = kind

    data = m.SerializeToString()
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as e:  # sentencepiece raises RuntimeError with its own message
        sys.exit(f"gguf_vocab_to_spm.py: sentencepiece refused the rebuilt model: {e}")
    if sp.vocab_size() != len(tokens) or sp.unk_id() != unk:
        sys.exit(f"gguf_vocab_to_spm.py: rebuilt model has vocab {sp.vocab_size()}, unk {sp.unk_id()}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(dst)
    print(f"{dst}: {len(tokens)} pieces (bos {bos}, eos {eos}, unk {unk}, pad {pad})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
