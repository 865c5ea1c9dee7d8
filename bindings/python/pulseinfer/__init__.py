"""libpulseinfer for Python: LLM inference with a CPU-resident, sparsely recalled KV cache.

    with Model(path) as model, Engine(model) as engine:
        for token in engine.generate("Once upon a time", SamplingParams(max_tokens=16)):
            print(token.text, end="")

pulseinfer.capi is the C ABI itself, as SWIG generates it from pulseinfer.h.
"""
from . import capi
from ._engine import Engine, EngineStats, StepReport
from ._enums import (Admission, CopyExecutor, DetokenizeFlags, Eviction, Feature, FinishReason,
                     HostCodec, OffloadMode, RequestState, SummaryPrecision, TokenizeFlags)
from ._errors import (
    BufferTooSmallError,
    CancelledError,
    FailedPreconditionError,
    InputOutputError,
    InternalError,
    InvalidArgumentError,
    InvalidModelError,
    NoCapacityError,
    NotFinishedError,
    NotFoundError,
    OutOfMemoryError,
    PulseError,
    UnsupportedError,
)
from ._generation import Generation, RequestStats, Token
from ._model import Model, ModelInfo
from ._params import EngineParams, ModelParams, SamplingParams

if capi.pulse_abi_version() != capi.PULSE_ABI_VERSION:
    raise ImportError(f"libpulseinfer has ABI version {capi.pulse_abi_version()}; this package "
                      f"was built for {capi.PULSE_ABI_VERSION}")

def version() -> str:
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return capi.pulse_version()


def abi_version() -> int:
    """The library's ABI version (the SONAME's number)."""
    return capi.pulse_abi_version()


def features() -> Feature:
    """What this build of the library can do."""
    return Feature(capi.pulse_features())


__all__ = [
    "Admission", "BufferTooSmallError", "CancelledError", "CopyExecutor", "DetokenizeFlags", "Engine",
    "EngineParams", "EngineStats", "Eviction", "FailedPreconditionError", "Feature",
    "FinishReason", "Generation", "HostCodec", "InputOutputError", "InternalError", "InvalidArgumentError",
    "InvalidModelError", "Model", "ModelInfo", "ModelParams", "NoCapacityError",
    "NotFinishedError", "NotFoundError", "OffloadMode", "OutOfMemoryError", "PulseError",
    "RequestState", "RequestStats", "SamplingParams", "StepReport", "SummaryPrecision", "Token",
    "TokenizeFlags", "UnsupportedError", "abi_version", "capi", "features", "version",
]
