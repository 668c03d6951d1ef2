"""The running jobs' ABORT markers and heartbeats, minded once for every executor.

The runner owns the running set; this looks after each job in it between
polls: the markers inotify named (or, on a sweep, every marker it cannot
watch; abort_watch.py) and the heartbeats that are due (a heap;
heartbeats_due.py). A turn woken for anything else (a claim, a start
reporting) does no per-job work, however many jobs run. It acts on nothing
but heartbeats: the jobs to stop (ABORT) and the jobs another watcher took
over come back as a value (:class:`Watched`), and the runner stops or drops
them (:meth:`Runner.request_stop <hopper.runner.Runner.request_stop>`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from hopper.abort_watch import AbortWatch
from hopper.agents.base import Agent
from hopper.agents.registry import driven
from hopper.agents.summary import read_live_state
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Heartbeat
from hopper.core.states import Reason
from hopper.executors.protocol import Tick
from hopper.heartbeats_due import HeartbeatsDue
from hopper.loopguard import LoopGuard
from hopper.running import Running
from hopper.store import ledger
from hopper.store.jobfile import ABORT_FILE, read_resources
from hopper.store.takeover import taken_by

log = logging.getLogger(__name__)


@dataclass
class Watched:
    """What one look found, for the runner to act on."""

    stop: list[tuple[Running, Reason]] = field(default_factory=list)  # ABORT marker set
    handed_over: list[tuple[Running, str]] = field(default_factory=list)  # taken by (owner)


@dataclass
class RunningWatch:
    runs: Path  # the root's runs/ directory: where the run directories are
    config: Config
    clock: Clock
    guard: LoopGuard  # one bad job never stops the loop
    running: Mapping[str, Running]  # the runner's running set, read here
    owner: str  # this watcher's owner string: a job whose marker names another was taken
    agents: dict[str, Agent]  # by name: is a job's agent run by the driver (live state)?
    _beats: HeartbeatsDue = field(default_factory=HeartbeatsDue)  # when each job's is due
    _aborts: AbortWatch | None = None  # inotify on the running jobs' run dirs, once open
    _seen: Watched = field(default_factory=Watched)  # what the look under way found

    def open(self) -> None:
        aborts = AbortWatch(self.runs)
        if aborts.why_not is not None:
            log.info("ABORT markers of running jobs are checked every sweep: %s", aborts.why_not)
        for job_id, job in self.running.items():
            aborts.add(job_id, job.run_dir)
        self._aborts = aborts

    def close(self) -> None:
        if self._aborts is not None:
            self._aborts.close()
            self._aborts = None

    def add(self, job: Running) -> None:
        """``job`` runs here: its ABORT marker watched, its heartbeat scheduled."""
        self._beats.add(job.next_heartbeat, job.record.id)
        if self._aborts is not None:
            self._aborts.add(job.record.id, job.run_dir)

    def remove(self, job_id: str) -> None:
        """``job_id`` runs here no more (its heartbeat entry is dropped when it comes up)."""
        if self._aborts is not None:
            self._aborts.remove(job_id)

    def watch_all(self, tick: Tick, failed: list[Running]) -> Watched:
        """The ABORT markers to look at now, then the heartbeats that are due;
        what the runner must do about them comes back (a job that could not be
        looked at goes in ``failed``).

        Markers: the jobs inotify named, new jobs, and on a sweep the jobs it
        cannot watch (every job without inotify); heartbeats: popped from a
        heap. A turn woken for anything else (a claim, a start reporting)
        does no per-job work, however many jobs run.
        """
        self._seen = seen = Watched()
        skip = {j.record.id for j in failed}
        if self._aborts is not None:
            due = self._aborts.due(tick.monotonic, sweep=tick.sweep)
        else:
            due = None if tick.sweep else set()
        marked = self.running.keys() if due is None else due
        for job_id in list(marked):
            job = self.running.get(job_id)
            if job is None or job.stop_sent or job_id in skip:
                continue
            if not self._step(job, partial(self._check_abort, job)):
                failed.append(job)
                skip.add(job_id)
        if self._beats.next_due() > tick.monotonic:
            return seen
        again: dict[str, float] = {}  # not written this turn: due again next turn
        for due_at, job_id in self._beats.pop_due(tick.monotonic):
            job = self.running.get(job_id)
            if job is None or job.next_heartbeat != due_at or job_id in again:
                continue  # ended, already beaten, or a duplicate: a stale entry
            if job_id in skip or not self._step(job, partial(self._heartbeat, job, tick.monotonic)):
                if job_id not in skip:
                    failed.append(job)
                again[job_id] = due_at
        for job_id, due_at in again.items():
            self._beats.add(due_at, job_id)
        return seen

    def _step(self, job: Running, step: Callable[[], None]) -> bool:
        job_id = job.record.id
        return self.guard.step(f"watch:{job_id}", step, what=f"job={job_id} cannot be watched")

    def _check_abort(self, job: Running) -> None:
        """ABORT, the same for every executor."""
        # os.access, not Path.exists: every job's marker is looked at every few
        # seconds (abort_watch.FULL_SWEEP), and this is a sixteenth of the cost.
        if not job.stop_sent and os.access(f"{job.run_dir}/{ABORT_FILE}", os.F_OK):
            self._seen.stop.append((job, Reason.ABORTED))

    def _heartbeat(self, job: Running, mono: float) -> None:
        """The heartbeat, the same for every executor; the next one scheduled.

        Not if another watcher has taken the job over (we were stopped too long):
        checked before the record is written; the runner then drops it."""
        holder = taken_by(job.run_dir, job.record.owner, self.owner)
        if holder is not None:
            self._seen.handed_over.append((job, holder))
            return
        fact = Heartbeat(
            self.clock.now(),
            resources=read_resources(job.run_dir),  # the supervisor's latest
            # An agent's live state, if any; a bash job has none: agent.state.json
            # there is the job's own file, and never sets agent fields on its record.
            live=read_live_state(job.run_dir) if driven(self.agents, job.record.agent) else {},
        )
        job.record = ledger.commit(
            job.run_dir, lifecycle.heartbeat(job.record, fact), durable=False
        )
        job.next_heartbeat = self._beats.schedule(
            job.record.id,
            mono,
            interval=self.config.heartbeat_interval,
            rate=self.config.heartbeat_rate,
            # Two heartbeats within host_dead_after. A takeover never hangs on them:
            # it needs this host's watcher heartbeat files stale too, and the
            # supervisor's resources.json (every second) is the job's pulse as well.
            longest=self.config.host_dead_after / 2,
        )
