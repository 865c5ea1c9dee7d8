"""The safety net behind close(): a Model or an Engine dropped without closing frees its handle
when it is collected, once, and one closed first is not freed again."""
from __future__ import annotations

import gc
import weakref

import pytest

import pulseinfer
from pulseinfer import capi


@pytest.fixture
def freed(monkeypatch) -> list[str]:
    """The names of the free functions called, in order (each still frees)."""
    calls: list[str] = []
    for name in ("pulse_model_free", "pulse_engine_free"):
        def spy(pointer, _free=getattr(capi, name), _name=name):
            calls.append(_name)
            _free(pointer)
        monkeypatch.setattr(capi, name, spy)
    return calls


def tiny(tiny_config) -> pulseinfer.Model:
    return pulseinfer.Model(tiny_config, pulseinfer.ModelParams(random_weights=True,
                                                                 random_seed=7, threads=1))


def test_dropped_model_and_engine_are_freed_when_collected(freed, tiny_config):
    model = tiny(tiny_config)
    engine = pulseinfer.Engine(model, pulseinfer.EngineParams(max_context=64))
    assert len(engine.generate([5, 6, 7], pulseinfer.SamplingParams(max_tokens=2)).token_ids()) == 2
    collected = [weakref.ref(model), weakref.ref(engine)]
    del model, engine
    gc.collect()
    assert [ref() for ref in collected] == [None, None]
    assert sorted(freed) == ["pulse_engine_free", "pulse_model_free"]


def test_closed_handles_are_not_freed_again_when_collected(freed, tiny_config):
    model = tiny(tiny_config)
    engine = pulseinfer.Engine(model, pulseinfer.EngineParams(max_context=64))
    engine.close()
    model.close()
    assert freed == ["pulse_engine_free", "pulse_model_free"]
    del model, engine
    gc.collect()
    assert freed == ["pulse_engine_free", "pulse_model_free"]
