"""The jobs this watcher runs: start them through their executor, watch them, end them.

The shell around the executors (:mod:`hopper.executors.protocol`): it owns
the set of running jobs and the leases they hold, hands each start to
pending_starts.py (workspace, agent argv, environment; the group commit of
``running`` records), and on every tick asks each executor about its jobs,
then — once for every executor — has running_watch.py check ABORT markers
and write heartbeats. :meth:`Runner.ended` is the one place a job's end is
handled, however it came about: an executor's poll, recovery after a
restart, a reject, an abort while queued, or another watcher's takeover.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Requeued, StopRequested
from hopper.core.record import JobRecord
from hopper.core.states import Reason, is_terminal
from hopper.endings import Endings
from hopper.executors.protocol import Ended, Executor, How, Starting, Tick, executor_for
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.pending_starts import PendingStarts, StartsDone
from hopper.running import Running
from hopper.running_watch import RunningWatch
from hopper.scaleout import ScaleOut
from hopper.store import ledger
from hopper.store.jobfile import EXIT_FILE
from hopper.store.layout import Layout, run_dir_gone
from hopper.store.takeover import taken_by

log = logging.getLogger(__name__)

QUEUED_VANISHED = (
    "its run directory was deleted while it was queued (by another job?); "
    "its prompt and admission record went with it, and it never ran"
)
SWEEP_INTERVAL = 0.5  # seconds between checks of ABORT markers and adopted supervisors


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
    # A plain job's end may be filed after the turn's starts (file_deferred): no
    # budget counts the spend it files (the watcher sets this: no budget rules).
    defer_filing: bool = False
    _running: dict[str, Running] = field(default_factory=dict)
    _child_exited: bool = True  # set through note_child_exit (the SIGCHLD handler)
    _requeued: list[JobRecord] = field(default_factory=list)  # retries, for the scheduler
    _io_errors: int = 0  # failed writes since start (disk full …), for status reports
    _next_sweep: float = 0.0
    _groups: dict[str, list[Running]] | None = None  # running jobs by executor (None: stale)
    _deferred: list[tuple[Ended, Running]] = field(default_factory=list)  # file_deferred's
    _starts: PendingStarts = field(init=False)  # begun, not yet released
    _watch: RunningWatch = field(init=False)  # ABORT markers and heartbeats of the running

    def __post_init__(self) -> None:
        self._starts = PendingStarts(
            self.layout,
            self.config,
            self.intake,
            self.scale,
            self.guard,
            self.executors,
            self.clock,
        )
        self._watch = RunningWatch(
            self.layout.runs,
            self.config,
            self.clock,
            self.guard,
            self._running,
            self.intake.ident.owner,
            self.endings.agents,
        )

    def open(self) -> None:
        self.guard.step("start-up: watch run directories for ABORT", self._watch.open)
        for name, executor in self.executors.items():
            self.guard.step(f"start-up: executor {name}", executor.open)

    def close(self) -> None:
        self.guard.step("shut-down: ends not filed yet", self.file_deferred)
        self.guard.step("shut-down: starts on their way", self.finish_starts)
        self.guard.step("shut-down: the starts' lane", self._starts.close)
        for name, executor in self.executors.items():
            self.guard.step(f"shut-down: executor {name}", executor.close)
        self._watch.close()

    def _track(self, job: Running) -> None:
        """``job`` runs here: its ABORT marker watched, its heartbeat scheduled."""
        self._running[job.record.id] = job
        self._groups = None
        self._watch.add(job)

    def _untrack(self, job_id: str) -> Running | None:
        """``job_id`` runs here no more (its heartbeat entry is dropped when it comes up)."""
        self._watch.remove(job_id)
        self._groups = None
        return self._running.pop(job_id, None)

    def _never_ran(self, end: Ended) -> None:
        """A start that ended before it ran: filed here, its leases given back.

        Whatever stopped it, a job whose run directory is gone (deleted by
        another job while it was queued) is filed ``lost`` in a fresh one.
        """
        if run_dir_gone(end.run_dir):
            self.file_vanished(end.record, QUEUED_VANISHED, leased=True)
        else:
            self.ended(end, leased=True)

    def _carry_out(self, done: StartsDone) -> StartsDone:
        """What starts came to (pending_starts.py): the released tracked, the deferred
        back to the queue, the never-run filed (each alone: one failing costs only itself)."""
        for job in done.released:
            self._track(job)
        self._requeued.extend(done.handed_back)
        for end in done.never_ran:
            self.guard.step(f"reject:{end.job_id}", partial(self._never_ran, end))
        return done

    def executor_for(self, record: JobRecord) -> Executor:
        """The job's executor; ValueError (naming the ones there are) if this watcher has none."""
        return executor_for(self.executors, record)

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
        """Is this job running here, on its way to, or ended and not yet filed
        (``file_deferred``)? Recovery leaves it alone."""
        return (
            job_id in self._running
            or job_id in self._starts
            or any(end.job_id == job_id for end, _ in self._deferred)
        )

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

    # -- start (pending_starts.py) ------------------------------------------------
    def start(self, record: JobRecord) -> bool:
        """Start a queued job under its executor (pending_starts.py); False if its
        leases are taken elsewhere. Never raises."""
        return self._carry_out(self._starts.start(record)).held

    @property
    def busy(self) -> int:
        """Jobs holding a slot here: running, and started but not yet released."""
        return len(self._running) + len(self._starts)

    def active(self) -> list[JobRecord]:
        """The records of every job holding a slot here (for the scheduler)."""
        return [j.record for j in self._running.values()] + self._starts.records()

    def start_ahead(self, record: JobRecord) -> None:
        """Fork the next job's supervisor while every slot is busy (pending_starts.py)."""
        self._starts.start_ahead(record)

    def keep_ahead(self, queued: Mapping[str, JobRecord]) -> None:
        self._starts.keep_ahead(queued)

    def drop_ahead(self, job_id: str) -> None:
        self._starts.drop_ahead(job_id)

    def settle_starts(self, timeout: float = 0.0) -> None:
        """Release the starts that have reported, their records in one group commit."""
        self._carry_out(self._starts.settle(timeout))

    def finish_starts(self) -> None:
        """Settle every start on its way (before recovery looks at the runs, or at exit)."""
        self._carry_out(self._starts.finish())

    def waiting_on(self) -> list[Starting]:
        """What the loop's sleep should wake for besides its own pipe."""
        return self._starts.waiting_on()

    # -- monitor (ABORT markers and heartbeats: running_watch.py) -----------------
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
            ended = [e for e in polled.ended if not self._defer(e)]
            if len(ended) > 1:  # one group commit for this poll's terminal records
                self.ended_many(ended, failed)
            elif ended:
                self._settle(ended[0], failed)
            for job, reason in polled.stop:
                if not job.stop_sent and job.record.id in self._running:
                    self.request_stop(job, reason)
        watched = self._watch.watch_all(tick, failed)
        for job, holder in watched.handed_over:
            self.guard.step(f"watch:{job.record.id}", partial(self._handed_over, job, holder))
        for job, reason in watched.stop:
            if job.stop_sent or job.record.id not in self._running:
                continue
            if not self.guard.step(
                f"watch:{job.record.id}",
                partial(self.request_stop, job, reason),
                what=f"job={job.record.id} cannot be watched",
            ):
                failed.append(job)
        self._kept(failed)

    def _kept(self, failed: list[Running]) -> None:
        """Jobs whose end could not be filed (or that could not be looked at) now."""
        for job in failed:
            if run_dir_gone(job.run_dir):
                self._vanished(job)  # deleted (or swapped for a link) under it: filed lost once
            else:
                # ENOSPC, EIO, a bad file in its run directory …: keep the job and try
                # again next tick (logged once); the supervisor's exit.json is durable.
                self._io_errors += 1

    # -- an end filed after the turn's starts -------------------------------------
    def _defer(self, end: Ended) -> bool:
        """Leave ``end`` for :meth:`file_deferred`, after the turn's starts; True if so.

        A plain job that exited (no session, no workspace, no budget to count its
        spend: ``defer_filing``) frees its slot at once: out of the running set,
        its leases given back, so the next job is started, committed and
        released before this one's terminal record and prompt are filed (at one
        slot, the next job runs while this one is filed). Its exit.json is
        durable, so a crash before the filing files it at recovery, as ever.
        Nothing that reads the filed record decides a start: ``after``
        dependencies read job.json (still ``running``), a session's next turn
        and a budget are not deferred."""
        record = end.record
        if not (
            self.defer_filing
            and end.how is How.EXITED
            and record.session is None
            and record.workspace == "none"
            and end.job_id in self._running
        ):
            return False
        begun = self._begin_end(end)
        if begun is None:
            return True  # taken over: its leases are the new owner's now
        end, job = begun
        assert job is not None  # it was in the running set
        self.scale.release(end.record)
        self._deferred.append((end, job))
        return True

    def file_deferred(self) -> None:
        """File the ends :meth:`poll` left for after the turn's starts, in one group
        commit (their leases are back already); one that cannot be filed is kept in
        the running set and tried again next tick, as :meth:`ended_many` does."""
        deferred, self._deferred = self._deferred, []
        if not deferred:
            return
        failed: list[Running] = []
        self._file_begun(deferred, failed, leases_held=False)
        self._kept(failed)

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

    def taken(self, job: Running) -> bool:
        """Has another watcher taken this job over (we were stopped too long)? Then drop it.

        Checked before anything that writes the job's record: its heartbeat,
        finishing it, filing it lost. The new owner finishes it; we must not.
        """
        holder = taken_by(job.run_dir, job.record.owner, self.intake.ident.owner)
        if holder is None:
            return False
        self._handed_over(job, holder)
        return True

    def _handed_over(self, job: Running, holder: str) -> None:
        """Another watcher (``holder``) owns the job now: drop it, touching nothing."""
        self.executor_for(job.record).forget(job)
        self.ended(Ended(job.record, job.run_dir, How.HANDED_OVER, detail=holder))

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
        self.executor_for(job.record).forget(job, end=True)
        detail = (
            "its run directory was deleted while it ran (by the job?); "
            "its log and prompt went with it"
        )
        self.file_vanished(job.record, detail, leased=True)

    def file_vanished(self, record: JobRecord, detail: str, *, leased: bool) -> None:
        """File a job whose run directory is gone ``lost``, in a fresh run directory
        (endings.py), and give back its leases even if that filing fails."""
        run_dir = self.layout.run_dir(record.id)
        try:
            self.ended(Ended(record, run_dir, How.VANISHED, Reason.LOST, detail), leased=leased)
        except OSError as exc:
            log.error("job=%s cannot file it in %s: %s", record.id, run_dir, exc)
            if leased:
                self.scale.release(record)

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
        return self._end_filed(end, record, give_back=job is not None or leased)

    def ended_many(self, ends: Sequence[Ended], failed: list[Running]) -> None:
        """The ends one poll reported, handled as :meth:`ended` handles each, their
        terminal records filed with one group commit. A job whose filing failed
        is kept (in ``failed`` and the running set) and tried again next tick."""
        self._file_begun([b for end in ends if (b := self._begin_end(end)) is not None], failed)

    def _file_begun(
        self,
        begun: Sequence[tuple[Ended, Running | None]],
        failed: list[Running],
        *,
        leases_held: bool = True,
    ) -> None:
        """File ends already out of the running set, in one group commit; one whose
        filing failed is tracked again and added to ``failed`` (tried next tick).
        ``leases_held`` False: their leases were given back before (``Runner._defer``)."""
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
                self._after_filing(end, result, give_back=leases_held and job is not None),
                what=f"job={end.job_id} filed; its worktree or hooks failed",
            )

    def _after_filing(
        self, end: Ended, record: JobRecord, *, give_back: bool
    ) -> Callable[[], None]:
        def after() -> None:
            self._end_filed(end, record, give_back=give_back)

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

    def _end_filed(self, end: Ended, record: JobRecord, *, give_back: bool) -> JobRecord:
        """After the filing: its leases back (``give_back``: it still holds them), then
        a retry queued, or worktree and hooks."""
        if end.filed is not None:
            end.filed()  # filed: what served it may serve another (never signalled for it again)
        if give_back:
            self.scale.release(end.record)
        if not is_terminal(record.state):
            self._requeued.append(record)  # a retry
            return record
        if record.workspace in ("worktree", "folder") and record.workspace_path:
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
