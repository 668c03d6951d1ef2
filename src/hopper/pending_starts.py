"""Starts on their way: queued jobs begun under their executor, not yet released to run.

:meth:`Runner.start <hopper.runner.Runner.start>` hands each job here: its
workspace and launch are prepared, its executor starts it, and a start that
reports later (a supervisor still setting up) waits in this set until
:meth:`PendingStarts.settle` commits a turn's ``running`` records in one group
commit (store/ledger.py: durable before anything acts on them) and releases
each job to the runner. A start that fails costs its job, never the loop: the
job is handed back to the runner's one ended path, its leases with it.

Nothing here calls back into the runner: each call returns what happened
(:class:`StartsDone`: released to run, never ran, back to the queue), and the
runner carries it out.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from hopper import prepare
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import StartFailed
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.retry import StartCause, start_retry
from hopper.core.states import Reason
from hopper.executors.calls import Lane
from hopper.executors.protocol import (
    Deferred,
    Ended,
    Executor,
    How,
    Launch,
    Report,
    Start,
    Starting,
    executor_for,
)
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.proc.forkclient import Lost
from hopper.proc.protocol import lease_break_time
from hopper.running import Running
from hopper.scaleout import ScaleOut
from hopper.store import ledger
from hopper.store.jobfile import EXIT_FILE
from hopper.store.layout import Layout, run_dir_gone
from hopper.workspace import WorkspaceFailed
from hopper.workspace_start import WorkspaceStart

log = logging.getLogger(__name__)

AHEAD_HOLD_MIN = 2.0  # seconds: a shorter hold would begin a start ahead afresh too often
AHEAD_MAX = 3  # starts ahead at most, however many slots


def aheads(max_parallel: int) -> int:
    """How many starts ahead a watcher of ``max_parallel`` slots keeps: one per slot,
    at most AHEAD_MAX. At one slot the job after the running one; at four, when
    two or three jobs end in one turn, each freed slot's next job has its
    supervisor forked already (a one-shot supervisor forked on the spot costs
    the fork and its teardown: docs/performance.md, session 17)."""
    return max(1, min(max_parallel, AHEAD_MAX))


def describe(exc: BaseException) -> str:
    """The exception as a detail says it ("[Errno 0]" dropped: no errno to show)."""
    if isinstance(exc, OSError) and not exc.errno and exc.strerror:
        return exc.strerror
    return str(exc)


def ahead_hold(lease_break: float | None, poll_interval: float) -> float | None:
    """How long a start ahead may wait before it is withdrawn and begun afresh, so
    that its job can wait at a spawned gate (proc/gate.py), which the kernel opens
    after ``lease_break`` seconds (its lease-break-time); None: it waits as long as
    the slots stay busy, at a forked gate (~1.4 ms slower from the release to the
    job's exec: the forked supervisor's memory is torn down in its exec).

    Half the lease-break-time (22.5 s of the default 45): the loop turns at least
    every ``poll_interval`` while jobs are queued, and a loop held up for longer
    than the other half still finds the start ahead too old and begins the job
    afresh (:meth:`PendingStarts._take_ahead`). Too short a time (a
    lease-break-time under a few of the loop's polls) keeps the forked gate."""
    if lease_break is None:
        return None
    hold = lease_break / 2
    return hold if hold >= max(AHEAD_HOLD_MIN, 4 * poll_interval) else None


def cause_of(exc: BaseException) -> StartCause:
    """What core/retry.py needs to know of a start's exception."""
    if isinstance(exc, Lost):
        return StartCause(None, lost_server=True)
    if isinstance(exc, OSError):
        return StartCause(exc.errno)
    return StartCause(None, bug=True)


@dataclass
class StartsDone:
    """What starts came to in one call, for the runner to carry out, in this order."""

    released: list[Running] = field(default_factory=list)  # it runs: the runner tracks it
    never_ran: list[Ended] = field(default_factory=list)  # filed by the runner, leased
    handed_back: list[JobRecord] = field(default_factory=list)  # back to the queue
    held: bool = True  # False: the job's leases are taken elsewhere (it stays queued)

    def __bool__(self) -> bool:
        return bool(self.released or self.never_ran or self.handed_back)


@dataclass
class PendingStarts:
    layout: Layout
    config: Config
    intake: Intake
    scale: ScaleOut  # the leases a start holds
    guard: LoopGuard  # one bad job never stops the loop
    executors: Mapping[str, Executor]
    clock: Clock
    _starting: dict[str, Starting] = field(default_factory=dict)  # begun, not yet released
    lane: Lane = field(default_factory=lambda: Lane("workspace"))  # git worktree add, off the loop
    # Begun for the next jobs while every slot is busy, by job id, in the order begun,
    # each with its hold's end (monotonic; past it, that start ahead is begun afresh).
    _aheads: dict[str, tuple[Starting, float | None]] = field(default_factory=dict)
    _no_ahead: str | None = None  # the job whose start ahead failed: left to its real start
    _tries: dict[str, int] = field(default_factory=dict)  # job id -> failed starts in a row
    _out: StartsDone = field(default_factory=StartsDone)  # what the call under way came to
    _hold: float | None = field(init=False)  # ahead_hold's, for this machine and config

    def __post_init__(self) -> None:
        self._hold = ahead_hold(lease_break_time(), self.config.poll_interval)

    def __len__(self) -> int:
        return len(self._starting)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._starting

    def records(self) -> list[JobRecord]:
        return [s.record for s in self._starting.values()]

    def _taken(self) -> StartsDone:
        """What the call under way came to; the next one starts afresh."""
        out, self._out = self._out, StartsDone()
        return out

    def start(self, record: JobRecord) -> StartsDone:
        """Start a queued job under its executor (``held`` False: its leases are
        taken elsewhere).

        Whatever happens next (it runs, it waits for its executor, it is
        rejected) is this method's to settle, in what it returns: it never raises.
        """
        until = self._aheads.get(record.id, (None, None))[1]
        ahead = self._take_ahead(record)
        if not self.scale.acquire(record):
            if ahead is not None:  # kept for when a slot is ours
                self._aheads[record.id] = (ahead, until)
            return StartsDone(held=False)
        if ahead is not None:
            self._starting[record.id] = ahead  # its supervisor is (being) forked: settle goes on
            self.scale.starting.add(record.id)
            return self._taken()
        try:
            self._start(record)
        except Exception as exc:  # costs this job, never the loop
            if self._claim_written(record):
                self._start_failed(record, exc)
        return self._taken()

    def _claim_written(self, record: JobRecord, begun: Start | None = None) -> bool:
        """The job's admission.json and queued record written, if they were still to
        be (intake.py's write behind; else nothing to do): True. False: they could
        not be, so the job is dropped, neither queued nor started (its start, if
        ``begun``, withdrawn; its leases given back), and recovery completes its
        claim later, as after a crash at the claim."""
        if self.intake.write_behind(record.id) is None:
            return True
        if isinstance(begun, Starting):
            self.guard.step(f"withdraw:{record.id}", begun.withdraw)
        self.scale.release(record)
        return False

    # -- a start ahead: the next job's supervisor forked while the slots are busy ----------
    def start_ahead(self, record: JobRecord) -> None:
        """Begin ``record``'s start while every slot is busy, holding no slot and no lease.

        Its workspace-free launch is prepared and its supervisor forked with the
        job gated (proc/spawn.py), so when a slot frees and the scheduler picks
        this job, :meth:`start` has only the ``running`` commit and the release
        left. Nothing is recorded: the job stays queued, and a crash now is the
        crash point ``start.after_spawn`` (the supervisor, seeing EOF, kills the
        gated job; recovery ends stale supervisors and takes the job as queued).
        Only jobs without a workspace (a worktree is real work) whose executor
        can begin a start that records and makes nothing (``Launch.ahead``; the
        others answer Deferred: the local one can, a submission or an engine
        call cannot); at most :func:`aheads` jobs ahead at a time; a start ahead
        that fails is left to the job's real start, which files it.
        """
        if (
            len(self._aheads) >= aheads(self.config.max_parallel)
            or record.id in self._aheads
            or record.id in self._starting
            or record.id == self._no_ahead
        ):
            return
        if record.workspace != "none":
            return
        try:
            executor = executor_for(self.executors, record)
        except ValueError:
            return  # no such executor in this watcher: its real start says so
        self._no_ahead = record.id  # until it is begun: a failure is not retried every turn
        run_dir = self.layout.run_dir(record.id)
        launch = self._launch(record, run_dir)
        if isinstance(launch, Ended):
            return
        hold = self._hold
        try:
            result = executor.start(replace(launch, ahead=True, held_for=hold))
        except Exception:  # left to the job's real start, which judges it
            return
        if isinstance(result, Starting):
            self._no_ahead = None
            until = None if hold is None else self.clock.monotonic() + hold
            self._aheads[record.id] = (result, until)

    def keep_ahead(self, queued: Mapping[str, JobRecord]) -> None:
        """Withdraw each start ahead unless its job is still queued here, unchanged,
        and it has waited less than its hold (:func:`ahead_hold`; it is then begun
        afresh, by the caller's next :meth:`start_ahead`)."""
        for ahead, until in list(self._aheads.values()):
            if queued.get(ahead.record.id) != ahead.record or self._expired(until):
                self.drop_ahead(ahead.record.id)

    def _expired(self, until: float | None) -> bool:
        """A start ahead has waited its hold out: its spawned gate may give way soon."""
        return until is not None and self.clock.monotonic() >= until

    def drop_ahead(self, job_id: str) -> None:
        """``job_id`` leaves the queue another way (aborted, failed, taken over):
        withdraw its start ahead, if it has one, before anything else touches its run."""
        ahead, _ = self._aheads.pop(job_id, (None, None))
        if ahead is not None:
            self.guard.step(f"withdraw:{job_id}", ahead.withdraw)

    def _take_ahead(self, record: JobRecord) -> Starting | None:
        """The start ahead for ``record`` if there is one begun from this very record;
        a start ahead for an older version of it (its priority changed) is withdrawn."""
        ahead, until = self._aheads.pop(record.id, (None, None))
        if ahead is None:
            return None
        if ahead.record != record or self._expired(until):
            self.guard.step(f"withdraw:{record.id}", ahead.withdraw)
            return None
        return ahead

    def _start_failed(self, record: JobRecord, exc: Exception) -> None:
        """A start that raised before its job ran: the one policy for what that costs.

        A cause that passes (a full disk, the process or file limit, a lost fork
        server: core/retry.py) leaves the job queued, its start tried again after
        a backoff; another (a program not found, a bad spec, a bug) files it
        ``spawn_failed``; a job whose run directory was deleted is filed ``lost``
        (runner.py). Its leases are given back either way.
        """
        run_dir = self.layout.run_dir(record.id)
        key = f"start:{record.id}"
        if run_dir_gone(run_dir):
            self._tries.pop(record.id, None)
            self._reject(record, run_dir, f"could not start: {describe(exc)}")
            return
        tries = self._tries.get(record.id, 0) + 1
        delay = start_retry(cause_of(exc), tries, self.config.retry_backoff)
        if delay is not None:
            self._tries[record.id] = tries
            self.guard.report(key, exc, what=f"job={record.id} could not start (try {tries})")
            self.guard.step(f"requeue:{record.id}", self._try_again(record, exc, tries, delay))
            return
        self._tries.pop(record.id, None)
        self.guard.forget(key)
        self.guard.forget(f"requeue:{record.id}")
        bug = "" if isinstance(exc, OSError) else " (a bug in hopper: please report it)"
        after = f" (try {tries})" if tries > 1 else ""
        log.error(
            "job=%s could not start%s: %s; filing it %s",
            record.id,
            after,
            describe(exc),
            Reason.SPAWN_FAILED,
            exc_info=exc if bug else None,
        )
        self._reject(record, run_dir, f"could not start{after}: {describe(exc)}{bug}")

    def _reject(self, record: JobRecord, run_dir: Path, detail: str) -> None:
        self._out.never_ran.append(
            Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, detail)
        )

    def _try_again(
        self, record: JobRecord, exc: Exception, tries: int, delay: float
    ) -> Callable[[], None]:
        """Back to the queue, its start due again in ``delay`` seconds; its record
        says so (``start_failed``) if the disk lets it, else only the queue knows."""

        def requeue() -> None:
            queued = record  # whatever fails below, the job goes back to the queue
            try:
                self.scale.release(record)
                now = self.intake.clock.now()
                why = describe(exc)
                fact = StartFailed(now, why, tries, delay, now + timedelta(seconds=delay))
                step = lifecycle.start_failed(record, fact)
                queued = step.record  # if the same full disk refuses it, the next try writes it
                queued = ledger.commit(self.layout.run_dir(record.id), step, durable=False)
                log.info(
                    "job=%s state=queued start try %d failed; again in %gs",
                    record.id,
                    tries,
                    delay,
                )
            finally:
                self._out.handed_back.append(queued)

        return requeue

    def _started(self, job: Running) -> None:
        """Released to run: its failed starts, if any, are behind it."""
        if self._tries.pop(job.record.id, None) is not None:
            self.guard.clear(f"start:{job.record.id}")
            self.guard.forget(f"requeue:{job.record.id}")
        self._out.released.append(job)

    def _start(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        behind = executor_for(self.executors, record).begins_unrecorded
        if (not behind or record.workspace == "worktree") and not self._claim_written(record):
            return  # its queued record first: the executor may record the job at start()
        if record.workspace == "worktree":  # git may take long: off the loop
            layout = self.layout
            call = self.lane.submit(lambda: prepare.with_workspace(layout, record))
            self._starting[record.id] = WorkspaceStart(record, run_dir, call, self._begin)
            self.scale.starting.add(record.id)
            return
        result = self._begin(record, run_dir, workspace=True)
        # Written behind the begin: while the job's supervisor forks (a claimed job
        # started in its claim's turn), not before it, off the start's path.
        if not self._claim_written(record, result):
            return
        if isinstance(result, Running):
            self._started(result)
        elif isinstance(result, Starting):
            self._starting[record.id] = result  # finished by settle
            self.scale.starting.add(record.id)  # its lease is in use, though it is queued
        elif isinstance(result, Deferred):
            self.scale.release(record)
            self._out.handed_back.append(result.record)
        else:
            self._out.never_ran.append(result)

    def _begin(self, record: JobRecord, run_dir: Path, *, workspace: bool = False) -> Start:
        """Prepare the launch and hand it to the executor (``workspace``: make the
        workspace first; a worktree's is made on the lane before, WorkspaceStart)."""
        launch = self._launch(record, run_dir, workspace=workspace)
        if isinstance(launch, Ended):
            return launch
        if record.id in self._tries:  # an abandoned start's supervisor may have left one
            (run_dir / EXIT_FILE).unlink(missing_ok=True)
        return executor_for(self.executors, record).start(launch)

    def _launch(
        self, record: JobRecord, run_dir: Path, *, workspace: bool = True
    ) -> Launch | Ended:
        try:
            if workspace:
                record = prepare.with_workspace(self.layout, record)
        except WorkspaceFailed as exc:
            why = f"{record.inbox_path}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.WORKSPACE_FAILED, why)
        try:
            ready = prepare.prepare(self.layout, self.config, self.intake.agents, record, run_dir)
        except BadPrompt as exc:
            why = exc.describe(record.inbox_path)
            return Ended(record, run_dir, How.REJECTED, Reason.BAD_PROMPT, why)
        except prepare.AdmissionLost as exc:  # the job as admitted is gone: so is the job
            return Ended(record, run_dir, How.REJECTED, Reason.LOST, exc.detail)
        return Launch(record, run_dir, ready.prep, ready.workdir, ready.env, ready.job_vars)

    def settle(self, timeout: float = 0.0) -> StartsDone:
        """Finish the starts whose executors have reported (or whose deadline has
        passed): their ``running`` records are committed in one group commit
        (store/ledger.py: durable before anything acts on them), then each job
        is released. Waits up to ``timeout`` for the first report."""
        if self._starting:
            self._settle(timeout)
        return self._taken()

    def _settle(self, timeout: float) -> None:
        ready: list[Starting] = list(self._starting.values())
        try:
            ready = select.select(ready, [], [], timeout)[0]
        except (OSError, ValueError):
            pass  # a descriptor gone bad: collect them all, each fails on its own
        mono = time.monotonic()  # real time: the executor's deadline is for real processes
        ready += [s for s in self._starting.values() if s.deadline <= mono and s not in ready]
        entries: list[tuple[Starting, ledger.Entry]] = []
        done: list[str] = []
        for start in ready:
            del self._starting[start.record.id]
            report = self._report(start)
            if isinstance(report, Running):  # started at once (an executor that needs no gate)
                done.append(start.record.id)
                self._started(report)
                continue
            if isinstance(report, Starting):
                self._starting[start.record.id] = report  # its next stage: settled later
                continue
            done.append(start.record.id)
            if isinstance(report, Ended):
                self._out.never_ran.append(report)
            elif isinstance(report, Deferred):
                self.scale.release(report.record)
                self._out.handed_back.append(report.record)
            elif report is not None:
                entries.append((start, ledger.Entry(start.run_dir, report)))
        try:
            self._commit_starts(entries)
        finally:
            self.scale.starting.difference_update(done)

    def _commit_starts(self, entries: list[tuple[Starting, ledger.Entry]]) -> None:
        if not entries:
            return
        failed = ledger.commit_batch([e for _, e in entries], crash="start.after_record")
        errors = {id(f.entry): f.error for f in failed}
        for start, entry in entries:
            error = errors.get(id(entry))
            if error is None:
                self._started(start.release(entry.step.record))
            else:
                start.abandon()
                self._start_failed(start.record, error)

    def _report(self, start: Starting) -> Report | None:
        """A start's report; None if collecting it raised (the job is then rejected)."""
        try:
            return start.report()
        except Exception as exc:  # costs this job, never the loop
            start.abandon()
            self._start_failed(start.record, exc)
            return None

    def finish(self) -> StartsDone:
        """Settle every start on its way (before recovery looks at the runs, or at exit);
        every start ahead is withdrawn (its job stays queued)."""
        for job_id in list(self._aheads):
            self.drop_ahead(job_id)
        for start in self._starting.values():
            start.hurry()  # one waiting on an engine goes back to the queue
        while self._starting:
            self._settle(timeout=0.05)
        return self._taken()

    def close(self) -> None:
        """The watcher is going away (after :meth:`finish`): no more git on the lane."""
        self.lane.close()

    def waiting_on(self) -> list[Starting]:
        """What the loop's sleep should wake for besides its own pipe."""
        return list(self._starting.values())
