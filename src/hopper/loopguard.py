"""One bad job, run directory or write costs that step, never the watcher's loop.

Theory of operation. Every step of a turn (intake, starts, polling one job,
recovering one run directory, the heartbeat) runs under :meth:`LoopGuard.step`
with a *key* naming what it touched (a phase, ``poll:<job id>``,
``recover:<run dir>``). An exception there is caught and logged **once per
key** while it keeps failing — the traceback the first time for anything that
is not an ``OSError``, because that is a bug — and logged again only after the
key has succeeded in between. A loop that retries a broken run directory every
tick therefore writes one line, not twenty a second.

Degraded mode. A write that fails because the root is full or read-only
(ENOSPC, EDQUOT, EROFS …) puts the watcher in degraded mode: it stops claiming
new prompts (each claim would fail half-way), keeps watching its running jobs
(their supervisors hold the exit status until it can be written), says so in
the sd_notify STATUS line, its log and its heartbeat file, and leaves the mode
by itself at the first write that succeeds again.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

from hopper.errors import HopperError

log = logging.getLogger(__name__)

#: errno values that mean "the root cannot take writes now" rather than "this file is bad".
UNWRITABLE = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}
)


def is_unwritable(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in UNWRITABLE


class LoopGuard:
    """Runs the loop's steps; remembers which keys are failing so each is logged once."""

    def __init__(self) -> None:
        self.failing: dict[str, str] = {}  # key -> the message logged for it
        self.errors = 0  # failed steps since start (every failure, logged or not)

    def step(self, key: str, action: Callable[[], None], *, what: str = "") -> bool:
        """Run ``action``; True if it completed. Never raises an ``Exception``."""
        try:
            action()
        except Exception as exc:  # the loop's last line of defence
            self.report(key, exc, what=what)
            return False
        self.clear(key)
        return True

    def report(self, key: str, exc: BaseException, *, what: str = "") -> None:
        """Count a failure of ``key``; log it unless it is already being reported."""
        self.errors += 1
        message = f"{what or key}: {_describe(exc)}"
        if key in self.failing:
            return
        self.failing[key] = message
        if isinstance(exc, OSError):
            hint = " (is the disk full or read-only?)" if is_unwritable(exc) else ""
            log.error("%s; will retry%s", message, hint)
        elif isinstance(exc, HopperError):  # a bad file, already named and explained
            log.error("%s; will retry", message)
        else:
            log.error("%s; will retry (this is a bug: please report it)", message, exc_info=exc)

    def clear(self, key: str) -> None:
        if self.failing.pop(key, None) is not None:
            log.info("%s: working again", key)

    def forget(self, prefix: str) -> None:
        """Drop the keys of a job that is no longer handled, without a log line."""
        for key in [k for k in self.failing if k.startswith(prefix)]:
            del self.failing[key]


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, HopperError):
        return text.replace("\n", ";")
    return text if isinstance(exc, OSError) else f"{type(exc).__name__}: {text}"
