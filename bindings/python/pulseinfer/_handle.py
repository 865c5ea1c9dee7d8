"""A C handle (pulse_model*, pulse_engine*) that is freed once, and never while a call uses it."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator


class Handle:
    """Calls hold the handle with use() for their duration; close() waits for those in flight and
    then frees it, so that no call runs on a freed handle whichever thread closes it."""

    def __init__(self, pointer: Any, free: Callable[[Any], None], name: str) -> None:
        self._pointer = pointer
        self._free = free
        self._name = name
        self._calls = 0
        self._idle = threading.Condition()

    @property
    def closed(self) -> bool:
        return self._pointer is None

    @contextlib.contextmanager
    def use_if_open(self) -> Iterator[Any]:
        """The pointer for the duration of a call, or None when the handle is closed."""
        with self._idle:
            pointer = self._pointer
            self._calls += 1
        try:
            yield pointer
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    @contextlib.contextmanager
    def use(self) -> Iterator[Any]:
        """The pointer for the duration of a call; ValueError when the handle is closed."""
        with self.use_if_open() as pointer:
            if pointer is None:
                raise ValueError(f"the {self._name} is closed")
            yield pointer

    def close(self) -> None:
        with self._idle:
            pointer, self._pointer = self._pointer, None
            self._idle.wait_for(lambda: self._calls == 0)
        if pointer is not None:
            self._free(pointer)
