"""The supervisor's stop ladder as a pure step function: no clock, no processes.

Once a stop begins (the watcher's stop, a timeout, an idle or memory limit)
the job's process group gets each of the spec's stop signals in turn (an
interactive agent's list starts with SIGINT), each followed by ``grace``
seconds, then SIGKILL and kill rounds over the whole tree; SIGKILL is repeated
every :data:`KILL_REPEAT` seconds for as long as the job is not reaped. An
output limit skips the signals and the grace: SIGKILL at once, since a writer
that ignores SIGTERM would fill the disk during the grace period.

proc/supervise.py owns time and processes: it calls :meth:`Ladder.begin` when
a stop is decided, :meth:`Ladder.step` with the monotonic time on each turn,
performs the action it gets, and waits no later than :attr:`Ladder.due`.
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
