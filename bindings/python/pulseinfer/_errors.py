"""One exception class per pulse_status. pulseinfer.capi raises them (see capi.i's
pulse_py_set_error), with the message of pulse_last_error() read right after the failing call."""
from __future__ import annotations

from . import capi


class PulseError(Exception):
    """A status of libpulseinfer other than PULSE_OK: `status` is its code, `message` what
    pulse_last_error() said about it."""

    status: int

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class NoCapacityError(PulseError):
    """PULSE_NO_CAPACITY: the engine cannot take this work now."""

    status = capi.PULSE_NO_CAPACITY


class CancelledError(PulseError):
    """PULSE_CANCELLED: the request was cancelled."""

    status = capi.PULSE_CANCELLED


class NotFinishedError(PulseError):
    """PULSE_AGAIN: the request is not finished yet."""

    status = capi.PULSE_AGAIN


class BufferTooSmallError(PulseError):
    """PULSE_BUFFER_TOO_SMALL: an output buffer is too small."""

    status = capi.PULSE_BUFFER_TOO_SMALL


class InvalidArgumentError(PulseError):
    """PULSE_INVALID_ARGUMENT: an out-of-range or inconsistent argument."""

    status = capi.PULSE_INVALID_ARGUMENT


class NotFoundError(PulseError):
    """PULSE_NOT_FOUND: no such file, request id, or tensor."""

    status = capi.PULSE_NOT_FOUND


class InputOutputError(PulseError):
    """PULSE_IO: a file exists but cannot be read."""

    status = capi.PULSE_IO


class InvalidModelError(PulseError):
    """PULSE_INVALID_MODEL: not a model this library can read, or a corrupt one."""

    status = capi.PULSE_INVALID_MODEL


class UnsupportedError(PulseError):
    """PULSE_UNSUPPORTED: valid, but not supported by this build or backend."""

    status = capi.PULSE_UNSUPPORTED


class OutOfMemoryError(PulseError):
    """PULSE_OUT_OF_MEMORY: memory or KV capacity that can never be enough."""

    status = capi.PULSE_OUT_OF_MEMORY


class FailedPreconditionError(PulseError):
    """PULSE_FAILED_PRECONDITION: the object is in the wrong state for the call."""

    status = capi.PULSE_FAILED_PRECONDITION


class InternalError(PulseError):
    """PULSE_INTERNAL: a bug in the library; the message says where."""

    status = capi.PULSE_INTERNAL


_BY_STATUS: dict[int, type[PulseError]] = {
    error.status: error for error in PulseError.__subclasses__()
}


def error_for(status: int, message: str) -> PulseError:
    """The exception of `status` (a PulseError carrying the code when the status is unknown)."""
    error = _BY_STATUS.get(status)
    return error(message) if error is not None else PulseError(message, status)
