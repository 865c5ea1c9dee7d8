"""TensorSource::Read (through `pulse-dump-tensor --hf`) against independent readers.

- GGUF: files written by the `gguf` package (llama.cpp's own writer) and the real SmolLM2 file.
  For the llama architecture, llama.cpp's converter interleaves the rows of q/k within each head;
  our reader must hand back the Hugging Face order, which NumPy restores here by inverting the
  converter's permute(). Qwen2 files are not permuted.
- safetensors: the directories hf_writer writes, every tensor, bit for bit.
"""
from __future__ import annotations

import subprocess

import gguf
import numpy as np
import pytest

import hf_writer
from numpy_llama import from_bf16_bits, to_bf16_bits


def dump_hf(tool, path, name, out_path) -> tuple[list[int], str, np.ndarray]:
    result = subprocess.run([str(tool("pulse-dump-tensor")), "--hf", str(path), name,
                             str(out_path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    shape_text, stored_type = result.stdout.split()
    shape = [int(d) for d in shape_text.split(",")]
    return shape, stored_type, np.fromfile(out_path, "<f4").reshape(shape)


def converter_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: HF rows -> GGUF rows."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def converter_unpermute(weights: np.ndarray, n_head: int) -> np.ndarray:
    return (weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


# --- GGUF written by the gguf package ------------------------------------------------------

HIDDEN, HEADS, KV_HEADS, INTER, VOCAB, LAYERS = 32, 4, 2, 48, 40, 2
HEAD_DIM = HIDDEN // HEADS


def hf_tensors(rng: np.random.Generator, bias: bool) -> dict[str, np.ndarray]:
    def values(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": values(VOCAB, HIDDEN),
               "model.norm.weight": values(HIDDEN), "lm_head.weight": values(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": values(HIDDEN),
            p + "self_attn.q_proj.weight": values(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": values(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": values(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": values(HIDDEN, HEADS * HEAD_DIM),
            p + "post_attention_layernorm.weight": values(HIDDEN),
            p + "mlp.gate_proj.weight": values(INTER, HIDDEN),
            p + "mlp.up_proj.weight": values(INTER, HIDDEN),
            p + "mlp.down_proj.weight": values(HIDDEN, INTER),
        })
        if bias:
            tensors.update({p + "self_attn.q_proj.bias": values(HEADS * HEAD_DIM),
                            p + "self_attn.k_proj.bias": values(KV_HEADS * HEAD_DIM),
                            p + "self_attn.v_proj.bias": values(KV_HEADS * HEAD_DIM)})
    return tensors


GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
               "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf_name: str) -> str:
    if hf_name in GGUF_NAMES:
        return GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{LAYER_NAMES[module]}.{kind}"


def write_tiny_gguf(path, arch: str, tensors: dict[str, np.ndarray]) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(12345.0)
    writer.add_vocab_size(VOCAB)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, values in tensors.items():
        if arch == "llama" and "q_proj" in name:
            values = converter_permute(values, HEADS)
        elif arch == "llama" and "k_proj" in name:
            values = converter_permute(values, KV_HEADS)
        writer.add_tensor(gguf_name(name), values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gguf_package_file_reads_in_hf_layout(tool, tmp_path, arch):
    tensors = hf_tensors(np.random.default_rng(5), bias=arch == "qwen2")
    path = tmp_path / f"{arch}.gguf"
    write_tiny_gguf(path, arch, tensors)
    for name, expected in tensors.items():
        shape, stored_type, ours = dump_hf(tool, path, name, tmp_path / "t.f32")
        assert stored_type == "F32"
        assert shape == list(expected.shape), name
        np.testing.assert_array_equal(ours, expected, err_msg=name)


# --- the real SmolLM2 file ---------------------------------------------------------------------

def test_smollm2_attention_in_hf_layout(tool, tmp_path, smollm2_path):
    reader = gguf.GGUFReader(str(smollm2_path))
    by_name = {t.name: t for t in reader.tensors}

    def raw(name):
        tensor = by_name[name]
        return gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)

    for layer in (0, 17):
        for module, gguf_module, heads in (("q_proj", "attn_q", 9), ("k_proj", "attn_k", 3),
                                           ("v_proj", "attn_v", None)):
            hf = f"model.layers.{layer}.self_attn.{module}.weight"
            _, stored_type, ours = dump_hf(tool, smollm2_path, hf, tmp_path / "t.f32")
            assert stored_type == "Q4_1"
            stored = raw(f"blk.{layer}.{gguf_module}.weight")
            expected = stored if heads is None else converter_unpermute(stored, heads)
            np.testing.assert_array_equal(ours, expected, err_msg=hf)
    _, _, embed = dump_hf(tool, smollm2_path, "model.embed_tokens.weight", tmp_path / "e.f32")
    np.testing.assert_array_equal(embed, raw("token_embd.weight"))


# --- safetensors directories -------------------------------------------------------------------

def stored_values(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return from_bf16_bits(to_bf16_bits(values))
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float32)
    return values.astype(np.float32)


@pytest.mark.parametrize("name", list(hf_writer.TEST_SPECS))
def test_safetensors_tensors_bit_exact(tool, tmp_path, name):
    spec = hf_writer.TEST_SPECS[name]
    tensors = hf_writer.write_model(tmp_path / "model", spec, seed=3)
    for i, (tensor, values) in enumerate(tensors.items()):
        path = tmp_path / "model" / ("config.json" if i % 2 else "")
        shape, stored_type, ours = dump_hf(tool, path, tensor, tmp_path / "t.f32")
        assert stored_type == spec.dtype
        assert shape == list(values.shape), tensor
        expected = stored_values(values, spec.dtype)
        np.testing.assert_array_equal(ours.view(np.uint32), expected.view(np.uint32),
                                      err_msg=tensor)
