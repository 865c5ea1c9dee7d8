"""pulse-dump-logits on Hugging Face safetensors directories vs the NumPy reference.

The models are small, seeded and random, written by hf_writer. Their weights are stored in
bf16/f16/f32, all exact in fp32, so the C++ fp32 forward pass and the float64 reference see the
same weights and differ only by fp32 rounding of the arithmetic: rel. error < 1e-4.
"""
import json

import numpy as np
import pytest

import hf_writer
import numpy_llama
from ref_dump_logits import dump_logits, expect_failure, relative_error

GREEDY = 16
PROMPT = [int(t) for t in np.random.default_rng(7).integers(3, 300, size=29)]


def reference(model_dir):
    return numpy_llama.Model(numpy_llama.load_hf(model_dir)).greedy(PROMPT, GREEDY)


@pytest.mark.parametrize("name", list(hf_writer.TEST_SPECS))
def test_matches_reference(name, tool, tmp_path):
    hf_writer.write_model(tmp_path / "model", hf_writer.TEST_SPECS[name], seed=11)
    expected_logits, expected_tokens = reference(tmp_path / "model")
    result = dump_logits(tool("pulse-dump-logits"), tmp_path / "model", PROMPT, tmp_path,
                         weight_type="f32", greedy=GREEDY)
    error = relative_error(result.logits, expected_logits)
    print(f"{name}: rel error {error:.2e}, {result.seconds:.2f}s")
    assert error < 1e-4
    assert result.greedy == expected_tokens


def test_chunked_prefill_matches_reference(tool, tmp_path):
    hf_writer.write_model(tmp_path / "model", hf_writer.TEST_SPECS["llama-gqa-untied"], seed=11)
    expected_logits, expected_tokens = reference(tmp_path / "model")
    result = dump_logits(tool("pulse-dump-logits"), tmp_path / "model", PROMPT, tmp_path,
                         weight_type="f32", greedy=GREEDY, chunk=8)
    assert relative_error(result.logits, expected_logits) < 1e-4
    assert result.greedy == expected_tokens


# ---------------------------------------------------------------------------------------------
# Broken models: a clean error exit whose message names the problem.

SHARD_1, SHARD_2 = hf_writer.shard_names(2)
K_PROJ = "model.layers.0.self_attn.k_proj.weight"  # [kv_heads * head_dim, hidden] = [32, 64]


@pytest.fixture
def model_dir(tmp_path):
    directory = tmp_path / "model"
    hf_writer.write_model(directory, hf_writer.TEST_SPECS["llama-gqa-untied"], seed=11)
    return directory


def shard_of(model_dir, tensor: str) -> str:
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())
    return index["weight_map"][tensor]


def test_missing_shard(tool, model_dir):
    (model_dir / SHARD_2).unlink()
    assert SHARD_2 in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_truncated_shard(tool, model_dir):
    path = model_dir / SHARD_2
    path.write_bytes(path.read_bytes()[:-100])
    assert SHARD_2 in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_tensor_with_wrong_shape(tool, model_dir):
    # Same element count (so the header stays self-consistent), wrong for the config.
    def transpose_k_proj(header):
        header[K_PROJ]["shape"] = header[K_PROJ]["shape"][::-1]

    hf_writer.edit_header(model_dir / shard_of(model_dir, K_PROJ), transpose_k_proj)
    assert K_PROJ in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_shape_disagreeing_with_data_offsets(tool, model_dir):
    def widen_k_proj(header):
        header[K_PROJ]["shape"] = [32, 65]

    hf_writer.edit_header(model_dir / shard_of(model_dir, K_PROJ), widen_k_proj)
    assert K_PROJ in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_missing_tensor(tool, model_dir):
    hf_writer.edit_header(model_dir / shard_of(model_dir, K_PROJ),
                          lambda header: header.pop(K_PROJ))
    assert K_PROJ in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_absurd_header_length(tool, model_dir):
    path = model_dir / SHARD_1
    data = path.read_bytes()
    path.write_bytes((1 << 60).to_bytes(8, "little") + data[8:])
    assert SHARD_1 in expect_failure(tool("pulse-dump-logits"), model_dir, PROMPT)


def test_context_beyond_the_sliding_window_is_refused(tool, tmp_path):
    # Our attention is full causal, exact only while the context fits in Mistral's window.
    hf_writer.write_model(tmp_path, hf_writer.Spec(arch="mistral", sliding_window=8), seed=11)
    expect_failure(tool("pulse-dump-logits"), tmp_path, PROMPT)
