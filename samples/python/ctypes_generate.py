#!/usr/bin/env python3
"""Generates after a prompt through the raw C ABI, from ctypes alone (no pulseinfer package):
default model and engine parameters, the prompt as plain text, greedy, the text (or with --ids
the token ids) streamed to stdout by the token callback.

ctypes reads no header, so the constants and the two struct layouts below are copied from
pulseinfer.h (ABI version 0). The library is $PULSE_BUILD_DIR/lib/libpulseinfer.so.0, by default
the repository's build/."""
import argparse
import ctypes
import os
import pathlib
import sys

ABI_VERSION = 0
PULSE_OK = 0
PULSE_TOKENIZE_DEFAULT = 3


class SamplingParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("temperature", ctypes.c_float),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("max_tokens", ctypes.c_int32),
        ("ignore_eos", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("stop_token_ids", ctypes.POINTER(ctypes.c_int32)),
        ("stop_token_count", ctypes.c_size_t),
        ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
        ("stop_string_count", ctypes.c_size_t),
    ]


class TokenEvent(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("token", ctypes.c_int32),
        ("request_id", ctypes.c_uint64),
        ("index", ctypes.c_int32),
        ("finished", ctypes.c_int32),
        ("finish_reason", ctypes.c_int32),
        ("text", ctypes.c_void_p),  # not c_char_p: the text may hold NULs, and has a length
        ("text_len", ctypes.c_size_t),
    ]


TokenCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(TokenEvent))


class PulseError(Exception):
    pass


def load_library() -> ctypes.CDLL:
    repo = pathlib.Path(__file__).resolve().parents[2]
    build_dir = pathlib.Path(os.environ.get("PULSE_BUILD_DIR", repo / "build"))
    lib = ctypes.CDLL(str(build_dir / "lib" / "libpulseinfer.so.0"))
    lib.pulse_abi_version.restype = ctypes.c_int32
    lib.pulse_last_error.restype = ctypes.c_char_p
    lib.pulse_status_string.restype = ctypes.c_char_p
    lib.pulse_status_string.argtypes = [ctypes.c_int32]

    def check(status: int, function, arguments) -> int:
        # errcheck runs right after the call, on its thread: pulse_last_error is thread-local.
        if status != PULSE_OK:
            raise PulseError(f"{lib.pulse_status_string(status).decode()}: "
                             f"{lib.pulse_last_error().decode(errors='replace')}")
        return status

    signatures = {
        "pulse_model_load": [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)],
        "pulse_engine_create": [ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.POINTER(ctypes.c_void_p)],
        "pulse_sampling_params_init": [ctypes.POINTER(SamplingParams), ctypes.c_size_t],
        "pulse_request_submit_text": [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.c_uint32, ctypes.POINTER(SamplingParams),
                                      TokenCallback, ctypes.c_void_p,
                                      ctypes.POINTER(ctypes.c_uint64)],
        "pulse_engine_run": [ctypes.c_void_p],
        "pulse_request_result": [ctypes.c_void_p, ctypes.c_uint64,
                                 ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_size_t)],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int32
        function.errcheck = check
    lib.pulse_model_free.argtypes = [ctypes.c_void_p]
    lib.pulse_model_free.restype = None
    lib.pulse_engine_free.argtypes = [ctypes.c_void_p]
    lib.pulse_engine_free.restype = None
    return lib


def generate(lib: ctypes.CDLL, model_path: str, prompt: str, max_tokens: int,
             print_ids: bool) -> None:
    def on_token(user_data, event_pointer) -> int:
        event = event_pointer.contents
        if print_ids:
            print("," if event.index > 0 else "", event.token, sep="", end="", flush=True)
        else:
            sys.stdout.buffer.write(ctypes.string_at(event.text, event.text_len))
            sys.stdout.flush()
        return 0  # nonzero would cancel the request

    callback = TokenCallback(on_token)  # kept alive until the engine is freed
    model = ctypes.c_void_p()
    lib.pulse_model_load(model_path.encode(), None, ctypes.byref(model))
    engine = ctypes.c_void_p()
    try:
        lib.pulse_engine_create(model, None, ctypes.byref(engine))
    finally:
        lib.pulse_model_free(model)  # the engine holds its own reference
    try:
        sampling = SamplingParams()
        lib.pulse_sampling_params_init(ctypes.byref(sampling), ctypes.sizeof(sampling))
        sampling.temperature = 0
        sampling.max_tokens = max_tokens
        text = prompt.encode()
        request = ctypes.c_uint64()
        lib.pulse_request_submit_text(engine, text, len(text), PULSE_TOKENIZE_DEFAULT,
                                      ctypes.byref(sampling), callback, None,
                                      ctypes.byref(request))
        lib.pulse_engine_run(engine)  # the callback runs here, on this thread
        count = ctypes.c_size_t()
        lib.pulse_request_result(engine, request, None, 0, ctypes.byref(count))  # its failure
        print()
    finally:
        lib.pulse_engine_free(engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a GGUF file or Hugging Face directory")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--ids", action="store_true",
                        help="print the generated token ids, comma-separated, instead of the text")
    args = parser.parse_args()
    try:
        lib = load_library()
        if lib.pulse_abi_version() != ABI_VERSION:
            raise PulseError(f"the library has ABI version {lib.pulse_abi_version()}, not "
                             f"{ABI_VERSION}")
        generate(lib, args.model, args.prompt, args.max_tokens, args.ids)
    except (OSError, PulseError) as error:
        print(f"ctypes_generate.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
