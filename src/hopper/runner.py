"""The jobs this watcher runs: start them through their executor, watch them, end them.

The shell around the executors (:mod:`hopper.executors.protocol`): it owns
the set of running jobs and the leases they hold, prepares each start
(workspace, agent argv, environment), and on every tick asks each executor
about its jobs, then — once for every executor — checks ABORT markers and
writes heartbeats. :meth:`Runner.ended` is the one place a job's end is
handled, however it came about: an executor's poll, recovery after a
restart, a reject, an abort while queued, or another watcher's takeover.
"""

from __future__ import annotations

import logging
import os
import select
import stat
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from hopper import prepare
from hopper.abort_watch import AbortWatch
from hopper.agents.summary import read_live_state
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Heartbeat, Requeued, Step, StopRequested
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.states import Reason, is_terminal
from hopper.endings import Endings
from hopper.executors.protocol import Deferred, Ended, Executor, How, Launch, Starting, Tick
from hopper.heartbeats_due import HeartbeatsDue
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.running import Running
from hopper.scaleout import ScaleOut
from hopper.store import ledger
from hopper.store.jobfile import ABORT_FILE, EXIT_FILE, read_resources
from hopper.store.layout import Layout
from hopper.store.takeover import taken_by
from hopper.workspace import WorkspaceFailed

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 0.5  # seconds between checks of ABORT markers and adopted supervisors


