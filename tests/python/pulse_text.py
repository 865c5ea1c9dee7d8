"""ctypes access to the text functions of libpulseinfer.so, for the tokenizer and chat-template
comparisons (only the functions whose arguments are plain pointers and integers)."""
from __future__ import annotations

import ctypes
import pathlib

TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
BUFFER_TOO_SMALL = 4


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class TextLibrary:
    def __init__(self, library: pathlib.Path, model_path: pathlib.Path):
        self.lib = ctypes.CDLL(str(library))
        self.lib.pulse_last_error.restype = ctypes.c_char_p
        self.lib.pulse_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p)]
        self.lib.pulse_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.c_uint32, ctypes.POINTER(ctypes.c_int32),
                                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        self.lib.pulse_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                              ctypes.c_size_t, ctypes.c_uint32, ctypes.c_char_p,
                                              ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        self.lib.pulse_chat_apply_template.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ChatMessage), ctypes.c_size_t, ctypes.c_int32,
            ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        self.lib.pulse_model_free.argtypes = [ctypes.c_void_p]
        self.model = ctypes.c_void_p()
        status = self.lib.pulse_model_load(str(model_path).encode(), None,
                                           ctypes.byref(self.model))
        assert status == 0, self.lib.pulse_last_error().decode()

    def close(self):
        self.lib.pulse_model_free(self.model)

    def _check(self, status: int):
        assert status == 0, f"status {status}: {self.lib.pulse_last_error().decode()}"

    def tokenize(self, text: bytes, flags: int = TOKENIZE_PARSE_SPECIAL) -> list[int]:
        count = ctypes.c_size_t()
        status = self.lib.pulse_tokenize(self.model, text, len(text), flags, None, 0,
                                         ctypes.byref(count))
        if status == 0:
            return []
        assert status == BUFFER_TOO_SMALL, self.lib.pulse_last_error().decode()
        ids = (ctypes.c_int32 * count.value)()
        self._check(self.lib.pulse_tokenize(self.model, text, len(text), flags, ids, count.value,
                                            ctypes.byref(count)))
        return list(ids)

    def detokenize(self, ids: list[int], flags: int = 0) -> bytes:
        array = (ctypes.c_int32 * len(ids))(*ids)
        length = ctypes.c_size_t()
        status = self.lib.pulse_detokenize(self.model, array, len(ids), flags, None, 0,
                                           ctypes.byref(length))
        assert status == BUFFER_TOO_SMALL, self.lib.pulse_last_error().decode()
        buffer = ctypes.create_string_buffer(length.value + 1)
        self._check(self.lib.pulse_detokenize(self.model, array, len(ids), flags, buffer,
                                              length.value + 1, ctypes.byref(length)))
        return buffer.raw[:length.value]

    def apply_template(self, messages: list[dict], add_generation_prompt: bool) -> str:
        array = (ChatMessage * len(messages))(
            *[ChatMessage(m["role"].encode(), m["content"].encode()) for m in messages])
        length = ctypes.c_size_t()
        status = self.lib.pulse_chat_apply_template(self.model, array, len(messages),
                                                    int(add_generation_prompt), None, 0,
                                                    ctypes.byref(length))
        assert status == BUFFER_TOO_SMALL, self.lib.pulse_last_error().decode()
        buffer = ctypes.create_string_buffer(length.value + 1)
        self._check(self.lib.pulse_chat_apply_template(
            self.model, array, len(messages), int(add_generation_prompt), buffer,
            length.value + 1, ctypes.byref(length)))
        return buffer.raw[:length.value].decode()
