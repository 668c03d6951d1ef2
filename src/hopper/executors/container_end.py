"""A container job's end, as the engine tells it: asked on the executor's lane.

Theory of operation. When a container job's supervisor has exited, the
engine may know more than its exit status: that its OOM killer ended the
container (``memory_limit``), or, when the supervisor vanished, how the
container ended. And the container must go (``rm -f``) before the job is filed. None of these
engine calls runs on the watcher's loop in the common case:

- a container job's end found by a poll is *parked*: its :class:`Ended` is
  held while ``inspect`` (only for a failure the engine may explain) then
  ``rm -f`` run on the lane, and handed on, refined (:func:`refined`), at
  the first poll after they answered (at their deadline: as it was; a
  container left by a hung ``rm`` is removed before the name runs again by
  container_run.py);
- recovery (a stray container before a restart, a supervisor that vanished,
  an end it settles) waits for its answer with keep-alives (heartbeat,
  ``WATCHDOG=1``), bounded by ``[container] command_timeout`` per call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from hopper.core.outcome import Outcome
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.sizes import format_size
from hopper.core.states import Reason
from hopper.executors.calls import Call, Lane, wait_alive
from hopper.executors.container import ContainerUnavailable, EngineState, inspect, remove
from hopper.executors.protocol import Context, Ended
from hopper.running import Running
from hopper.store import ledger

log = logging.getLogger(__name__)

LOOKED_AT = (Reason.EXIT_NONZERO, Reason.SIGNALED)  # ends the engine may explain


def needs_look(record: JobRecord, outcome: Outcome) -> bool:
    return record.container is not None and outcome.reason in LOOKED_AT


def refined(record: JobRecord, outcome: Outcome, state: EngineState | None) -> Outcome:
    """A container ended by the engine's OOM killer (past ``--memory``) is ``memory_limit``.

    Where the engine cannot tell (podman with runc on cgroup v1 reports
    ``OOMKilled`` false), an exit 137 under a memory_max says it may be.
    """
    if not needs_look(record, outcome):
        return outcome
    limit = record.memory_max_bytes
    size = f" ({format_size(limit)})" if limit is not None else ""
    if state is not None and state.oom_killed:
        return Outcome(
            Reason.MEMORY_LIMIT,
            f"stopped: the container used more memory than memory_max{size}; "
            "the engine's OOM killer ended it",
        )
    if limit is not None and outcome.detail == "exited 137":
        return Outcome(
            outcome.reason,
            "exited 137 (SIGKILL): the engine's OOM killer does this to a container "
            f"past memory_max{size}; raise memory_max if the job needs more",
        )
    return outcome


@dataclass
class Parked:
    end: Ended
    call: Call[EngineState | None]


class ContainerEnds:
    """The engine's side of container jobs' ends, on ``lane``."""

    def __init__(self, ctx: Context, lane: Lane, engine: Callable[[], list[str]]) -> None:
        self.ctx, self.lane, self.engine = ctx, lane, engine
        self._parked: dict[str, Parked] = {}

    @property
    def timeout(self) -> float:
        return self.ctx.config.container.command_timeout

    # -- the poll's side: nothing waits ---------------------------------------------------
    def parked(self) -> set[str]:
        return set(self._parked)

    def park(self, end: Ended, look: bool) -> None:
        """Hold ``end`` while the engine is asked how its container ended (``look``),
        then its container is removed."""
        container = end.record.container
        assert container is not None
        name, lane, timeout = container.name, self.lane, self.timeout
        try:
            engine = self.engine()
        except ContainerUnavailable:
            engine = None

        def ask() -> EngineState | None:
            if engine is None:
                return None
            state = inspect(engine, name, lane.run, timeout) if look else None
            if remove(engine, name, lane.run, timeout):
                log.info("job=%s container=%s removed", end.job_id, name)
            return state

        self._parked[end.job_id] = Parked(end, lane.submit(ask))

    def answered(self, jobs: Iterable[Running]) -> list[Ended]:
        """The parked ends whose engine look answered, refined; each with the job's
        record as it is now (a heartbeat or a stop request may have moved it)."""
        if not self._parked:
            return []
        current = {job.record.id: job for job in jobs}
        out: list[Ended] = []
        for job_id, parked in list(self._parked.items()):
            job = current.get(job_id)
            if job is None:  # no longer ours (taken over, vanished): nothing to hand on
                del self._parked[job_id]
                continue
            if not parked.call.done():
                continue
            del self._parked[job_id]
            try:
                state = parked.call.result()
            except Exception as exc:  # an engine answer we cannot read: the end as it was
                log.warning("job=%s the engine's look failed: %s", job_id, exc)
                state = None
            end = parked.end
            outcome = refined(job.record, Outcome(end.reason or Reason.LOST, end.detail), state)
            out.append(
                replace(end, record=job.record, reason=outcome.reason, detail=outcome.detail)
            )
        return out

    # -- recovery's side: waits, with keep-alives ---------------------------------------
    def _wait(self, work: Callable[[], EngineState | None]) -> EngineState | None:
        return wait_alive(self.lane.submit(work), self.ctx.keepalive)

    def remove_now(self, record: JobRecord) -> None:
        """The job's process is over (an end recovery settles): its container goes."""
        if record.container is None:
            return
        name, lane, timeout = record.container.name, self.lane, self.timeout
        try:
            engine = self.engine()
        except ContainerUnavailable as exc:
            log.warning("job=%s container %s not removed: %s", record.id, name, exc)
            return
        if wait_alive(
            lane.submit(lambda: remove(engine, name, lane.run, timeout)), self.ctx.keepalive
        ):
            log.info("job=%s container=%s removed", record.id, name)

    def refine_now(self, record: JobRecord, outcome: Outcome) -> Outcome:
        """:func:`refined` with the engine asked now (an end recovery settles)."""
        if not needs_look(record, outcome) or record.container is None:
            return outcome
        name, lane, timeout = record.container.name, self.lane, self.timeout
        try:
            engine = self.engine()
        except ContainerUnavailable:
            return refined(record, outcome, None)
        return refined(
            record, outcome, self._wait(lambda: inspect(engine, name, lane.run, timeout))
        )

    def clear_stray(self, record: JobRecord, run_dir: Path) -> None:
        """Recovery, before the job (re)starts: a container of its name is left from a crash."""
        if record.container is None:
            return
        try:
            engine = self.engine()
        except ContainerUnavailable:
            return  # the start fails with the reason; nothing can be left to remove
        name, lane, timeout = record.container.name, self.lane, self.timeout

        def clear() -> bool:
            if inspect(engine, name, lane.run, timeout) is None:
                return False
            return remove(engine, name, lane.run, timeout)

        if wait_alive(lane.submit(clear), self.ctx.keepalive):
            ledger.note(
                run_dir,
                "container_stray_removed",
                self.ctx.clock.now(),
                container=name,
                why="left by an earlier start that was never recorded (watcher crash)",
            )
            log.info("job=%s removed stray container %s", record.id, name)

    def exit_from_engine(self, record: JobRecord, now: datetime) -> ExitStatus | None:
        """The supervisor vanished: how the engine says the container ended, if it did.

        The end time is ``now``: the engine's clock format differs between engines.
        A container still running is stopped at once (nobody supervises it any
        more) and None returned: the job is then ``lost`` like a local one.
        """
        if record.container is None:
            return None
        try:
            engine = self.engine()
        except ContainerUnavailable:
            return None
        name, lane, timeout = record.container.name, self.lane, self.timeout

        def look() -> EngineState | None:
            state = inspect(engine, name, lane.run, timeout)
            if state is not None and (state.running or state.exit_code is None):
                remove(engine, name, lane.run, timeout)
            return state

        state = self._wait(look)
        if state is None or state.running or state.exit_code is None:
            return None
        return ExitStatus(started=True, exit_code=state.exit_code, finished_at=now)
