"""The library's identity, and the package against the header: every status, reason and struct
field has its Python counterpart, and structs cannot be misused."""
import dataclasses
import re

import pytest

import pulseinfer
from pulseinfer import capi
from pulseinfer._errors import error_for


def test_version_abi_and_features():
    assert re.fullmatch(r"\d+\.\d+\.\d+", pulseinfer.version())
    assert pulseinfer.abi_version() == capi.PULSE_ABI_VERSION
    assert pulseinfer.Feature.CPU in pulseinfer.features()


def test_every_status_has_its_exception():
    statuses = [code for code in range(-64, 64)
                if code != capi.PULSE_OK and capi.pulse_status_string(code) != "unknown status"]
    assert len(statuses) >= 12
    for status in statuses:
        error = error_for(status, "the message")
        assert type(error) is not pulseinfer.PulseError
        assert isinstance(error, pulseinfer.PulseError)
        assert (error.status, error.message, str(error)) == (status, "the message", "the message")
    assert type(error_for(99, "later")) is pulseinfer.PulseError
    assert error_for(99, "later").status == 99


@pytest.mark.parametrize("enum, prefix", [(pulseinfer.FinishReason, "PULSE_FINISH_"),
                                          (pulseinfer.RequestState, "PULSE_REQUEST_")])
def test_every_constant_has_its_enum_member(enum, prefix):
    constants = {name[len(prefix):]: value for name, value in vars(capi).items()
                 if name.startswith(prefix)}
    assert {member.name: member.value for member in enum} == constants


def test_every_macro_of_the_header_is_a_constant(repo_root):
    # Flags written as casts SWIG cannot evaluate are declared again in capi.i; a flag added to
    # the header but not there would be missing from the module.
    header = (repo_root / "capi" / "include" / "pulseinfer" / "pulseinfer.h").read_text()
    macros = set(re.findall(r"^#define (PULSE_\w+)\s", header, re.MULTILINE)) - {"PULSE_API"}
    assert len(macros) >= 8
    assert {name for name in macros if not hasattr(capi, name)} == set()


def test_finish_reasons_print_as_the_library_names_them():
    assert str(pulseinfer.FinishReason.STOP_STRING) == "stop_string"


def struct_fields(struct_type) -> set:
    return {name for name, value in vars(struct_type).items()
            if isinstance(value, property) and name not in ("thisown", "struct_size")}


@pytest.mark.parametrize("dataclass, struct_type", [
    (pulseinfer.ModelParams, capi.pulse_model_params),
    (pulseinfer.EngineParams, capi.pulse_engine_params),
    (pulseinfer.ModelInfo, capi.pulse_model_info),
    (pulseinfer.StepReport, capi.pulse_step_report),
    (pulseinfer.EngineStats, capi.pulse_engine_stats),
    (pulseinfer.RequestStats, capi.pulse_request_stats),
])
def test_dataclasses_have_the_struct_fields(dataclass, struct_type):
    assert {field.name for field in dataclasses.fields(dataclass)} == struct_fields(struct_type)


def test_sampling_params_have_the_struct_fields_and_stop_lists():
    fields = {field.name for field in dataclasses.fields(pulseinfer.SamplingParams)}
    counts = {"stop_token_count", "stop_string_count"}
    assert fields == struct_fields(capi.pulse_sampling_params) - counts | {"stop_token_ids",
                                                                         "stop_strings"}


def test_parameter_defaults_are_the_library_s():
    struct = capi.pulse_sampling_params()
    params = pulseinfer.SamplingParams()
    assert (params.temperature, params.max_tokens) == (struct.temperature, struct.max_tokens)
    assert pulseinfer.ModelParams().backend == capi.pulse_model_params().backend == "auto"


def test_structs_cannot_be_misused():
    params = capi.pulse_sampling_params()
    assert params.struct_size > 0
    with pytest.raises(AttributeError):
        params.struct_size = 4096
    assert not hasattr(capi, "pulse_sampling_params_init")  # it would take any struct_size
    with pytest.raises(TypeError):
        capi.pulse_model_load("model.gguf", capi.pulse_engine_params())
    with pytest.raises(TypeError):
        params.set_stop_strings("one str")  # would be a stop string per character


def test_parameter_structs_own_their_strings_and_lists():
    params = capi.pulse_model_params()
    backend = "".join(["c", "p", "u"])
    params.backend = backend
    del backend
    assert params.backend == "cpu"
    sampling = capi.pulse_sampling_params()
    sampling.set_stop_strings(["a", "bc"])
    sampling.set_stop_token_ids([5, 6, 7])
    assert (sampling.stop_string_count, sampling.stop_token_count) == (2, 3)
    with pytest.raises(ValueError, match="NUL"):
        sampling.set_stop_strings(["a\0b"])
    with pytest.raises(OverflowError):
        sampling.set_stop_token_ids([2**31])
