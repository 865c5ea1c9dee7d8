"""pulse-dump-tensor's dequantization against the `gguf` package's reference dequantize.

Each ggml type gets a GGUF file (written by gguf.GGUFWriter) holding a few thousand random
blocks with finite, sane fp16 scales; our fp32 output must equal gguf.quants.dequantize bit for
bit. The same holds on the real SmolLM2 file's tensors.
"""
from __future__ import annotations

import subprocess

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

ROWS = 48
BLOCKS_PER_ROW = 64

# Byte offsets of the fp16 scale fields inside one block of each quantized type.
SCALE_OFFSETS = {
    Q.Q8_0: [0],
    Q.Q4_0: [0],
    Q.Q4_1: [0, 2],
    Q.Q4_K: [0, 2],
    Q.Q6_K: [208],
}


def dump(tool, path, name, out_path) -> tuple[list[int], str, np.ndarray]:
    result = subprocess.run([str(tool("pulse-dump-tensor")), str(path), name, str(out_path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    shape_text, stored_type = result.stdout.split()
    return [int(d) for d in shape_text.split(",")], stored_type, np.fromfile(out_path, "<f4")


def random_halves(rng: np.random.Generator, count: int) -> np.ndarray:
    """Finite fp16 values of either sign between 2^-14 and 1: sane block scales."""
    magnitudes = np.exp2(rng.uniform(-14, 0, count)).astype(np.float16)
    return np.where(rng.random(count) < 0.5, -magnitudes, magnitudes).astype(np.float16)


def random_blocks(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """[ROWS, bytes per row] of random blocks whose fp16 fields are sane scales."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (ROWS * BLOCKS_PER_ROW, type_size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype]:
        halves = random_halves(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
        blocks[:, offset:offset + 2] = halves
    return blocks.reshape(ROWS, BLOCKS_PER_ROW * type_size)


def random_raw(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """The stored bytes of a [ROWS, cols] tensor of `qtype`, as uint8 [ROWS, bytes per row]."""
    cols = BLOCKS_PER_ROW * 32
    if qtype == Q.F32:
        bits = rng.integers(0, 2**32, (ROWS, cols), dtype=np.uint64).astype(np.uint32)
        bits[(bits & 0x7F800000) == 0x7F800000] &= 0xBFFFFFFF  # no inf or NaN
        return bits.view(np.uint8).reshape(ROWS, -1)
    if qtype in (Q.F16, Q.BF16):
        bits = rng.integers(0, 2**16, (ROWS, cols), dtype=np.uint32).astype(np.uint16)
        exponent = 0x7C00 if qtype == Q.F16 else 0x7F80
        bits[(bits & exponent) == exponent] &= ~np.uint16(0x4000)
        return bits.view(np.uint8).reshape(ROWS, -1)
    return random_blocks(qtype, rng)


def write_gguf(path, tensors: dict[str, tuple[Q, np.ndarray]]) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (qtype, raw) in tensors.items():
        if qtype == Q.F32:
            writer.add_tensor(name, raw.view(np.float32))
        elif qtype == Q.F16:
            writer.add_tensor(name, raw.view(np.float16))
        else:
            writer.add_tensor(name, raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K]


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_matches_gguf_dequantize(tool, tmp_path, qtype):
    rng = np.random.default_rng(int(qtype) + 1)
    raw = random_raw(qtype, rng)
    path = tmp_path / f"{qtype.name}.gguf"
    write_gguf(path, {"t": (qtype, raw)})
    shape, stored_type, ours = dump(tool, path, "t", tmp_path / "t.f32")
    expected = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    assert stored_type == qtype.name
    assert shape == list(expected.shape)
    assert np.isfinite(expected).all()
    # Bit for bit: the same float, the same sign of zero.
    np.testing.assert_array_equal(ours.view(np.uint32), expected.reshape(-1).view(np.uint32))


def test_several_tensors_in_one_file(tool, tmp_path):
    rng = np.random.default_rng(7)
    tensors = {f"t{i}": (qtype, random_raw(qtype, rng)) for i, qtype in enumerate(TYPES)}
    path = tmp_path / "mixed.gguf"
    write_gguf(path, tensors)
    for name, (qtype, raw) in tensors.items():
        _, _, ours = dump(tool, path, name, tmp_path / f"{name}.f32")
        expected = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        np.testing.assert_array_equal(ours.view(np.uint32), expected.view(np.uint32))


def test_unsupported_type_is_named(tool, tmp_path):
    rng = np.random.default_rng(3)
    block_size, type_size = gguf.GGML_QUANT_SIZES[Q.Q5_K]
    raw = rng.integers(0, 256, (2, 4 * type_size), dtype=np.uint8)
    path = tmp_path / "q5k.gguf"
    write_gguf(path, {"t": (Q.Q5_K, raw)})
    result = subprocess.run([str(tool("pulse-dump-tensor")), str(path), "t",
                             str(tmp_path / "t.f32")], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "Q5_K" in result.stderr and "not implemented" in result.stderr


SMOLLM2_TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                   "blk.7.ffn_down.weight", "blk.29.ffn_gate.weight", "output_norm.weight"]


def test_smollm2_tensors_match_gguf(tool, tmp_path, smollm2_path):
    reader = gguf.GGUFReader(str(smollm2_path))
    by_name = {t.name: t for t in reader.tensors}
    for name in SMOLLM2_TENSORS:
        tensor = by_name[name]
        shape, stored_type, ours = dump(tool, smollm2_path, name, tmp_path / "t.f32")
        assert stored_type == tensor.tensor_type.name
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        assert shape == list(expected.shape), name
        np.testing.assert_array_equal(ours.view(np.uint32), expected.reshape(-1).view(np.uint32),
                                      err_msg=name)
    assert by_name["token_embd.weight"].tensor_type == Q.Q8_0
    assert by_name["blk.7.ffn_down.weight"].tensor_type == Q.Q4_1
