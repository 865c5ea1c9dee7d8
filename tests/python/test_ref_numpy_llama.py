"""Self-checks of the NumPy reference and the safetensors writer (no C++ involved)."""
import dataclasses
import json
import struct

import numpy as np
import pytest

import hf_writer
import numpy_llama


def test_bf16_rounds_to_nearest_even():
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, 1 + 2**-7], dtype=np.float32)
    assert numpy_llama.to_bf16_bits(values).tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x3F81]


def test_safetensors_layout(tmp_path):
    path = tmp_path / "t.safetensors"
    tensors = {"a": np.array([[1.0, -2.0, 0.5]], dtype=np.float32), "b": np.array([3.0])}
    hf_writer.write_safetensors(path, tensors, "bf16")
    data = path.read_bytes()
    (header_len,) = struct.unpack_from("<Q", data)
    assert header_len % 8 == 0
    header = json.loads(data[8:8 + header_len])
    assert header["a"] == {"dtype": "BF16", "shape": [1, 3], "data_offsets": [0, 6]}
    assert header["b"] == {"dtype": "BF16", "shape": [1], "data_offsets": [6, 8]}
    assert data[8 + header_len:] == struct.pack("<4H", 0x3F80, 0xC000, 0x3F00, 0x4040)
    read = numpy_llama.read_safetensors(path)
    np.testing.assert_array_equal(read["a"], tensors["a"])
    np.testing.assert_array_equal(read["b"], tensors["b"])


@pytest.mark.parametrize("name", list(hf_writer.TEST_SPECS))
def test_writer_and_reader_agree(name, tmp_path):
    spec = hf_writer.TEST_SPECS[name]
    written = hf_writer.write_model(tmp_path, spec, seed=3)
    read = numpy_llama.read_hf_tensors(tmp_path)
    assert read.keys() == written.keys()
    index = tmp_path / "model.safetensors.index.json"
    assert index.exists() == (spec.shards > 1)
    # bf16 keeps 8 significant bits, f16 11 (and subnormals below 6e-5), f32 all.
    rtol, atol = {"bf16": (2**-8, 0), "f16": (2**-11, 1e-7), "f32": (0, 0)}[spec.dtype]
    for tensor, values in written.items():
        np.testing.assert_allclose(read[tensor], values, rtol=rtol, atol=atol)


def permute_like_llama_cpp(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (rotate-half -> interleaved)."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def test_interleaved_rope_on_permuted_rows_equals_rotate_half(tmp_path):
    hf_writer.write_model(tmp_path, hf_writer.TEST_SPECS["qwen2-bias"], seed=5)
    weights = numpy_llama.load_hf(tmp_path)
    cfg = weights.config
    permuted = dataclasses.replace(
        weights, config=dataclasses.replace(cfg, rope_interleaved=True),
        layers=[dataclasses.replace(
            layer, q=permute_like_llama_cpp(layer.q, cfg.num_heads),
            k=permute_like_llama_cpp(layer.k, cfg.num_kv_heads),
            q_bias=permute_like_llama_cpp(layer.q_bias, cfg.num_heads),
            k_bias=permute_like_llama_cpp(layer.k_bias, cfg.num_kv_heads))
            for layer in weights.layers])
    prompt = [5, 17, 250, 3, 99, 42, 7, 7, 128]
    expected = numpy_llama.Model(weights).forward(prompt)
    np.testing.assert_allclose(numpy_llama.Model(permuted).forward(prompt), expected,
                               rtol=1e-10, atol=1e-10)
    unpermuted_rope = numpy_llama.Model(dataclasses.replace(permuted, config=cfg))
    assert not np.allclose(unpermuted_rope.forward(prompt), expected, rtol=1e-3)


def test_llama3_inverse_frequencies():
    config = numpy_llama.Config(
        hidden_size=64, intermediate_size=1, num_layers=1, num_heads=4, num_kv_heads=4,
        head_dim=16, vocab_size=1, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=hf_writer.LLAMA3_SCALING)
    plain = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    scaled = numpy_llama.rope_inverse_frequencies(config)
    wavelen = 2 * np.pi / plain  # 6.3, 19.9, 62.8, 199, ...; thresholds 64 / 4 = 16 and 64 / 1
    assert scaled[0] == plain[0]
    np.testing.assert_allclose(scaled[3:], plain[3:] / 8)
    for i in (1, 2):
        smooth = (64 / wavelen[i] - 1) / (4 - 1)
        assert scaled[i] == pytest.approx((1 - smooth) * plain[i] / 8 + smooth * plain[i])
        assert plain[i] / 8 < scaled[i] < plain[i]


def test_kv_cache_equals_full_recompute(tmp_path):
    hf_writer.write_model(tmp_path, hf_writer.TEST_SPECS["llama-gqa-untied"], seed=5)
    model = numpy_llama.Model(numpy_llama.load_hf(tmp_path))
    prompt = [11, 22, 33, 44, 55]
    last, tokens = model.greedy(prompt, 6)
    full = model.forward(prompt + tokens)
    np.testing.assert_allclose(full[len(prompt) - 1], last, rtol=1e-12)
    assert np.argmax(full[len(prompt) - 1:-1], axis=-1).tolist() == tokens


def test_sliding_window_hides_old_keys(tmp_path):
    hf_writer.write_model(tmp_path, hf_writer.Spec(arch="mistral", sliding_window=4), seed=5)
    model = numpy_llama.Model(numpy_llama.load_hf(tmp_path))
    assert model.config.sliding_window == 4
    # With 2 layers, the last position sees positions >= 9 - 2 * (4 - 1) = 3 at most.
    a = model.forward([1, 2, 3, 10, 11, 12, 13, 14, 15, 16])[-1]
    b = model.forward([9, 8, 7, 10, 11, 12, 13, 14, 15, 16])[-1]
    np.testing.assert_allclose(a, b, rtol=1e-12)
    c = model.forward([1, 2, 3, 9, 11, 12, 13, 14, 15, 16])[-1]
    assert not np.allclose(a, c)
