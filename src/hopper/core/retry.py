"""Retry policy: which endings are worth another attempt, and when. Pure.

A job retries when it failed on its own (non-zero exit, a signal, a timeout,
or lost in a crash) and attempts remain. Nothing a person asked for is
retried (abort, shutdown), nor input that will fail the same way again
(bad prompt, unknown agent, spawn failure).

A start that fails before the job ran is another matter (:func:`start_retry`):
when the cause is the host's and passes (a full disk, the process or file
limit, memory, a lost fork server), the job stays queued and its start is
tried again after a backoff, as a running job that meets the same error is
kept; it costs none of the job's ``retries``. A cause that will not pass
(a program or file not found, a bad spec, a bug) fails it ``spawn_failed``.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from hopper.core.states import Reason

RETRYABLE = frozenset({Reason.EXIT_NONZERO, Reason.SIGNALED, Reason.TIMEOUT, Reason.LOST})
MAX_BACKOFF = 3600.0


def should_retry(reason: Reason, attempt: int, retries: int) -> bool:
    """``attempt`` is the 1-based attempt that just ended; ``retries`` the extra tries allowed."""
    return reason in RETRYABLE and attempt <= retries


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: base, 2×base, 4×base … capped."""
    return min(MAX_BACKOFF, base * float(2 ** max(0, attempt - 1)))


# What a start can meet that is the host's and passes: a full disk or quota, the
# process (EAGAIN from fork) or file-descriptor limits, memory, a failing, busy or
# read-only device (the watcher is then DEGRADED until the root takes writes again).
TRANSIENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EAGAIN,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.EIO,
        errno.EROFS,
        errno.EINTR,
        errno.EBUSY,
        errno.ETIMEDOUT,
    }
)
START_RETRY_MIN = 0.5  # seconds: an abandoned supervisor has long recorded started=false
START_RETRY_MAX = 60.0  # seconds between tries of a start at most, however long it fails
UNSEEN_TRIES = 3  # starts that failed for a cause nobody saw (a supervisor gone silent)


@dataclass(frozen=True)
class StartCause:
    """Why a start failed, as the shell saw it.

    ``errno``: the OSError's number; 0 or None for an OSError without one (a
    supervisor that died before its pid line: the cause is unseen); None with
    ``bug`` for an exception that is not an OSError. ``lost_server``: the fork
    server was lost under it (transient whatever the errno).
    """

    errno: int | None
    lost_server: bool = False
    bug: bool = False

    @property
    def transient(self) -> bool:
        return self.lost_server or (self.errno is not None and self.errno in TRANSIENT_ERRNOS)

    @property
    def unseen(self) -> bool:
        return not self.bug and not self.lost_server and not self.errno


def start_retry(cause: StartCause, tries: int, base: float) -> float | None:
    """Seconds until the job's start is tried again after its ``tries``-th failure in
    a row (1-based); None: the job fails ``spawn_failed``.

    Transient causes are tried again for as long as they last, the wait doubling
    from ``base`` (the config's ``retry_backoff``) between START_RETRY_MIN and
    START_RETRY_MAX. An unseen cause is tried UNSEEN_TRIES times in all (a
    supervisor that died silently may have met the process limit, or a bug).
    """
    if not cause.transient and not (cause.unseen and tries < UNSEEN_TRIES):
        return None
    return min(START_RETRY_MAX, max(START_RETRY_MIN, backoff(tries, base)))
