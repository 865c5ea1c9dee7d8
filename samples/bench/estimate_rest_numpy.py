"""Whether attention to the blocks selection leaves out is better estimated than dropped.

A NumPy trial on the real model (tests/python/numpy_llama.py, in float32), beside
pulse-offload-accuracy: SmolLM2 teacher-forced over windows of tiny-shakespeare, the last
`--eval` tokens of each window attending sparsely as the library's SoloHead does by default
(8-token blocks, an 8-token sink, a 32-token window, every key scored in int4, softmax-sum over
the heads, the best key a block), and the candidates it does not pick either
  drop       left out (what the library does),
  rest       kept as estimated terms: each key's weight from its int4 copy, each value its block's
             mean value (RetroInfer's estimation zone; it would cost a mean value a block and KV
             head on the device),
  rest-zero  their weights in the softmax's sum but no value.
Perplexity of the scored tokens against dense attention, records as JSON Lines.

  python3 samples/bench/estimate_rest_numpy.py --model M.gguf --text T.txt [--size 2048]
      [--windows 1] [--budget 128] [--eval 128] [--out FILE.jsonl]
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import gguf
import numpy as np
import tokenizers
from tokenizers import models, pre_tokenizers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
import numpy_llama as nl  # noqa: E402

BLOCK, SINK, WINDOW = 8, 8, 32
MODES = ("drop", "rest", "rest-zero")


def tokenize(model_path: str, text: str) -> list[int]:
    reader = gguf.GGUFReader(model_path)
    vocab = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    tokenizer = tokenizers.Tokenizer(
        models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return tokenizer.encode(text).ids


def int4_rows(x: np.ndarray) -> np.ndarray:
    """Each row quantized to [-7, 7] with a scale a row (core/backend/summary_int.h), read back."""
    scale = np.abs(x).max(-1, keepdims=True) / 7.0
    safe = np.where(scale > 0, scale, 1.0)
    return np.clip(np.rint(x / safe), -7, 7) * scale


def sparse_row(q, keys, values, int4_keys, position, budget, mode, group):
    """One query row [heads, dim] at `position` over keys/values [tokens, kv_heads, dim]."""
    heads, dim = q.shape
    tokens = position + 1
    blocks = -(-tokens // BLOCK)
    sink_end = min(-(-SINK // BLOCK), blocks)
    window_begin = max(max(tokens - WINDOW, 0) // BLOCK, sink_end)
    forced = sink_end * BLOCK + (tokens - window_begin * BLOCK)
    picks = min(max(budget - forced, 0) // BLOCK, window_begin - sink_end)
    scale = 1 / math.sqrt(dim)
    kv_of = np.arange(heads) // group
    logits = np.einsum("hd,shd->hs", q, keys[:tokens, kv_of]) * scale
    candidates = np.arange(sink_end * BLOCK, window_begin * BLOCK)
    estimates = np.einsum("hd,shd->hs", q, int4_keys[candidates][:, kv_of]) * scale
    block_scores = estimates.reshape(heads, -1, BLOCK).max(-1)
    shares = np.exp(block_scores - block_scores.max(1, keepdims=True))
    shares /= shares.sum(1, keepdims=True)
    picked = np.zeros(block_scores.shape[1], bool)
    picked[np.argsort(-shares.sum(0), kind="stable")[:picks]] = True
    picked_tokens = np.repeat(picked, BLOCK)
    attended = np.ones(tokens, bool)
    attended[candidates] = picked_tokens
    top = np.where(attended, logits, -np.inf).max(1, keepdims=True)
    weights = np.where(attended, np.exp(logits - top), 0.0)
    numerator = np.einsum("hs,shd->hd", weights, values[:tokens, kv_of])
    denominator = weights.sum(1)
    if mode != "drop" and len(candidates):
        rest = np.where(picked_tokens, 0.0, np.exp(estimates - top))
        rest_blocks = rest.reshape(heads, -1, BLOCK).sum(-1)
        denominator = denominator + rest_blocks.sum(1)
        if mode == "rest":
            means = values[candidates].reshape(-1, BLOCK, values.shape[1], dim).mean(1)
            numerator = numerator + np.einsum("hb,bhd->hd", rest_blocks, means[:, kv_of])
    return numerator / denominator[:, None]


class SparseModel(nl.Model):
    """numpy_llama's forward pass, its rows attending sparsely while `sparse` is set."""

    sparse: tuple[int, str] | None = None

    def _attention(self, index, layer, x, positions, cache):
        if self.sparse is None:
            return super()._attention(index, layer, x, positions, cache)
        cfg = self.config
        rows, dim = len(positions), cfg.head_dim
        q = nl._linear(x, layer.q, layer.q_bias).reshape(rows, cfg.num_heads, dim)
        k = nl._linear(x, layer.k, layer.k_bias).reshape(rows, cfg.num_kv_heads, dim)
        v = nl._linear(x, layer.v, layer.v_bias).reshape(rows, cfg.num_kv_heads, dim)
        q = nl.apply_rope(q, positions, self.inv_freq, cfg.rope_interleaved)
        k = nl.apply_rope(k, positions, self.inv_freq, cfg.rope_interleaved)
        keys = cache.keys[index] = np.concatenate([cache.keys[index], k]).astype(np.float32)
        values = cache.values[index] = np.concatenate([cache.values[index], v]).astype(np.float32)
        int4_keys = int4_rows(keys)
        budget, mode = self.sparse
        group = cfg.num_heads // cfg.num_kv_heads
        out = np.stack([sparse_row(q[i], keys, values, int4_keys, int(positions[i]), budget, mode,
                                   group) for i in range(rows)])
        return nl._linear(out.reshape(rows, -1), layer.o, layer.o_bias)


