"""An independent float64 NumPy forward pass of Llama-family decoders (Llama, Mistral, Qwen2).

Written from the architectures' definitions (not from our C++), to check the C++ forward pass
against. Weights come from a GGUF file (read with the PyPI `gguf` package, kept in llama.cpp's
own convention) or from a Hugging Face directory (config.json + safetensors, read here).

The two conventions differ only in how q/k rows pair up for the rotary embedding:
- Hugging Face "rotate half": within a head, dimension i rotates with i + head_dim/2;
- llama.cpp for `llama`-arch GGUF files: q/k rows are stored permuted so that dimension 2i
  rotates with 2i+1 (GPT-J style, interleaved). We apply that rotation directly rather than
  un-permuting, so this reference shares nothing with the C++ loader's un-permutation.
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import struct

import numpy as np


@dataclasses.dataclass(frozen=True)
class Config:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    # Hugging Face's rope_scaling dict ("rope_type": "linear" | "llama3" and its fields), or None.
    rope_scaling: dict | None = None
    # True for llama.cpp's interleaved rotary pairs (2i, 2i+1); False for rotate-half.
    rope_interleaved: bool = False
    # Mistral's sliding window: a query at position p sees keys at positions > p - window.
    sliding_window: int | None = None


@dataclasses.dataclass
class Layer:
    attn_norm: np.ndarray  # [hidden]
    q: np.ndarray  # [heads * head_dim, hidden]
    k: np.ndarray  # [kv_heads * head_dim, hidden]
    v: np.ndarray  # [kv_heads * head_dim, hidden]
    o: np.ndarray  # [hidden, heads * head_dim]
    mlp_norm: np.ndarray  # [hidden]
    gate: np.ndarray  # [intermediate, hidden]
    up: np.ndarray  # [intermediate, hidden]
    down: np.ndarray  # [hidden, intermediate]
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    o_bias: np.ndarray | None = None


@dataclasses.dataclass
class Weights:
    config: Config
    embed: np.ndarray  # [vocab, hidden]
    layers: list[Layer]
    norm: np.ndarray  # [hidden]
    lm_head: np.ndarray  # [vocab, hidden]; the embedding itself when tied


def rope_inverse_frequencies(config: Config) -> np.ndarray:
    """Per-pair inverse frequencies [head_dim / 2], scaled as transformers computes them."""
    dim = config.head_dim
    inv_freq = 1.0 / config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = config.rope_scaling
    rope_type = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if rope_type in (None, "default"):
        return inv_freq
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        factor = scaling["factor"]
        low_freq_factor = scaling["low_freq_factor"]
        high_freq_factor = scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        low_freq_wavelen = old_context / low_freq_factor
        high_freq_wavelen = old_context / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
        return np.where(is_medium, smoothed, scaled)
    raise NotImplementedError(f"rope_scaling type {rope_type!r}")


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def apply_rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray,
               interleaved: bool) -> np.ndarray:
    """Rotates x [tokens, heads, head_dim] by angle position * inv_freq[pair]."""
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos = np.cos(angles)[:, None, :]
    sin = np.sin(angles)[:, None, :]
    if interleaved:
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        half = x.shape[-1] // 2
        first, second = x[..., :half], x[..., half:]
    rotated_first = first * cos - second * sin
    rotated_second = second * cos + first * sin
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = rotated_first, rotated_second
    else:
        out[..., :half], out[..., half:] = rotated_first, rotated_second
    return out


def _linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    y = x @ weight.T
    return y if bias is None else y + bias


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class KvCache:
    """Keys [positions, kv_heads, head_dim] (rotated) and values, per layer."""

    def __init__(self, config: Config):
        shape = (0, config.num_kv_heads, config.head_dim)
        self.keys = [np.zeros(shape) for _ in range(config.num_layers)]
        self.values = [np.zeros(shape) for _ in range(config.num_layers)]

    @property
    def length(self) -> int:
        return self.keys[0].shape[0]


class Model:
    def __init__(self, weights: Weights):
        self.weights = weights
        self.config = weights.config
        self.inv_freq = rope_inverse_frequencies(self.config)

    def forward(self, token_ids, cache: KvCache | None = None) -> np.ndarray:
        """Logits [tokens, vocab] for every position; appends the tokens to `cache` if given."""
        cfg = self.config
        cache = cache if cache is not None else KvCache(cfg)
        ids = np.asarray(token_ids, dtype=np.int64)
        start = cache.length
        positions = np.arange(start, start + len(ids))
        h = self.weights.embed[ids]
        for index, layer in enumerate(self.weights.layers):
            h = h + self._attention(index, layer, rms_norm(h, layer.attn_norm, cfg.rms_norm_eps),
                                    positions, cache)
            x = rms_norm(h, layer.mlp_norm, cfg.rms_norm_eps)
            h = h + (_silu(x @ layer.gate.T) * (x @ layer.up.T)) @ layer.down.T
        return rms_norm(h, self.weights.norm, cfg.rms_norm_eps) @ self.weights.lm_head.T

    def _attention(self, index: int, layer: Layer, x: np.ndarray, positions: np.ndarray,
                   cache: KvCache) -> np.ndarray:
        cfg = self.config
        tokens, dim = len(positions), cfg.head_dim
        q = _linear(x, layer.q, layer.q_bias).reshape(tokens, cfg.num_heads, dim)
        k = _linear(x, layer.k, layer.k_bias).reshape(tokens, cfg.num_kv_heads, dim)
        v = _linear(x, layer.v, layer.v_bias).reshape(tokens, cfg.num_kv_heads, dim)
        q = apply_rope(q, positions, self.inv_freq, cfg.rope_interleaved)
        k = apply_rope(k, positions, self.inv_freq, cfg.rope_interleaved)
        cache.keys[index] = keys = np.concatenate([cache.keys[index], k])
        cache.values[index] = values = np.concatenate([cache.values[index], v])

        group = cfg.num_heads // cfg.num_kv_heads
        # Query head h reads KV head h // group: [kv_heads, group, tokens, dim].
        q = q.reshape(tokens, cfg.num_kv_heads, group, dim).transpose(1, 2, 0, 3)
        scores = np.einsum("kgtd,skd->kgts", q, keys) / math.sqrt(dim)
        key_positions = np.arange(keys.shape[0])
        visible = key_positions[None, :] <= positions[:, None]
        if cfg.sliding_window is not None:
            visible &= key_positions[None, :] > positions[:, None] - cfg.sliding_window
        scores = np.where(visible, scores, -np.inf)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.einsum("kgts,skd->tkgd", probs, values).reshape(tokens, cfg.num_heads * dim)
        return _linear(out, layer.o, layer.o_bias)

    def greedy(self, prompt, steps: int) -> tuple[np.ndarray, list[int]]:
        """(last prompt position's logits [vocab], `steps` greedy continuation tokens)."""
        cache = KvCache(self.config)
        last_logits = self.forward(prompt, cache)[-1]
        logits, tokens = last_logits, []
        for step in range(steps):
            tokens.append(int(np.argmax(logits)))
            if step + 1 < steps:
                logits = self.forward([tokens[-1]], cache)[-1]
        return last_logits, tokens


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even (no NaNs here)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    return ((bits + rounding) >> 16).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def with_bf16_weights(weights: Weights) -> Weights:
    """The weights as a bf16 store holds them: the embedding, lm_head and every projection
    rounded to bf16; norms and biases kept."""

    def rounded(values: np.ndarray) -> np.ndarray:
        return from_bf16_bits(to_bf16_bits(values)).astype(np.float64)

    embed = rounded(weights.embed)
    lm_head = embed if weights.lm_head is weights.embed else rounded(weights.lm_head)
    layers = [dataclasses.replace(layer, q=rounded(layer.q), k=rounded(layer.k),
                                  v=rounded(layer.v), o=rounded(layer.o),
                                  gate=rounded(layer.gate), up=rounded(layer.up),
                                  down=rounded(layer.down))
              for layer in weights.layers]
    return dataclasses.replace(weights, embed=embed, lm_head=lm_head, layers=layers)


# ---------------------------------------------------------------------------------------------
# GGUF (llama.cpp convention)


def _gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise KeyError(f"GGUF metadata {key} is missing")
        return default
    return field.contents()


def load_gguf(path) -> Weights:
    import gguf  # PyPI package; imported here so the Hugging Face path does not need it

    reader = gguf.GGUFReader(str(path))
    arch = _gguf_field(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise NotImplementedError(f"GGUF architecture {arch!r}")
    tensors = {t.name: t for t in reader.tensors}

    def tensor(name: str) -> np.ndarray | None:
        t = tensors.pop(name, None)
        if t is None:
            return None
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        # GGUF lists dimensions innermost first; NumPy's shape is outermost first.
        return values.reshape(tuple(reversed([int(d) for d in t.shape]))).astype(np.float64)

    def required(name: str) -> np.ndarray:
        values = tensor(name)
        if values is None:
            raise KeyError(f"GGUF tensor {name} is missing")
        return values

    hidden = _gguf_field(reader, f"{arch}.embedding_length")
    heads = _gguf_field(reader, f"{arch}.attention.head_count")
    head_dim = _gguf_field(reader, f"{arch}.attention.key_length", hidden // heads)
    if _gguf_field(reader, f"{arch}.rope.dimension_count", head_dim) != head_dim:
        raise NotImplementedError("partial rotary embeddings")
    rope_scaling = None
    scaling_type = _gguf_field(reader, f"{arch}.rope.scaling.type", "none")
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear",
                        "factor": _gguf_field(reader, f"{arch}.rope.scaling.factor")}
    elif scaling_type != "none":
        raise NotImplementedError(f"GGUF rope scaling {scaling_type!r}")
    if "rope_freqs.weight" in tensors:
        raise NotImplementedError("GGUF rope_freqs (llama3 frequency factors)")

    embed = required("token_embd.weight")
    config = Config(
        hidden_size=hidden,
        intermediate_size=_gguf_field(reader, f"{arch}.feed_forward_length"),
        num_layers=_gguf_field(reader, f"{arch}.block_count"),
        num_heads=heads,
        num_kv_heads=_gguf_field(reader, f"{arch}.attention.head_count_kv", heads),
        head_dim=head_dim,
        vocab_size=embed.shape[0],
        rms_norm_eps=_gguf_field(reader, f"{arch}.attention.layer_norm_rms_epsilon"),
        rope_theta=_gguf_field(reader, f"{arch}.rope.freq_base", 10000.0),
        rope_scaling=rope_scaling,
        # llama.cpp permutes q/k rows of `llama` files only and rotates them pairwise;
        # `qwen2` files keep Hugging Face order and use the rotate-half ("NEOX") rotation.
        rope_interleaved=(arch == "llama"),
    )
    layers = []
    for i in range(config.num_layers):
        p = f"blk.{i}."
        layers.append(Layer(
            attn_norm=required(p + "attn_norm.weight"),
            q=required(p + "attn_q.weight"), k=required(p + "attn_k.weight"),
            v=required(p + "attn_v.weight"), o=required(p + "attn_output.weight"),
            mlp_norm=required(p + "ffn_norm.weight"),
            gate=required(p + "ffn_gate.weight"), up=required(p + "ffn_up.weight"),
            down=required(p + "ffn_down.weight"),
            q_bias=tensor(p + "attn_q.bias"), k_bias=tensor(p + "attn_k.bias"),
            v_bias=tensor(p + "attn_v.bias"), o_bias=tensor(p + "attn_output.bias")))
    lm_head = tensor("output.weight")
    norm = required("output_norm.weight")
    if tensors:
        raise NotImplementedError(f"GGUF tensors this reference does not use: {sorted(tensors)}")
    return Weights(config=config, embed=embed, layers=layers, norm=norm,
                   lm_head=embed if lm_head is None else lm_head)


# ---------------------------------------------------------------------------------------------
# Hugging Face directory (config.json + safetensors)

_SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
                       "F64": np.dtype("<f8")}


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as float32 (bf16 widened exactly)."""
    data = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + header_len])
    body = memoryview(data)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(body[begin:end], dtype=_SAFETENSORS_DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = from_bf16_bits(raw)
        tensors[name] = raw.astype(np.float32).reshape(info["shape"])
    return tensors


def read_hf_tensors(directory) -> dict[str, np.ndarray]:
    directory = pathlib.Path(directory)
    single = directory / "model.safetensors"
    if single.exists():
        return read_safetensors(single)
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(directory / shard))
    return tensors


def hf_config(config_json: dict) -> Config:
    arch = config_json["architectures"][0]
    if arch not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        raise NotImplementedError(f"architecture {arch!r}")
    if config_json.get("use_sliding_window"):
        raise NotImplementedError("Qwen2 sliding window")
    heads = config_json["num_attention_heads"]
    # transformers 5 moved rope_theta and the scaling into "rope_parameters".
    rope = config_json.get("rope_parameters") or config_json.get("rope_scaling") or {}
    rope_theta = config_json.get("rope_theta", rope.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    return Config(
        hidden_size=config_json["hidden_size"],
        intermediate_size=config_json["intermediate_size"],
        num_layers=config_json["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=config_json.get("num_key_value_heads") or heads,
        head_dim=config_json.get("head_dim") or config_json["hidden_size"] // heads,
        vocab_size=config_json["vocab_size"],
        rms_norm_eps=config_json.get("rms_norm_eps", 1e-6),
        rope_theta=rope_theta,
        rope_scaling=None if rope_type == "default" else rope,
        # MistralConfig's default window is 4096; an explicit null turns it off.
        sliding_window=(config_json.get("sliding_window", 4096)
                        if arch == "MistralForCausalLM" else None),
    )


def load_hf(directory) -> Weights:
    directory = pathlib.Path(directory)
    config_json = json.loads((directory / "config.json").read_text())
    config = hf_config(config_json)
    tensors = read_hf_tensors(directory)

    def tensor(name: str) -> np.ndarray | None:
        values = tensors.pop(name, None)
        return None if values is None else values.astype(np.float64)

    def required(name: str) -> np.ndarray:
        values = tensor(name)
        if values is None:
            raise KeyError(f"tensor {name} is missing")
        return values

    layers = []
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        layers.append(Layer(
            attn_norm=required(p + "input_layernorm.weight"),
            q=required(attn + "q_proj.weight"), k=required(attn + "k_proj.weight"),
            v=required(attn + "v_proj.weight"), o=required(attn + "o_proj.weight"),
            mlp_norm=required(p + "post_attention_layernorm.weight"),
            gate=required(mlp + "gate_proj.weight"), up=required(mlp + "up_proj.weight"),
            down=required(mlp + "down_proj.weight"),
            q_bias=tensor(attn + "q_proj.bias"), k_bias=tensor(attn + "k_proj.bias"),
            v_bias=tensor(attn + "v_proj.bias"), o_bias=tensor(attn + "o_proj.bias")))
    embed = required("model.embed_tokens.weight")
    norm = required("model.norm.weight")
    lm_head = embed if config_json.get("tie_word_embeddings", False) else required("lm_head.weight")
    if tensors:
        raise NotImplementedError(f"tensors this reference does not use: {sorted(tensors)}")
    return Weights(config=config, embed=embed, layers=layers, norm=norm, lm_head=lm_head)
