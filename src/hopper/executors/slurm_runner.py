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
from functools import partial
from pathlib import Path

from hopper.config import SlurmConfig
from hopper.core import lifecycle
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.slurm_parse import TERMINAL, SlurmExitFile, SlurmOutcome, SlurmState, settle
from hopper.core.states import JobState, Reason
from hopper.executors.calls import Call, Lane, wait_alive
from hopper.executors.protocol import Context, Deferred, Ended, How, Launch, Polled, Start, Tick
from hopper.executors.slurm import (
    ACTIVE_HELD_REASON,
    EXIT_STATUS_FILE,
    SlurmError,
    cancel,
    query,
    release,
    sbatch_argv,
    write_job_wrapper,
)
from hopper.executors.slurm_start import SlurmStart, submit_work
from hopper.executors.slurm_view import StateView, read_exit_file
from hopper.prepare import in_scratch, scratch_dir
from hopper.running import Running, adopt
from hopper.store import ledger
from hopper.store.atomic import write_files
from hopper.store.jobfile import LOG_FILE

log = logging.getLogger(__name__)

FAST_QUERY = 0.5  # seconds between queries while a wrapper has recorded an exit
RETRY_SUBMIT = 5.0  # seconds before a submit is tried again when Slurm did not answer
WARN_EVERY = 60.0  # seconds between "Slurm unavailable" log lines
FILES = (EXIT_STATUS_FILE,)  # the wrapper's record: kept under a numbered name on a retry


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
    cancel_pending: bool = False  # asked to stop; Slurm has not accepted a scancel yet
    cancelling: Call[bool] | None = None  # scancel on its way (the lane)
    releasing: Call[None] | None = None  # scontrol release on its way
    note_release: bool = False  # record a "released" event when it answers


