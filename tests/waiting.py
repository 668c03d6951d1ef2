"""The suite's one polling loop: wait for something observable, with a deadline.

Tests wait on events where the code under test offers one (a Condition in the
model server, a process's exit, a socket message). Where the thing waited for
lives in another process with no notification to hook (a Slurm daemon's view
of a node, a file another process writes), this is the only place that polls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The awaited condition did not hold before the deadline."""


def poll_until(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.02,
    check: Callable[[], None] | None = None,
) -> T:
    """Return ``predicate()``'s first truthy value; raise :class:`WaitTimeout` at the deadline.

    ``check`` runs between polls and may raise to end the wait early (a daemon
    that died will never become ready).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if check is not None:
            check()
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what}")
        time.sleep(min(interval, left))
