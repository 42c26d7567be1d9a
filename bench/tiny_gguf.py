"""A tiny llama-architecture model with random weights, written locally as GGUF.

bench/llm_routing.py's real-engine rows (``--engine llama``) run llama.cpp's
``llama-server`` on 2 shared cores, with no model download: this writes one.
What the benchmark needs from a model is a prefill whose cost grows with the
uncached prompt and a real KV cache, not sensible text, so the weights are
random (seeded) and the parameters are chosen for the cost: ~27M parameters in
f16 make a cold ~2,000-token prompt take about a second on one core, which is
the gap between a cache hit and a miss the routing is about.

Parameters (llama.cpp's ``llama`` architecture):

- 8 layers, hidden size 512, 8 attention heads of 64 (no grouped KV), feed
  forward 1536 (SwiGLU), RMS norm eps 1e-5, RoPE base 10000, context 4096;
- vocabulary of 355 SentencePiece-style tokens: ``<unk>``, ``<s>``, ``</s>``,
  the 256 byte tokens ``<0x00>``..``<0xFF>``, ``▁`` (the space) and the 95
  printable ASCII characters, and no merges: one token per character of ASCII
  text (a prompt's token count is its length, plus BOS);
- weights normal(0, 0.02) from numpy's generator seeded with ``--seed``
  (default 32), f16 except the norms (f32, as llama.cpp wants them).

    python bench/tiny_gguf.py /work/llama/tiny.gguf     # a ~55 MB file, seconds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

LAYERS = 8
HIDDEN = 512
HEADS = 8
FFN = 1536
CONTEXT = 4096
NORM_EPS = 1e-5
ROPE_BASE = 10000.0
STD = 0.02

# llama.cpp's token types (gguf.TokenType): NORMAL 1, UNKNOWN 2, CONTROL 3, BYTE 6.
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: specials, byte fallbacks, the space, ASCII."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [UNKNOWN, CONTROL, CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    tokens.append("\u2581")  # SentencePiece's space
    types.append(NORMAL)
    tokens += [chr(c) for c in range(33, 127)]  # printable ASCII but the space
    types += [NORMAL] * (127 - 33)
    scores = [0.0] * len(tokens)
    return tokens, scores, types


def write(path: Path, seed: int) -> int:
    """Write the model to ``path``; returns its parameter count."""
    import gguf  # the bench's requirement (pyproject's bench extra), not the package's

    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("steadyserve-bench-tiny-random")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(NORM_EPS)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    params = 0

    def tensor(name: str, *shape: int) -> None:
        # numpy's (rows, columns) is GGUF's (ne1, ne0): a matrix maps ne0 -> ne1.
        nonlocal params
        data = rng.normal(0.0, STD, size=shape).astype(np.float16)
        w.add_tensor(name, data)
        params += data.size

    def norm(name: str) -> None:
        nonlocal params
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))
        params += HIDDEN

    tensor("token_embd.weight", vocab, HIDDEN)
    for i in range(LAYERS):
        norm(f"blk.{i}.attn_norm.weight")
        for part in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{part}.weight", HIDDEN, HIDDEN)
        norm(f"blk.{i}.ffn_norm.weight")
        tensor(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    norm("output_norm.weight")
    tensor("output.weight", vocab, HIDDEN)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return params


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("path", type=Path, help="where to write the .gguf file")
    p.add_argument("--seed", type=int, default=32)
    args = p.parse_args()
    params = write(args.path, args.seed)
    size = args.path.stat().st_size
    print(f"{args.path}: {params / 1e6:.1f}M parameters, {size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
