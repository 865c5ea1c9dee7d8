"""kquants.py's Q4_K and Q6_K blocks, decoded by the `gguf` package, give back the values they
quantized within one quantization step: half a step of rounding, and up to another half from
rounding each sub-block's scale to 6 (Q4_K) or 8 (Q6_K) bits of the super-block's."""
import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import kquants

# A step of each type, as a share of a block's largest magnitude: Q4_K spans a 32-value block's
# range (up to twice the magnitude) in 15 steps, Q6_K a 16-value block's magnitude in 31.
STEPS = {Q.Q4_K: (kquants.quantize_q4_k, 32, 2 / 15), Q.Q6_K: (kquants.quantize_q6_k, 16, 1 / 31)}


@pytest.mark.parametrize("qtype", list(STEPS), ids=lambda t: t.name)
def test_blocks_decode_within_a_step(qtype):
    quantize, block, step = STEPS[qtype]
    rng = np.random.default_rng(int(qtype))
    values = (rng.standard_normal((9, 768)) * rng.uniform(1e-3, 10, (9, 1))).astype(np.float32)
    values[0, :256] = 0  # an all-zero super-block
    values[1, 256:512] = np.abs(values[1, 256:512])  # all positive: Q4_K's minimum is 0
    raw = quantize(values)
    assert raw.shape == (9, 3 * gguf.GGML_QUANT_SIZES[qtype][1])
    decoded = gguf.quants.dequantize(raw, qtype)
    error = np.abs(decoded - values).reshape(-1, block).max(axis=1)
    magnitude = np.abs(values).reshape(-1, block).max(axis=1)
    assert (error <= step * magnitude * (1 + 1e-3)).all()
    assert (decoded[0, :256] == 0).all()
