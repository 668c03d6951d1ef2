"""A self-pipe the main loop sleeps on: signals, exits and other threads wake it.

Signal handlers only set flags; ``signal.set_wakeup_fd`` makes every signal
also write a byte here, so ``wait`` returns at once instead of at the next
tick. Other threads call :meth:`Waker.wake`. Descriptors the loop reads
itself (the inbox's inotify, starts on their way) are waited on beside the
pipe (``also``): no thread and no byte in between.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Sequence
from typing import Protocol


class HasFileno(Protocol):
    def fileno(self) -> int: ...


class Waker:
    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        try:
            os.write(self._w, b"\0")
        except BlockingIOError:
            pass  # already full: the loop will wake anyway

    def wait(self, timeout: float, also: Sequence[HasFileno] = ()) -> None:
        """Sleep until woken, one of ``also`` is readable, or ``timeout`` seconds
        pass; then drain the pipe."""
        watched: list[int | HasFileno] = [self._r, *also]
        ready, _, _ = select.select(watched, [], [], max(0.0, timeout))
        if self._r in ready:
            try:
                while os.read(self._r, 4096):
                    pass
            except BlockingIOError:
                pass

    def pending(self, also: Sequence[HasFileno] = ()) -> bool:
        """Whether :meth:`wait` would return at once: woken, or one of ``also``
        readable. Looks without draining anything (a long step asks this between
        its items, to hand the loop back as soon as there is something to do)."""
        watched: list[int | HasFileno] = [self._r, *also]
        try:
            return bool(select.select(watched, [], [], 0)[0])
        except (OSError, ValueError):
            return True  # a descriptor gone bad: let the loop's own wait sort it out

    def attach_signals(self) -> None:
        """Route signal wake-ups into this pipe (main thread only)."""
        signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)

    def close(self) -> None:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:
            pass  # not the main thread
        os.close(self._r)
        os.close(self._w)
