"""Writes small seeded random Llama-family models in Hugging Face layout.

A model directory holds config.json and the weights as safetensors: one model.safetensors, or
shards model-0000i-of-0000n.safetensors listed by model.safetensors.index.json. The safetensors
bytes are written here (8-byte little-endian header length, JSON header padded with spaces to a
multiple of 8, then the tensors back to back) so the C++ reader is checked against a writer that
shares no code with it.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import struct
from typing import Callable

import numpy as np

from numpy_llama import to_bf16_bits

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM"}
MODEL_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2"}
_DTYPE_NAMES = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


@dataclasses.dataclass(frozen=True)
class Spec:
    arch: str = "llama"  # llama | mistral | qwen2 (q/k/v projections with bias)
    hidden_size: int = 64
    intermediate_size: int = 160
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int = 300
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # e.g. LLAMA3_SCALING
    tie_word_embeddings: bool = False
    sliding_window: int | None = None  # Mistral only
    dtype: str = "bf16"  # bf16 | f16 | f32
    shards: int = 2  # 1 writes a single model.safetensors

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# Llama 3.1's scaling with a short original context, so that at head_dim 16 and theta 1e4 the
# pairs fall in all three regimes (kept, smoothed, divided by the factor).
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def config_json(spec: Spec) -> dict:
    config = {
        "architectures": [ARCHITECTURES[spec.arch]],
        "model_type": MODEL_TYPES[spec.arch],
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": 2048,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[spec.dtype],
    }
    if spec.arch == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    if spec.arch == "mistral":
        config["sliding_window"] = spec.sliding_window
    if spec.arch == "qwen2":
        config["use_sliding_window"] = False
    return config


def random_tensors(spec: Spec, seed: int) -> dict[str, np.ndarray]:
    """Hugging Face names -> float32 values, scaled so that activations stay O(1)."""
    rng = np.random.default_rng(seed)
    hidden, inter = spec.hidden_size, spec.intermediate_size
    q_dim, kv_dim = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim

    def linear(out_features: int, in_features: int) -> np.ndarray:
        return rng.normal(0.0, in_features ** -0.5, (out_features, in_features)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(hidden)).astype(np.float32)

    tensors = {"model.embed_tokens.weight":
               rng.standard_normal((spec.vocab_size, hidden)).astype(np.float32)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = norm()
        tensors[p + "self_attn.q_proj.weight"] = linear(q_dim, hidden)
        tensors[p + "self_attn.k_proj.weight"] = linear(kv_dim, hidden)
        tensors[p + "self_attn.v_proj.weight"] = linear(kv_dim, hidden)
        if spec.arch == "qwen2":
            for name, size in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                tensors[p + f"self_attn.{name}_proj.bias"] = (
                    0.5 * rng.standard_normal(size)).astype(np.float32)
        tensors[p + "self_attn.o_proj.weight"] = linear(hidden, q_dim)
        tensors[p + "post_attention_layernorm.weight"] = norm()
        tensors[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = linear(hidden, inter)
    tensors["model.norm.weight"] = norm()
    if not spec.tie_word_embeddings:
        tensors["lm_head.weight"] = linear(spec.vocab_size, hidden)
    return tensors


def encode(values: np.ndarray, dtype: str) -> bytes:
    if dtype == "bf16":
        return to_bf16_bits(values).astype("<u2").tobytes()
    if dtype == "f16":
        return values.astype("<f2").tobytes()
    if dtype == "f32":
        return values.astype("<f4").tobytes()
    raise ValueError(f"dtype {dtype!r}")


def write_safetensors(path, tensors: dict[str, np.ndarray], dtype: str) -> None:
    header, blobs, offset = {}, [], 0
    for name, values in tensors.items():
        blob = encode(values, dtype)
        header[name] = {"dtype": _DTYPE_NAMES[dtype], "shape": list(values.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    write_raw_safetensors(path, header, b"".join(blobs))


def write_raw_safetensors(path, header: dict, body: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + body)


def read_raw_safetensors(path) -> tuple[dict, bytes]:
    data = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack_from("<Q", data, 0)
    return json.loads(data[8:8 + header_len]), data[8 + header_len:]


def edit_header(path, edit: Callable[[dict], None]) -> None:
    """Rewrites a safetensors file with `edit` applied to its header, keeping the tensor bytes."""
    header, body = read_raw_safetensors(path)
    edit(header)
    write_raw_safetensors(path, header, body)


def shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def write_model(directory, spec: Spec, seed: int = 0) -> dict[str, np.ndarray]:
    """Writes the model into `directory`; returns the float32 values before rounding."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_json(spec), indent=2))
    tensors = random_tensors(spec, seed)
    names = list(tensors)
    files = shard_names(spec.shards)
    weight_map = {}
    for shard, file in enumerate(files):
        part = names[shard * len(names) // len(files):(shard + 1) * len(names) // len(files)]
        write_safetensors(directory / file, {n: tensors[n] for n in part}, spec.dtype)
        weight_map.update({n: file for n in part})
    if spec.shards > 1:
        itemsize = {"bf16": 2, "f16": 2, "f32": 4}[spec.dtype]
        total = sum(v.size for v in tensors.values()) * itemsize
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return tensors


# The configurations the model-level tests cover, by name.
TEST_SPECS = {
    "llama-gqa-untied": Spec(),
    "llama-tied-llama3-rope": Spec(tie_word_embeddings=True, rope_scaling=LLAMA3_SCALING,
                                   num_layers=3),
    "llama-linear-rope-f16": Spec(rope_scaling={"rope_type": "linear", "factor": 2.0},
                                  dtype="f16"),
    "qwen2-bias": Spec(arch="qwen2", rope_theta=1e6, rms_norm_eps=1e-6),
    "mistral-mha-f32": Spec(arch="mistral", num_kv_heads=4, sliding_window=4096, dtype="f32"),
    "llama-mqa-single-file": Spec(num_kv_heads=1, shards=1),
}
