"""The Slurm executor: submit held, record, release; one query per tick; settle.

Theory of operation. :meth:`SlurmExecutor.start` writes the job's argv and the
batch wrapper (:func:`hopper.executors.slurm.write_job_wrapper`) into the run
directory, submits it *held*, writes ``running`` with ``slurm_job_id`` to
job.json, and only then releases it, so no Slurm job runs unrecorded (the
local supervisor's gate, in Slurm's terms). :meth:`SlurmExecutor.poll` serves every
Slurm job of the watcher at once: each tick it stats the wrapper's
``slurm-exit.json`` and checks hopper's own wall clock (ABORT and heartbeats
are the shell's, as for every executor); every
``[slurm] poll_interval`` (sooner once a wrapper has written its exit record)
it asks the controller about all of them with one :func:`query`, and settles
each finished one from Slurm's record via the pure
:func:`hopper.core.slurm_parse.settle` (the wrapper's record when Slurm has
forgotten the job, else ``lost``). Each end comes back as an ``Ended``,
which the runner handles as for every executor (retry policy, finalize,
processed/, hooks).

A controller that cannot be asked is never read as "lost": the watcher logs
it and asks again next time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from hopper.config import SlurmConfig
from hopper.core import lifecycle
from hopper.core.lifecycle import Started
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.slurm_parse import TERMINAL, SlurmExitFile, SlurmOutcome, SlurmState, settle
from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Context, Deferred, Ended, How, Launch, Polled, Start, Tick
from hopper.executors.slurm import (
    ACTIVE_HELD_REASON,
    EXIT_STATUS_FILE,
    SlurmError,
    SlurmUnavailable,
    cancel,
    query,
    release,
    sbatch_argv,
    submit,
    write_job_wrapper,
)
from hopper.executors.slurm_view import StateView, read_exit_file
from hopper.faults import crash_point
from hopper.running import Running, adopt
from hopper.store import ledger
from hopper.store.jobfile import LOG_FILE

log = logging.getLogger(__name__)

FAST_QUERY = 0.5  # seconds between queries while a wrapper has recorded an exit
RETRY_SUBMIT = 5.0  # seconds before a submit is tried again when Slurm did not answer
WARN_EVERY = 60.0  # seconds between "Slurm unavailable" log lines


def _when(text: str, default: datetime) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return default


@dataclass
class Track:
    """What the watcher remembers about one Slurm job between ticks (not in job.json)."""

    running_since: float | None = None  # monotonic, when first seen RUNNING
    last_state: str = ""
    cancel_pending: bool = False


class SlurmExecutor:
    name = "slurm"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tracks: dict[str, Track] = {}
        self._next_query = 0.0
        self._last_query = 0.0
        self._next_warning = 0.0
        self._uncertain: set[str] = set()  # ids whose sbatch did not answer
        self.view = StateView()  # recovery's listing, fresh for each reconcile pass

    @property
    def config(self) -> SlurmConfig:
        return self.ctx.config.slurm

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    # -- start ----------------------------------------------------------------------
    def start(self, launch: Launch) -> Start:
        record, run_dir, prep, workdir = launch.record, launch.run_dir, launch.prep, launch.workdir
        if record.id in self._uncertain:
            # an earlier sbatch may have gone through: cancel it before submitting again
            if not self.cancel_unrecorded(record.id, StateView()):
                return self._later(record, run_dir, "Slurm did not answer")
            self._uncertain.discard(record.id)
        try:
            wrapper = write_job_wrapper(run_dir, prep.argv, workdir)
            argv = sbatch_argv(
                record.id,
                wrapper,
                workdir,
                run_dir / LOG_FILE,
                record.timeout_seconds,
                record.slurm_resources,
                hold=True,
                extra=self.config.sbatch_extra(),
            )
        except ValueError as exc:
            why = f"cannot submit to Slurm: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        try:
            slurm_id = submit(argv, launch.env)
        except SlurmUnavailable as exc:
            self._uncertain.add(record.id)
            return self._later(record, run_dir, str(exc))
        except SlurmError as exc:
            why = f"Slurm refused the job: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        crash_point("slurm.after_submit")
        clock = self.ctx.clock
        fact = Started(
            at=clock.now(),
            owner=self.ctx.owner,
            workdir=str(workdir),
            argv0=prep.argv[0],
            slurm_job_id=slurm_id,
        )
        running = ledger.commit(
            run_dir, lifecycle.started(record, fact), crash="slurm.after_record"
        )
        try:
            release(slurm_id)
        except SlurmError as exc:  # the poll releases it when it sees it still held
            log.warning("job=%s slurm=%s release failed: %s (will retry)", record.id, slurm_id, exc)
        self.tracks[record.id] = Track()
        log.info("job=%s state=queued->running slurm_job_id=%s", record.id, slurm_id)
        return Running(
            running, run_dir, None, clock.monotonic() + self.ctx.config.heartbeat_interval
        )

    def _later(self, record: JobRecord, run_dir: Path, why: str) -> Deferred:
        """Slurm did not answer: stay queued and try again shortly."""
        now = self.ctx.clock.now()
        fact = lifecycle.Deferred(
            at=now,
            not_before=now + timedelta(seconds=RETRY_SUBMIT),
            why=why,
            delay_seconds=RETRY_SUBMIT,
        )
        queued = ledger.commit(run_dir, lifecycle.deferred(record, fact))
        log.warning("job=%s cannot submit to Slurm: %s (retrying)", record.id, why)
        return Deferred(queued)

    def cancel_unrecorded(self, job_id: str, view: StateView) -> bool:
        """Cancel live Slurm jobs named after ``job_id`` that job.json never recorded.

        False if Slurm could not be asked (then the caller must not submit again).
        """
        named = view.named(job_id)
        if named is None:
            return False
        for job in named:
            if job.state in TERMINAL:  # finished: nothing to cancel
                continue
            try:
                cancel(job.slurm_id)
            except SlurmError as exc:
                log.warning("job=%s cannot cancel Slurm job %s: %s", job_id, job.slurm_id, exc)
                return False
            ledger.note(
                self.ctx.layout.run_dir(job_id),
                "slurm_stray_cancelled",
                self.ctx.clock.now(),
                slurm_job_id=job.slurm_id,
                why="submitted, but never recorded in job.json (watcher crash)",
            )
            log.info("job=%s cancelled unrecorded Slurm job %s", job_id, job.slurm_id)
        return True

    # -- monitor --------------------------------------------------------------------
    def cancel(self, job: Running, reason: Reason) -> None:
        """scancel the job (its record says why); retried each tick on failure.

        Slurm escalates to SIGKILL after KillWait.
        """
        track = self.tracks.setdefault(job.record.id, Track())
        sid = job.record.slurm_job_id
        assert sid is not None
        try:
            cancel(sid)
            track.cancel_pending = False
        except (SlurmError, ValueError) as exc:
            track.cancel_pending = True
            log.warning("job=%s scancel %s failed: %s (will retry)", job.record.id, sid, exc)

    def abandon(self, job: Running) -> None:
        self.cancel(job, Reason.LOST)
        self.tracks.pop(job.record.id, None)

    def forget(self, job: Running) -> None:
        self.tracks.pop(job.record.id, None)

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        """One tick over every running Slurm job: hopper's own clock, then (when due) one query."""
        polled = Polled()
        mono = tick.monotonic
        exited = False
        for job in jobs:
            try:
                exited = self._check(job, mono, polled) or exited
            except OSError as exc:
                polled.failed.append(job)
                log.error("job=%s cannot update its files: %s (retrying)", job.record.id, exc)
        due = mono >= self._next_query or (exited and mono >= self._last_query + FAST_QUERY)
        if not due:
            return polled
        self._last_query = mono
        self._next_query = mono + self.config.poll_interval
        ids = [j.record.slurm_job_id for j in jobs if j.record.slurm_job_id is not None]
        try:
            states = query(ids)
        except SlurmError as exc:
            if mono >= self._next_warning:
                self._next_warning = mono + WARN_EVERY
                log.warning("cannot ask Slurm about %d jobs: %s (will retry)", len(ids), exc)
            return polled
        for job in jobs:
            sid = job.record.slurm_job_id
            assert sid is not None
            try:
                ended = self.settle_state(job, states[sid])
                if ended is not None:
                    polled.ended.append(ended)
                else:
                    self._active(job, states[sid], mono)
            except OSError as exc:
                polled.failed.append(job)
                log.error("job=%s cannot update its files: %s (retrying)", job.record.id, exc)
        return polled

    def _check(self, job: Running, mono: float, polled: Polled) -> bool:
        """A pending scancel and hopper's own wall clock; True if the wrapper recorded an exit."""
        track = self.tracks.setdefault(job.record.id, Track())
        if track.cancel_pending:
            self.cancel(job, job.record.stop_requested or Reason.ABORTED)
        timeout = job.record.timeout_seconds
        if (
            not job.stop_sent
            and timeout is not None
            and track.running_since is not None
            and mono - track.running_since >= timeout
        ):
            polled.stop.append((job, Reason.TIMEOUT))
        return (job.run_dir / EXIT_STATUS_FILE).exists()

    def _active(self, job: Running, state: SlurmState, mono: float) -> None:
        track = self.tracks.setdefault(job.record.id, Track())
        slurm_job = state.job
        assert slurm_job is not None
        now = self.ctx.clock.now()
        if slurm_job.state != track.last_state:
            track.last_state = slurm_job.state
            ledger.note(
                job.run_dir,
                "slurm_state",
                now,
                slurm_job_id=state.slurm_id,
                state=slurm_job.state,
                slurm_reason=slurm_job.reason,
            )
        if slurm_job.state == "RUNNING" and track.running_since is None:
            track.running_since = mono
        if (
            slurm_job.state == "PENDING"
            and slurm_job.reason == ACTIVE_HELD_REASON
            and not job.stop_sent
        ):
            try:  # recorded but never released (a crash or a failed release)
                release(state.slurm_id)
                ledger.note(job.run_dir, "released", now, slurm_job_id=state.slurm_id)
            except (SlurmError, ValueError) as exc:
                log.warning("job=%s release failed: %s (will retry)", job.record.id, exc)

    # -- finish ---------------------------------------------------------------------
    def settle_state(
        self, job: Running, state: SlurmState, exit_file: SlurmExitFile | None = None
    ) -> Ended | None:
        """The job's end if it has ended; None while Slurm still runs it."""
        sid = job.record.slurm_job_id
        assert sid is not None
        if exit_file is None and not state.found:
            exit_file = read_exit_file(job.run_dir, sid)
        outcome = settle(state, exit_file, job.record.stop_requested)
        if outcome is None:
            return None
        if exit_file is None:
            exit_file = read_exit_file(job.run_dir, sid)
        return self._finish(job, state, outcome, exit_file)

    def _finish(
        self,
        job: Running,
        state: SlurmState,
        outcome: SlurmOutcome,
        exit_file: SlurmExitFile | None,
    ) -> Ended:
        self.tracks.pop(job.record.id, None)
        holder = self.ctx.holder(job)
        if holder is not None:
            return Ended(job.record, job.run_dir, How.HANDED_OVER, detail=holder)
        now = self.ctx.clock.now()
        ledger.note(
            job.run_dir,
            "exited",
            now,
            executor="slurm",
            slurm_job_id=state.slurm_id,
            slurm_state=state.job.state if state.job else "NOT_FOUND",
            slurm_reason=state.job.reason if state.job else None,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            from_exit_file=not state.found and exit_file is not None,
        )
        if outcome.reason is Reason.LOST and not state.found:
            ledger.note(job.run_dir, "lost", now, slurm_job_id=state.slurm_id)
            return Ended(job.record, job.run_dir, How.LOST, outcome.reason, outcome.detail)
        finished = _when(exit_file.finished_at, now) if exit_file else now
        status = ExitStatus(
            started=True,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            finished_at=finished,
        )
        return Ended(job.record, job.run_dir, How.EXITED, outcome.reason, outcome.detail, status)

    # -- after a restart ------------------------------------------------------------
    def begin_recovery(self) -> None:
        self.view = StateView()  # asks Slurm once, only if a record needs it

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        """A recorded Slurm job that may be ours: add Slurm's view and the wrapper's record."""
        record = snap.record
        if (
            record is None
            or record.slurm_job_id is None
            or record.state is not JobState.RUNNING
            or snap.owner_alive
        ):
            return snap
        return replace(
            snap,
            slurm=self.view.state(record.slurm_job_id),
            slurm_exit=read_exit_file(run_dir, record.slurm_job_id),
        )

    def clear_strays(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        return self.cancel_unrecorded(record.id, self.view)

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return adopt(record, run_dir, self.ctx)

    def settle(self, job: Running, snap: RunSnapshot, lost: bool) -> Ended | None:
        if snap.slurm is None:
            return None  # Slurm did not answer: asked again at the next pass
        return self.settle_state(job, snap.slurm, snap.slurm_exit)
