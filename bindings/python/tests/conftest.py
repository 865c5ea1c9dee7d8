"""Fixtures: SmolLM2 loaded once per session, a small engine per test, and a tiny random-weight
model for what needs no text. The pulseinfer package is the installed one (PYTHONPATH)."""
from __future__ import annotations

import os
import pathlib

import pytest

import pulseinfer

REPO = pathlib.Path(__file__).resolve().parents[3]
# A two-layer Llama with random weights and no tokenizer, shared with the C, Rust and Go tests.
TINY_CONFIG = REPO / "tests" / "data" / "tiny-llama.json"


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
def tiny_config() -> pathlib.Path:
    return TINY_CONFIG


@pytest.fixture
def tiny_model(tiny_config: pathlib.Path):
    params = pulseinfer.ModelParams(random_weights=True, random_seed=7, threads=1)
    with pulseinfer.Model(tiny_config, params) as model:
        yield model
