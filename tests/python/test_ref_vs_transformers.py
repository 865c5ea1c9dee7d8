"""The NumPy reference vs Hugging Face transformers on hf_writer's models (where torch and
transformers are installed, e.g. the GPU machine; skipped elsewhere).

This checks the reference itself, the writer's files and the config semantics (rope scaling,
biases, tied embeddings) against the library that defines them. transformers computes the rotary
angles in fp32 even in a float64 model, which bounds the agreement: measured 1.1e-7 to 1.3e-7
(transformers 5.17, torch 2.11, CPU), asserted < 1e-6.
"""
import numpy as np
import pytest

import hf_writer
import numpy_llama
from ref_dump_logits import relative_error

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = [int(t) for t in np.random.default_rng(7).integers(3, 300, size=29)]


@pytest.mark.parametrize("name", list(hf_writer.TEST_SPECS))
def test_reference_matches_transformers(name, tmp_path):
    hf_writer.write_model(tmp_path, hf_writer.TEST_SPECS[name], seed=11)
    expected = numpy_llama.Model(numpy_llama.load_hf(tmp_path)).forward(PROMPT)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0].numpy()
    error = relative_error(expected, logits)
    print(f"{name}: rel error {error:.2e}")
    assert error < 1e-6
    assert (np.argmax(expected, axis=-1) == np.argmax(logits, axis=-1)).all()