def float32_weights(weights: nl.Weights) -> nl.Weights:
    cast = lambda a: None if a is None else np.asarray(a, np.float32)  # noqa: E731
    for layer in weights.layers:
        for field in ("attn_norm q k v o mlp_norm gate up down "
                      "q_bias k_bias v_bias o_bias").split():
            setattr(layer, field, cast(getattr(layer, field)))
    weights.embed, weights.norm, weights.lm_head = (
        cast(weights.embed), cast(weights.norm), cast(weights.lm_head))
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--budget", type=int, default=128)
    parser.add_argument("--eval", type=int, default=128)
    parser.add_argument("--out")
    args = parser.parse_args()
    model = SparseModel(float32_weights(nl.load_gguf(args.model)))
    ids = tokenize(args.model, pathlib.Path(args.text).read_text())
    # As pulse-offload-accuracy: windows 4 a text's length apart, a prefix of whole 32-token units.
    stride = (len(ids) - args.size) // 4
    context = (args.size - args.eval - 1) // 32 * 32
    nll = {mode: [] for mode in ("dense", *MODES)}
    for w in range(args.windows):
        window = ids[w * stride:w * stride + args.size]
        cache = nl.KvCache(model.config)
        model.sparse = None
        model.forward(window[:context], cache)
        prefix = ([k.copy() for k in cache.keys], [v.copy() for v in cache.values])
        targets = np.asarray(window[context + 1:context + args.eval + 1])
        for mode in nll:
            cache.keys, cache.values = [k.copy() for k in prefix[0]], [v.copy() for v in prefix[1]]
            model.sparse = None if mode == "dense" else (args.budget, mode)
            logits = model.forward(window[context:context + args.eval], cache)
            logits = logits - logits.max(1, keepdims=True)
            log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
            nll[mode].append(-log_probs[np.arange(args.eval), targets])
    dense = math.exp(np.concatenate(nll["dense"]).mean())
    records = []
    for mode in MODES:
        ppl = math.exp(np.concatenate(nll[mode]).mean())
        print(f"{mode:10} ppl {ppl:9.3f} ({100 * (ppl / dense - 1):+.1f}% against dense {dense:.3f})")
        records.append({"bench": "estimate-rest", "model": pathlib.Path(args.model).name,
                        "mode": mode, "window_tokens": args.size, "windows": args.windows,
                        "budget": args.budget, "eval_tokens": args.eval, "ppl": ppl,
                        "ppl_dense": dense, "command": " ".join(sys.argv)})
    if args.out:
        with open(args.out, "w") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
