"""A generation request, read as an iterator of its tokens.

Streaming polls: each next() reads what the request generated since the last poll
(pulse_request_poll, and pulse_request_text for the text) and, while there is nothing, steps the
engine on the calling thread. No callback runs Python code from the library."""
from __future__ import annotations

import dataclasses
import weakref
from array import array
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from . import capi
from ._buffers import decode, read_text
from ._enums import FinishReason, RequestState
from ._errors import PulseError
from ._handle import Handle
from ._structs import from_struct

if TYPE_CHECKING:
    from ._engine import Engine


class Token(NamedTuple):
    """A generated token: its id, and the text it adds to the generation's text."""

    id: int
    text: str


@dataclasses.dataclass(frozen=True)
class RequestStats:
    """pulse_request_stats. error is the request's failure status (PULSE_OK unless it failed);
    times are in milliseconds."""

    state: RequestState
    finish_reason: FinishReason
    prompt_tokens: int
    generated_tokens: int
    error: int
    queue_ms: float
    ttft_ms: float
    tpot_ms: float
    total_ms: float


class Generation:
    """A request submitted by Engine.generate, and the iterator of its tokens.

    Iterating steps the engine until the request has new tokens; it ends when the request
    finishes (see finish_reason) and raises the request's PulseError if it failed. The texts of
    the tokens add up to text(). When other threads step the same engine, one poll may bring
    several tokens: their text comes with the last of them.

    close() (or leaving a `with` block, or dropping the last reference, as when a `for` loop
    over engine.generate(...) is left by break) cancels the request if it is running and
    releases it. One thread iterates a generation; cancel() may come from any thread.
    """

    def __init__(self, engine: Engine, request_id: int) -> None:
        self.id = request_id
        self._engine = engine
        self._ids: list[int] = []
        self._text = b""
        self._ready: deque[Token] = deque()
        self._finish_reason: FinishReason | None = None
        self._failure: PulseError | None = None
        self._finalizer = weakref.finalize(self, _release, engine._handle, request_id)

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> Token:
        while not self._ready and self._finish_reason is None and self._finalizer.alive:
            if not self._poll():
                self._engine.step()
        if self._ready:
            return self._ready.popleft()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        raise StopIteration

    def text(self) -> str:
        """The whole text, once the generation has finished (its remaining tokens are read)."""
        for _ in self:
            pass
        return decode(self._text)

    def token_ids(self) -> list[int]:
        """Every generated token id, once the generation has finished."""
        for _ in self:
            pass
        return list(self._ids)

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the request finished, once the iterator has ended (None if close() ended it)."""
        return self._finish_reason

    def cancel(self) -> None:
        """Cancels the request: the iterator ends after the tokens generated so far."""
        if self._finalizer.alive:
            with self._engine._handle.use() as engine:
                capi.pulse_request_cancel(engine, self.id)

    def stats(self) -> RequestStats:
        """The request's figures; NotFoundError after close()."""
        with self._engine._handle.use() as engine:
            stats = _read_stats(engine, self.id)
        return from_struct(RequestStats, stats, state=RequestState(stats.state),
                           finish_reason=FinishReason(stats.finish_reason))

    def close(self) -> None:
        """Cancels the request if it still runs, and releases it."""
        self._finalizer()

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _poll(self) -> bool:
        """Reads the tokens generated since the last poll; False when there is nothing new."""
        with self._engine._handle.use() as engine:
            _, count, state = capi.pulse_request_poll(engine, self.id, None)  # reads nothing
            ids = array("i", [0]) * count
            if count > 0:
                _, count, state = capi.pulse_request_poll(engine, self.id, ids)
            finished = state == capi.PULSE_REQUEST_FINISHED
            if count == 0 and not finished:
                return False
            if self._engine._has_tokenizer:
                text = read_text(partial(capi.pulse_request_text, engine, self.id))
            else:
                text = b""
            if finished:
                self._finish(engine)
        new_ids = ids[:count].tolist()
        self._ids += new_ids
        self._ready.extend(Token(token, "") for token in new_ids[:-1])
        if new_ids:
            self._ready.append(Token(new_ids[-1], decode(text[len(self._text):])))
        self._text = text
        return True

    def _finish(self, engine: object) -> None:
        self._finish_reason = FinishReason(_read_stats(engine, self.id).finish_reason)
        if self._finish_reason in (FinishReason.ERROR, FinishReason.CAPACITY):
            try:
                capi.pulse_request_result(engine, self.id, None)  # raises the request's failure
            except PulseError as failure:
                self._failure = failure


def _read_stats(engine: object, request_id: int) -> capi.pulse_request_stats:
    stats = capi.pulse_request_stats()
    capi.pulse_request_stats_get(engine, request_id, stats)
    return stats


def _release(engine: Handle, request_id: int) -> None:
    with engine.use_if_open() as pointer:
        if pointer is not None:  # else the engine was freed, and its requests with it
            capi.pulse_request_cancel(pointer, request_id)
            capi.pulse_request_release(pointer, request_id)
