"""Fixtures: SmolLM2 loaded once per session, a small engine per test, and a tiny random-weight
model for what needs no text. The pulseinfer package is the installed one (PYTHONPATH)."""
from __future__ import annotations

import json
import os
import pathlib

import pytest

import pulseinfer

REPO = pathlib.Path(__file__).resolve().parents[3]
# The architecture of tests/unit/capi/tiny_model.cc.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 300,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("PULSE_BUILD_DIR", REPO / "build")).resolve()


@pytest.fixture(scope="session")
def smollm2_path() -> pathlib.Path:
    path = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup")
    return path


@pytest.fixture(scope="session")
def model(smollm2_path: pathlib.Path):
    """SmolLM2 on the CPU backend, whose greedy continuations the tests expect."""
    with pulseinfer.Model(smollm2_path, pulseinfer.ModelParams(backend="cpu")) as model:
        yield model


@pytest.fixture
def engine(model: pulseinfer.Model):
    with pulseinfer.Engine(model, pulseinfer.EngineParams(max_context=512)) as engine:
        yield engine


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return path


@pytest.fixture
def tiny_model(tiny_config: pathlib.Path):
    params = pulseinfer.ModelParams(random_weights=True, random_seed=7, threads=1)
    with pulseinfer.Model(tiny_config, params) as model:
        yield model
