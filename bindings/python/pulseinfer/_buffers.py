"""Reading the ABI's output buffers: a size query, then a buffer of that size (asked again if
the result grew in between)."""
from __future__ import annotations

from array import array
from typing import Any, Callable

from . import capi

# Calls the C function with an output buffer (None for the size query); returns its status and
# the size of the result, as pulseinfer.capi does.
Writer = Callable[[Any], list[int]]


def read_text(write: Writer) -> bytes:
    status, length = write(None)
    buffer = bytearray()
    while status == capi.PULSE_BUFFER_TOO_SMALL:
        buffer = bytearray(length + 1)  # and the NUL
        status, length = write(buffer)
    return bytes(buffer[:length])


def read_tokens(write: Writer) -> list[int]:
    status, count = write(None)
    buffer = array("i")
    while status == capi.PULSE_BUFFER_TOO_SMALL:
        buffer = array("i", bytes(count * buffer.itemsize))
        status, count = write(buffer)
    return buffer[:count].tolist()


def decode(text: bytes) -> str:
    """Text of the library as str. The library passes any bytes through (a model may generate
    invalid UTF-8); those become U+FFFD."""
    return text.decode("utf-8", errors="replace")
