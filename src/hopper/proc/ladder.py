"""The supervisor's stop ladder as a pure step function: no clock, no processes.

Once a stop begins (the watcher's stop, a timeout, an idle or memory limit)
the job's process group gets each of the spec's stop signals in turn (an
interactive agent's list starts with SIGINT), each followed by ``grace``
seconds, then SIGKILL and kill rounds over the whole tree; SIGKILL is repeated
every :data:`KILL_REPEAT` seconds for as long as the job is not reaped. An
output limit skips the signals and the grace: SIGKILL at once, since a writer
that ignores SIGTERM would fill the disk during the grace period.

Whether a stop begins now, and why, is :func:`stop_now`: fed what the turn saw
(a stop request, a limit the meter found, the deadline and the time).

proc/supervise.py owns time and processes: it asks :func:`stop_now` on each
turn, calls :meth:`Ladder.begin` when a stop is decided, :meth:`Ladder.step`
with the monotonic time, performs the action it gets, and waits no later than
:attr:`Ladder.due`.
Standard library only, like the supervisor that loads it by path.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace

KILL_REPEAT = 1.0  # seconds between SIGKILL rounds while the job is not reaped


@dataclass(frozen=True)
class Send:
    """Send ``signal`` to the job's process group."""

    signal: int


@dataclass(frozen=True)
class KillTree:
    """SIGKILL the job's group, then kill rounds until no process is left below."""


Action = Send | KillTree


@dataclass(frozen=True)
class Stop:
    """Why a stop begins: the watcher asked (``request``), a ``limit`` the meter found
    (``memory``, ``output``, ``idle`` …), or the job's ``timeout`` passed."""

    why: str  # "request" | "limit" | "timeout"
    limit: str | None = None
    at_once: bool = False  # SIGKILL with no grace (an output limit)


def stop_now(
    stopping: bool, requested: bool, limit: str | None, deadline: float | None, now: float
) -> Stop | None:
    """Whether a stop begins at ``now``: None while one is under way or nothing calls
    for it. A request wins over a limit, a limit over the timeout (the meter is not
    asked while a request is pending, so a limit found in the same turn never hides
    one)."""
    if stopping:
        return None
    if requested:
        return Stop("request")
    if limit is not None:
        return Stop("limit", limit, at_once=limit == "output")
    if deadline is not None and now >= deadline:
        return Stop("timeout")
    return None


@dataclass(frozen=True)
class Ladder:
    grace: float  # seconds after each stop signal before the next step
    pending: tuple[int, ...] = ()  # signals still to send before the kill
    due: float | None = None  # when the next step is due; None: no stop has begun

    @property
    def stopping(self) -> bool:
        return self.due is not None

    def begin(self, now: float, stop_signals: list[int], at_once: bool = False) -> Ladder:
        """Start stopping at ``now`` (``at_once``: SIGKILL with no grace); a second begin
        changes nothing."""
        if self.stopping:
            return self
        pending = () if at_once else tuple(stop_signals)
        return replace(self, pending=pending, due=now)

    def step(self, now: float) -> tuple[Ladder, Action | None]:
        """The action due at ``now``, if any, and the ladder after it."""
        if self.due is None or now < self.due:
            return self, None
        if self.pending and self.pending[0] != signal.SIGKILL:
            return replace(self, pending=self.pending[1:], due=now + self.grace), Send(
                self.pending[0]
            )
        return replace(self, pending=self.pending[1:], due=now + KILL_REPEAT), KillTree()