class SlurmExecutor:
    name = "slurm"
    begins_unrecorded = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tracks: dict[str, Track] = {}
        self._next_query = 0.0
        self._last_query = 0.0
        self._next_warning = 0.0
        self.uncertain: set[str] = set()  # ids whose sbatch did not answer
        self.lane = Lane("slurm", wake=ctx.wake)  # every Slurm call, off the loop
        self._query: Call[dict[str, SlurmState]] | None = None  # squeue on its way
        self._loose: list[Call[bool]] = []  # scancels nobody waits for (abandoned starts)

    @property
    def config(self) -> SlurmConfig:
        return self.ctx.config.slurm

    def _view(self) -> StateView:
        return StateView(lane=self.lane, keepalive=self.ctx.keepalive, timeout=self._timeout)

    @property
    def _timeout(self) -> float:
        return self.config.command_timeout

    def open(self) -> None:
        return None

    def close(self) -> None:
        self.lane.close()  # a hung sbatch / squeue is killed, not waited for

    # -- start ----------------------------------------------------------------------
    def start(self, launch: Launch) -> Start:
        """The wrapper written here; sbatch on the lane (slurm_start.py): the loop goes on."""
        record, run_dir, prep, workdir = launch.record, launch.run_dir, launch.prep, launch.workdir
        if launch.ahead:
            return Deferred(record)  # a submission is real work: made with a slot only
        try:
            write_files(run_dir, prep.files)
            if in_scratch(workdir, run_dir):  # the wrapper enters it on the compute node
                scratch_dir(run_dir)
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
        uncertain = record.id in self.uncertain
        work = submit_work(record.id, argv, launch.env, uncertain, self.lane, self._timeout)
        return SlurmStart(self, launch, self.lane.submit(work), self._timeout)

    def later(self, record: JobRecord, run_dir: Path, why: str) -> Deferred:
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

    def release_later(self, record: JobRecord, slurm_id: str, *, note: bool) -> None:
        """``scontrol release`` on the lane; its answer is taken at the job's next tick."""
        track = self.tracks.setdefault(record.id, Track())
        if track.releasing is not None:
            return
        lane, timeout = self.lane, self._timeout
        track.releasing = lane.submit(lambda: release(slurm_id, None, timeout, lane.run))
        track.note_release = note

    def cancel_later(self, slurm_id: str) -> None:
        """scancel on the lane, for a job nobody tracks (a start never recorded)."""
        lane, timeout = self.lane, self._timeout
        self._loose = [c for c in self._loose if not c.done()]
        self._loose.append(lane.submit(lambda: cancel(slurm_id, None, None, timeout, lane.run)))

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
            work = partial(cancel, job.slurm_id, None, None, self._timeout, self.lane.run)
            try:  # recovery waits for it, with keep-alives (heartbeat, WATCHDOG=1)
                wait_alive(self.lane.submit(work), self.ctx.keepalive)
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
        """scancel the job (its record says why), on the lane; its answer is taken at
        the job's next tick, and a failed one tried again.

        Slurm escalates to SIGKILL after KillWait.
        """
        track = self.tracks.setdefault(job.record.id, Track())
        sid = job.record.slurm_job_id
        assert sid is not None
        track.cancel_pending = True  # until Slurm accepted it
        if track.cancelling is None:
            lane, timeout = self.lane, self._timeout
            track.cancelling = lane.submit(lambda: cancel(sid, None, None, timeout, lane.run))

    def _answers(self, job: Running, track: Track) -> None:
        """The answers of this job's scancel and scontrol release, if they came."""
        call = track.cancelling
        if call is not None and call.done():
            track.cancelling = None
            try:
                call.result()
                track.cancel_pending = False
            except (SlurmError, ValueError) as exc:
                sid = job.record.slurm_job_id
                log.warning("job=%s scancel %s failed: %s (will retry)", job.record.id, sid, exc)
        released = track.releasing
        if released is not None and released.done():
            track.releasing = None
            try:
                released.result()
            except (SlurmError, ValueError) as exc:  # the poll releases it when it sees it held
                log.warning("job=%s release failed: %s (will retry)", job.record.id, exc)
            else:
                if track.note_release:
                    ledger.note(
                        job.run_dir,
                        "released",
                        self.ctx.clock.now(),
                        slurm_job_id=job.record.slurm_job_id,
                    )

    def forget(self, job: Running, *, end: bool = False) -> None:
        if end:
            self.cancel(job, Reason.LOST)
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
        self._collect(jobs, mono, polled)
        due = mono >= self._next_query or (exited and mono >= self._last_query + FAST_QUERY)
        if due and self._query is None:
            self._last_query = mono
            self._next_query = mono + self.config.poll_interval
            ids = [j.record.slurm_job_id for j in jobs if j.record.slurm_job_id is not None]
            lane, timeout = self.lane, self._timeout
            self._query = lane.submit(lambda: query(ids, None, timeout, lane.run))
        return polled

    def _collect(self, jobs: Sequence[Running], mono: float, polled: Polled) -> None:
        """The answer of the squeue on its way, if it came: settle what it says ended."""
        call = self._query
        if call is None or not call.done():
            return
        self._query = None
        try:
            states = call.result()
        except SlurmError as exc:
            if mono >= self._next_warning:
                self._next_warning = mono + WARN_EVERY
                log.warning("cannot ask Slurm about %d jobs: %s (will retry)", len(jobs), exc)
            return
        for job in jobs:
            sid = job.record.slurm_job_id
            if sid is None or sid not in states:
                continue  # started after the query was asked: the next one says
            try:
                ended = self.settle_state(job, states[sid])
                if ended is not None:
                    polled.ended.append(ended)
                else:
                    self._active(job, states[sid], mono)
            except OSError as exc:
                polled.failed.append(job)
                log.error("job=%s cannot update its files: %s (retrying)", job.record.id, exc)

    def _check(self, job: Running, mono: float, polled: Polled) -> bool:
        """A pending scancel and hopper's own wall clock; True if the wrapper recorded an exit."""
        track = self.tracks.setdefault(job.record.id, Track())
        self._answers(job, track)
        if track.cancel_pending and track.cancelling is None:
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
        ):  # recorded but never released (a crash or a failed release)
            self.release_later(job.record, state.slurm_id, note=True)

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
            return Ended(
                job.record, job.run_dir, How.LOST, outcome.reason, outcome.detail, files=FILES
            )
        finished = _when(exit_file.finished_at, now) if exit_file else now
        status = ExitStatus(
            started=True,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            finished_at=finished,
        )
        return Ended(
            job.record,
            job.run_dir,
            How.EXITED,
            outcome.reason,
            outcome.detail,
            status,
            files=FILES,
        )

    # -- after a restart ------------------------------------------------------------
    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return adopt(record, run_dir, self.ctx)

    def recovery(self) -> SlurmRecovery:
        return SlurmRecovery(self, self._view())  # asks Slurm once, only if a record needs it


class SlurmRecovery:
    """A recovery pass's questions, answered from one listing of Slurm's jobs."""

    def __init__(self, executor: SlurmExecutor, view: StateView) -> None:
        self.executor, self.view = executor, view

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

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        return self.executor.cancel_unrecorded(record.id, self.view)

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        if snap.slurm is None:
            return None  # Slurm did not answer: asked again at the next pass
        assert snap.record is not None
        return self.executor.settle_state(
            Running(snap.record, run_dir), snap.slurm, snap.slurm_exit
        )