def _not_a_directory(path: Path) -> bool:
    """True if ``path`` is gone or is no longer a real directory (a link, a file)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def holder_for(owner: str) -> Callable[[Running], str | None]:
    """Who took a job over from ``owner`` (this watcher) while it was silent, if anyone."""

    def holder(job: Running) -> str | None:
        return taken_by(job.run_dir, job.record.owner, owner)

    return holder


@dataclass
class Runner:
    layout: Layout
    config: Config
    intake: Intake
    clock: Clock
    executors: Mapping[str, Executor]
    scale: ScaleOut  # the leases a running job holds
    endings: Endings
    guard: LoopGuard  # one bad job never stops the loop
    _running: dict[str, Running] = field(default_factory=dict)
    _starting: dict[str, Starting] = field(default_factory=dict)  # begun, not yet released
    _child_exited: bool = True  # set through note_child_exit (the SIGCHLD handler)
    _requeued: list[JobRecord] = field(default_factory=list)  # retries, for the scheduler
    _io_errors: int = 0  # failed writes since start (disk full …), for status reports
    _next_sweep: float = 0.0
    _beats: HeartbeatsDue = field(default_factory=HeartbeatsDue)  # when each job's is due
    _aborts: AbortWatch | None = None  # inotify on the running jobs' run dirs, once open
    _groups: dict[str, list[Running]] | None = None  # running jobs by executor (None: stale)

    def open(self) -> None:
        self.guard.step("start-up: watch run directories for ABORT", self._watch_aborts)
        for name, executor in self.executors.items():
            self.guard.step(f"start-up: executor {name}", executor.open)

    def close(self) -> None:
        self.guard.step("shut-down: starts on their way", self.finish_starts)
        for name, executor in self.executors.items():
            self.guard.step(f"shut-down: executor {name}", executor.close)
        if self._aborts is not None:
            self._aborts.close()
            self._aborts = None

    def _watch_aborts(self) -> None:
        aborts = AbortWatch(self.layout.runs)
        if aborts.why_not is not None:
            log.info("ABORT markers of running jobs are checked every sweep: %s", aborts.why_not)
        for job_id, job in self._running.items():
            aborts.add(job_id, job.run_dir)
        self._aborts = aborts

    def _track(self, job: Running) -> None:
        """``job`` runs here: its ABORT marker watched, its heartbeat scheduled."""
        self._running[job.record.id] = job
        self._groups = None
        self._beats.add(job.next_heartbeat, job.record.id)
        if self._aborts is not None:
            self._aborts.add(job.record.id, job.run_dir)

    def _untrack(self, job_id: str) -> Running | None:
        """``job_id`` runs here no more (its heartbeat entry is dropped when it comes up)."""
        if self._aborts is not None:
            self._aborts.remove(job_id)
        self._groups = None
        return self._running.pop(job_id, None)

    def executor_for(self, record: JobRecord) -> Executor:
        try:
            return self.executors[record.executor]
        except KeyError:
            raise ValueError(
                f"job {record.id}: no executor {record.executor!r} in this watcher "
                f"(it has {', '.join(sorted(self.executors))})"
            ) from None

    # -- what the loop asks ---------------------------------------------------------
    def running_count(self) -> int:
        """How many jobs run here (released to run; see :attr:`busy` for starts too)."""
        return len(self._running)

    def running_ids(self) -> Collection[str]:
        """The ids of the jobs running here: a live view, read it at once."""
        return self._running.keys()

    def running_jobs(self) -> list[Running]:
        """The jobs running here, a snapshot (safe to stop or end them while iterating)."""
        return list(self._running.values())

    def is_tracking(self, job_id: str) -> bool:
        """Is this job running here or on its way to (recovery leaves it alone)?"""
        return job_id in self._running or job_id in self._starting

    def take_requeued(self) -> list[JobRecord]:
        """The jobs handed back to the queue since the last call (retries, deferred starts)."""
        taken, self._requeued = self._requeued, []
        return taken

    def has_requeued(self) -> bool:
        return bool(self._requeued)

    def note_child_exit(self) -> None:
        """A child exited (SIGCHLD): the next poll looks at the local jobs. Signal-safe."""
        self._child_exited = True

    @property
    def io_errors(self) -> int:
        """Failed writes since start (disk full …), for status reports."""
        return self._io_errors

    # -- start ------------------------------------------------------------------
    def start(self, record: JobRecord) -> bool:
        """Start a queued job under its executor; False if its leases are taken elsewhere.

        Whatever happens next (it runs, it waits for its executor, it is
        rejected) is this method's to settle: it never raises.
        """
        if not self.scale.acquire(record):
            return False
        try:
            self._start(record)
        except Exception as exc:  # costs this job, never the loop
            self._start_failed(record, exc)
        return True

    def _start_failed(self, record: JobRecord, exc: Exception) -> None:
        """A start that raised (a write refused, a bug): the job is rejected, leases given back."""
        bug = "" if isinstance(exc, OSError) else " (a bug in hopper: please report it)"
        self.guard.report(f"start:{record.id}", exc, what=f"job={record.id} could not start")
        detail = f"could not start: {exc}{bug}"
        self.guard.step(
            f"reject:{record.id}",
            lambda: self.reject(record, Reason.SPAWN_FAILED, detail, leased=True),
        )

    def _start(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        launch = self._launch(record, run_dir)
        if isinstance(launch, Ended):
            self.ended(launch, leased=True)
            return
        result = self.executor_for(record).start(launch)
        if isinstance(result, Running):
            self._track(result)
        elif isinstance(result, Starting):
            self._starting[record.id] = result  # finished by settle_starts
            self.scale.starting.add(record.id)  # its lease is in use, though it is queued
        elif isinstance(result, Deferred):
            self.scale.release(record)
            self._requeued.append(result.record)
        else:
            self.ended(result, leased=True)

    def _launch(self, record: JobRecord, run_dir: Path) -> Launch | Ended:
        try:
            record = prepare.with_workspace(self.layout, record)
        except WorkspaceFailed as exc:
            why = f"{record.inbox_path}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.WORKSPACE_FAILED, why)
        try:
            ready = prepare.prepare(self.layout, self.config, self.intake.agents, record, run_dir)
        except BadPrompt as exc:
            why = exc.describe(record.inbox_path)
            return Ended(record, run_dir, How.REJECTED, Reason.BAD_PROMPT, why)
        return Launch(record, run_dir, ready.prep, ready.workdir, ready.env, ready.job_vars)

    @property
    def busy(self) -> int:
        """Jobs holding a slot here: running, and started but not yet released."""
        return len(self._running) + len(self._starting)

    def active(self) -> list[JobRecord]:
        """The records of every job holding a slot here (for the scheduler)."""
        return [j.record for j in self._running.values()] + [
            s.record for s in self._starting.values()
        ]

    def settle_starts(self, timeout: float = 0.0) -> None:
        """Finish the starts whose executors have reported (or whose deadline has
        passed): their ``running`` records are committed in one group commit
        (store/ledger.py: durable before anything acts on them), then each job
        is released. Waits up to ``timeout`` for the first report."""
        if not self._starting:
            return
        ready: list[Starting] = list(self._starting.values())
        try:
            ready = select.select(ready, [], [], timeout)[0]
        except (OSError, ValueError):
            pass  # a descriptor gone bad: collect them all, each fails on its own
        mono = time.monotonic()  # real time: the executor's deadline is for real processes
        ready += [s for s in self._starting.values() if s.deadline <= mono and s not in ready]
        entries: list[tuple[Starting, ledger.Entry]] = []
        for start in ready:
            del self._starting[start.record.id]
            report = self._report(start)
            if isinstance(report, Ended):
                self.guard.step(f"reject:{start.record.id}", self._never_ran(report))
            elif report is not None:
                entries.append((start, ledger.Entry(start.run_dir, report)))
        try:
            self._commit_starts(entries)
        finally:
            self.scale.starting.difference_update(s.record.id for s in ready)

    def _commit_starts(self, entries: list[tuple[Starting, ledger.Entry]]) -> None:
        if not entries:
            return
        failed = ledger.commit_batch([e for _, e in entries], crash="start.after_record")
        errors = {id(f.entry): f.error for f in failed}
        for start, entry in entries:
            error = errors.get(id(entry))
            if error is None:
                self._track(start.release(entry.step.record))
            else:
                start.abandon()
                self._start_failed(start.record, error)

    def _never_ran(self, end: Ended) -> Callable[[], None]:
        def handle() -> None:
            self.ended(end, leased=True)

        return handle

    def _report(self, start: Starting) -> Step | Ended | None:
        """A start's report; None if collecting it raised (the job is then rejected)."""
        try:
            return start.report()
        except Exception as exc:  # costs this job, never the loop
            start.abandon()
            self._start_failed(start.record, exc)
            return None

    def finish_starts(self) -> None:
        """Settle every start on its way (before recovery looks at the runs, or at exit)."""
        while self._starting:
            self.settle_starts(timeout=0.05)

    def waiting_on(self) -> list[Starting]:
        """What the loop's sleep should wake for besides its own pipe."""
        return list(self._starting.values())

    # -- monitor ----------------------------------------------------------------
    def poll(self) -> None:
        """One pass over the running jobs: each executor looks at its own, then
        ABORT markers (those inotify named, or on a sweep, every SWEEP_INTERVAL
        or poll_interval if longer, which keeps "touch ABORT" well within a
        second; abort_watch.py) and the heartbeats that are due."""
        mono = self.clock.monotonic()
        sweep = mono >= self._next_sweep
        if sweep:
            self._next_sweep = mono + max(SWEEP_INTERVAL, self.config.poll_interval)
        tick = Tick(mono, sweep, self._child_exited or sweep)
        self._child_exited = False
        if self._groups is None:  # rebuilt only when the running set changed
            self._groups = {}
            for job in self._running.values():
                self._groups.setdefault(job.record.executor, []).append(job)
        failed: list[Running] = []
        for name, jobs in list(self._groups.items()):
            executor = self.executors.get(name)
            if executor is None:
                continue  # never started here; recovery reports it
            polled = executor.poll(jobs, tick)
            failed.extend(polled.failed)
            if len(polled.ended) > 1:  # one group commit for this poll's terminal records
                self.ended_many(polled.ended, failed)
            elif polled.ended:
                self._settle(polled.ended[0], failed)
            for job, reason in polled.stop:
                if not job.stop_sent and job.record.id in self._running:
                    self.request_stop(job, reason)
        self._watch_all(tick, failed)
        for job in failed:
            if _not_a_directory(job.run_dir):
                self._vanished(job)  # deleted (or swapped for a link) under it: filed lost once
            else:
                # ENOSPC, EIO, a bad file in its run directory …: keep the job and try
                # again next tick (logged once); the supervisor's exit.json is durable.
                self._io_errors += 1

    def _watch_all(self, tick: Tick, failed: list[Running]) -> None:
        """The ABORT markers to look at now, then the heartbeats that are due.

        Markers: the jobs inotify named, new jobs, and on a sweep the jobs it
        cannot watch (every job without inotify); heartbeats: popped from a
        heap. A turn woken for anything else (a claim, a start reporting)
        does no per-job work, however many jobs run.
        """
        skip = {j.record.id for j in failed}
        if self._aborts is not None:
            due = self._aborts.due(tick.monotonic, sweep=tick.sweep)
        else:
            due = None if tick.sweep else set()
        marked = self._running.keys() if due is None else due
        for job_id in list(marked):
            job = self._running.get(job_id)
            if job is None or job.stop_sent or job_id in skip:
                continue
            if not self._step(job, partial(self._check_abort, job)):
                failed.append(job)
                skip.add(job_id)
        if self._beats.next_due() > tick.monotonic:
            return
        again: dict[str, float] = {}  # not written this turn: due again next turn
        for due_at, job_id in self._beats.pop_due(tick.monotonic):
            job = self._running.get(job_id)
            if job is None or job.next_heartbeat != due_at or job_id in again:
                continue  # ended, already beaten, or a duplicate: a stale entry
            if job_id in skip or not self._step(job, partial(self._heartbeat, job, tick.monotonic)):
                if job_id not in skip:
                    failed.append(job)
                again[job_id] = due_at
        for job_id, due_at in again.items():
            self._beats.add(due_at, job_id)

    def _step(self, job: Running, step: Callable[[], None]) -> bool:
        job_id = job.record.id
        return self.guard.step(f"watch:{job_id}", step, what=f"job={job_id} cannot be watched")

    def _settle(self, end: Ended, failed: list[Running]) -> None:
        """Handle one end a poll reported; if that fails, keep the job for the next tick."""
        job = self._running.get(end.job_id)

        def handle() -> None:
            self.ended(end)

        if self.guard.step(
            f"end:{end.job_id}", handle, what=f"job={end.job_id} cannot be finished"
        ):
            return
        if job is not None:
            if end.job_id not in self._running:
                self._track(job)  # tried again next tick
            failed.append(job)

    def _check_abort(self, job: Running) -> None:
        """ABORT, the same for every executor."""
        if not job.stop_sent and (job.run_dir / ABORT_FILE).exists():
            self.request_stop(job, Reason.ABORTED)

    def _heartbeat(self, job: Running, mono: float) -> None:
        """The heartbeat, the same for every executor; the next one scheduled."""
        if self.taken(job):
            return
        fact = Heartbeat(
            self.clock.now(),
            resources=read_resources(job.run_dir),  # the supervisor's latest
            live=read_live_state(job.run_dir),  # an agent's live state, if any
        )
        job.record = ledger.commit(
            job.run_dir, lifecycle.heartbeat(job.record, fact), durable=False
        )
        job.next_heartbeat = mono + self.config.heartbeat_interval
        self._beats.add(job.next_heartbeat, job.record.id)

    def taken(self, job: Running) -> bool:
        """Has another watcher taken this job over (we were stopped too long)? Then drop it.

        Checked before anything that writes the job's record: its heartbeat,
        finishing it, filing it lost. The new owner finishes it; we must not.
        """
        holder = taken_by(job.run_dir, job.record.owner, self.intake.ident.owner)
        if holder is None:
            return False
        self.executor_for(job.record).forget(job)
        self.ended(Ended(job.record, job.run_dir, How.HANDED_OVER, detail=holder))
        return True

    def request_stop(self, job: Running, reason: Reason) -> None:
        """Record why, then ask the executor to stop the job (it escalates to SIGKILL)."""
        step = lifecycle.stop_requested(job.record, StopRequested(self.clock.now(), reason))
        job.record = ledger.commit(job.run_dir, step)
        self.executor_for(job.record).cancel(job, reason)
        job.stop_sent = True
        log.info("job=%s stop requested reason=%s", job.record.id, reason)

    def _vanished(self, job: Running) -> None:
        """Its run directory was deleted (or swapped for a link) while it ran.

        Filed ``lost`` once, in a fresh run directory, and never retried; its
        processes are ended by its executor.
        """
        self._untrack(job.record.id)
        self.executor_for(job.record).abandon(job)
        detail = (
            "its run directory was deleted while it ran (by the job?); "
            "its log and prompt went with it"
        )
        try:
            self.ended(
                Ended(job.record, job.run_dir, How.VANISHED, Reason.LOST, detail), leased=True
            )
        except OSError as exc:
            log.error("job=%s cannot file it in %s: %s", job.record.id, job.run_dir, exc)

    # -- the one way a job ends ---------------------------------------------------
    def ended(self, end: Ended, *, leased: bool = False) -> JobRecord | None:
        """Handle a job's end, however it came about: drop it from the running
        set, give back its leases, retry it or file it terminal, then tidy its
        worktree and run its hooks. Returns the record it left (None: handed over).

        ``leased``: it holds leases though it is not in the running set (a
        start that failed). Raises the OSError that stopped the filing (the
        caller keeps the job and tries again).
        """
        begun = self._begin_end(end)
        if begun is None:
            return None  # its leases are the new owner's now
        end, job = begun
        try:
            record = self.endings.file(end)
        except OSError:
            if job is not None:
                self._track(job)
            raise
        return self._end_filed(end, job, record, leased)

    def ended_many(self, ends: Sequence[Ended], failed: list[Running]) -> None:
        """The ends one poll reported, handled as :meth:`ended` handles each, their
        terminal records filed with one group commit. A job whose filing failed
        is kept (in ``failed`` and the running set) and tried again next tick."""
        begun = [b for end in ends if (b := self._begin_end(end)) is not None]
        results = self.endings.file_many([end for end, _ in begun])
        for (end, job), result in zip(begun, results, strict=True):
            key = f"end:{end.job_id}"
            if isinstance(result, Exception):
                self.guard.report(key, result, what=f"job={end.job_id} cannot be finished")
                if job is not None:
                    if end.job_id not in self._running:
                        self._track(job)
                    failed.append(job)
                continue
            self.guard.clear(key)
            self.guard.step(
                f"end-after:{end.job_id}",
                self._after_filing(end, job, result),
                what=f"job={end.job_id} filed; its worktree or hooks failed",
            )

    def _after_filing(
        self, end: Ended, job: Running | None, record: JobRecord
    ) -> Callable[[], None]:
        def after() -> None:
            self._end_filed(end, job, record, False)

        return after

    def _begin_end(self, end: Ended) -> tuple[Ended, Running | None] | None:
        """Out of the running set; None if another watcher has taken it over."""
        job = self._untrack(end.job_id)
        for step in ("poll", "watch"):  # its failures are over: logged again if it comes back
            self.guard.forget(f"{step}:{end.job_id}")
        if end.how in (How.EXITED, How.LOST):  # checked again here, whatever the executor did
            holder = taken_by(end.run_dir, end.record.owner, self.intake.ident.owner)
            if holder is not None:
                if job is not None:
                    self.executor_for(end.record).forget(job)
                end = replace(end, how=How.HANDED_OVER, detail=holder)
        if end.how is How.HANDED_OVER:
            log.warning(
                "job=%s was taken over by %s while this watcher was silent; leaving it to them",
                end.job_id,
                end.detail,
            )
            return None
        return end, job

    def _end_filed(
        self, end: Ended, job: Running | None, record: JobRecord, leased: bool
    ) -> JobRecord:
        """After the filing: leases back, then a retry queued, or worktree and hooks."""
        if job is not None or leased:
            self.scale.release(end.record)
        if not is_terminal(record.state):
            self._requeued.append(record)  # a retry
            return record
        if record.workspace == "worktree" and record.workspace_path:
            self.endings.tidy_worktree(record, end.run_dir)
        self.endings.run_hooks(record, end.run_dir)
        return record

    def reject(
        self, record: JobRecord, reason: Reason, detail: str, *, leased: bool = False
    ) -> None:
        """A queued job that cannot run (its dependency failed, its start raised …)."""
        run_dir = self.layout.run_dir(record.id)
        self.ended(Ended(record, run_dir, How.REJECTED, reason, detail), leased=leased)

    def abort_queued(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        self.ended(Ended(record, run_dir, How.ABORTED, Reason.ABORTED, "aborted before it started"))

    # -- after a restart ------------------------------------------------------------
    def adopt(self, record: JobRecord) -> None:
        """Watch a job that still runs under its supervisor (or Slurm) after a restart."""
        run_dir = self.layout.run_dir(record.id)
        self._track(self.executor_for(record).adopt(record, run_dir))

    def requeue(self, record: JobRecord) -> JobRecord:
        """Recovery: recorded running but never released. Back to queued."""
        run_dir = self.layout.run_dir(record.id)
        fact = Requeued(self.clock.now(), self.intake.ident.owner, "never released to run")
        queued = ledger.commit(run_dir, lifecycle.requeued(record, fact))
        (run_dir / EXIT_FILE).unlink(missing_ok=True)
        return queued
