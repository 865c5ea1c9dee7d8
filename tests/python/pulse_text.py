"""ctypes access to pulse_chat_apply_template of libpulseinfer.so, for the chat-template
comparison against jinja2."""
from __future__ import annotations

import ctypes
import pathlib

BUFFER_TOO_SMALL = 4


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class TextLibrary:
    def __init__(self, library: pathlib.Path, model_path: pathlib.Path):
        self.lib = ctypes.CDLL(str(library))
        self.lib.pulse_last_error.restype = ctypes.c_char_p
        self.lib.pulse_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p)]
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
