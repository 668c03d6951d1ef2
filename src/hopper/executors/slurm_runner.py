"""Slurm jobs inside the watcher: submit held, record, release; one query per tick; settle.

Theory of operation. :meth:`SlurmJobs.start` writes the job's argv and the
batch wrapper (:func:`hopper.executors.slurm.write_job_wrapper`) into the run
directory, submits it *held*, writes ``running`` with ``slurm_job_id`` to
job.json, and only then releases it, so no Slurm job runs unrecorded (the
local supervisor's gate, in Slurm's terms). :meth:`SlurmJobs.poll` serves every
Slurm job of the runner at once: each tick it stats ABORT and the wrapper's
``slurm-exit.json`` and checks hopper's own wall clock; every
``[slurm] poll_interval`` (sooner once a wrapper has written its exit record)
it asks the controller about all of them with one :func:`query`, and settles
each finished one from Slurm's record via the pure
:func:`hopper.core.slurm_parse.settle` (the wrapper's record when Slurm has
forgotten the job, else ``lost``). Endings go through the runner's own
``_close`` (retry policy, finalize, processed/), exactly as for local jobs.

A controller that cannot be asked is never read as "lost": the watcher logs
it and asks again next time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from hopper.agents.base import Preparation
from hopper.agents.registry import driven
from hopper.agents.summary import read_job_summary, record_fields
from hopper.config import SlurmConfig
from hopper.core.agent_outcome import final_reason
from hopper.core.prompt import BadPrompt, PromptSpec
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.slurm_parse import (
    TERMINAL,
    SlurmExitFile,
    SlurmJob,
    SlurmOutcome,
    SlurmParseError,
    SlurmState,
    parse_exit_file,
    settle,
    states_for,
)
from hopper.core.states import Reason
from hopper.executors.slurm import (
    ACTIVE_HELD_REASON,
    EXIT_STATUS_FILE,
    RESOURCES,
    ResourceError,
    SlurmError,
    SlurmUnavailable,
    cancel,
    list_jobs,
    query,
    release,
    resource_args,
    sbatch_argv,
    submit,
    write_job_wrapper,
)
from hopper.faults import crash_point
from hopper.running import Running
from hopper.store.jobfile import ABORT_FILE, LOG_FILE, append_event, write_record
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_text

if TYPE_CHECKING:
    from hopper.runner import Runner

log = logging.getLogger(__name__)

FAST_QUERY = 0.5  # seconds between queries while a wrapper has recorded an exit
RETRY_SUBMIT = 5.0  # seconds before a submit is tried again when Slurm did not answer
WARN_EVERY = 60.0  # seconds between "Slurm unavailable" log lines


def slurm_request(executor: str, spec: PromptSpec, defaults: SlurmConfig) -> dict[str, int | str]:
    """The resources a job asks of Slurm: front matter, else ``[slurm]``; validated.

    ``cpus``, ``mem`` and ``gres`` on a local job are an error (a bad prompt),
    not silently ignored: the job would not get what it asked for.
    """
    opts = spec.options
    asked: dict[str, int | str] = {}
    for key in RESOURCES:
        value = getattr(opts, key)
        if value is not None:
            asked[key] = value
    if executor != "slurm":
        if executor == "container":
            asked.pop("cpus", None)  # the engine's --cpus (executors/container.py)
        if asked:
            raise BadPrompt(
                f"{', '.join(asked)} only apply to Slurm jobs",
                hint='add executor = "slurm", or remove them',
            )
        return {}
    merged = dict(asked)
    for key in RESOURCES:
        default = getattr(defaults, key)
        if key not in merged and default is not None:
            merged[key] = default
    try:
        resource_args(merged)
    except ResourceError as exc:
        raise BadPrompt(str(exc), hint="see docs/slurm.md") from None
    return merged


def read_exit_file(run_dir: Path, slurm_id: str) -> SlurmExitFile | None:
    """The wrapper's exit record, if it wrote one for this Slurm job (not an older one)."""
    try:
        text = read_text(run_dir / EXIT_STATUS_FILE, SMALL_LIMIT)  # no link, FIFO, huge file
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.error("%s", exc)
        return None
    try:
        record = parse_exit_file(text)
    except SlurmParseError as exc:
        log.error("%s: %s", run_dir / EXIT_STATUS_FILE, exc)
        return None
    return record if record.slurm_id == slurm_id else None


def _when(text: str, default: datetime) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return default


class StateView:
    """Recovery's look at Slurm: one listing, asked for lazily, shared by every run dir."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = env
        self._jobs: list[SlurmJob] | None = None
        self._failed = False

    def _all(self) -> list[SlurmJob] | None:
        if self._jobs is None and not self._failed:
            try:
                self._jobs = list_jobs(self.env)
            except SlurmError as exc:
                self._failed = True
                log.warning("recovery: cannot ask Slurm (%s); will ask again", exc)
        return self._jobs

    def state(self, slurm_id: str) -> SlurmState | None:
        """The job as Slurm knows it (``found=False``: forgotten); None: Slurm did not answer."""
        jobs = self._all()
        return None if jobs is None else states_for([slurm_id], jobs)[slurm_id]

    def named(self, job_id: str) -> list[SlurmJob] | None:
        jobs = self._all()
        return None if jobs is None else [j for j in jobs if j.name == job_id]


@dataclass
class Track:
    """What the watcher remembers about one Slurm job between ticks (not in job.json)."""

    running_since: float | None = None  # monotonic, when first seen RUNNING
    last_state: str = ""
    cancel_pending: bool = False


class SlurmJobs:
    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.tracks: dict[str, Track] = {}
        self._next_query = 0.0
        self._last_query = 0.0
        self._next_warning = 0.0
        self._uncertain: set[str] = set()  # ids whose sbatch did not answer
        self.view = StateView()  # recovery's listing, fresh for each reconcile pass

    @property
    def config(self) -> SlurmConfig:
        return self.runner.config.slurm

    # -- start ----------------------------------------------------------------------
    def start(
        self,
        record: JobRecord,
        run_dir: Path,
        prep: Preparation,
        workdir: Path,
        env: Mapping[str, str],
    ) -> None:
        r = self.runner
        if record.id in self._uncertain:
            # an earlier sbatch may have gone through: cancel it before submitting again
            if not self.cancel_unrecorded(record.id, StateView()):
                self._later(record, run_dir, "Slurm did not answer")
                return
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
            r.intake.reject(run_dir, record, Reason.SPAWN_FAILED, f"cannot submit to Slurm: {exc}")
            return
        try:
            slurm_id = submit(argv, env)
        except SlurmUnavailable as exc:
            self._uncertain.add(record.id)
            self._later(record, run_dir, str(exc))
            return
        except SlurmError as exc:
            r.intake.reject(run_dir, record, Reason.SPAWN_FAILED, f"Slurm refused the job: {exc}")
            return
        crash_point("slurm.after_submit")
        now = r.clock.now()
        running = r.running_record(record, workdir, now, slurm_job_id=slurm_id)
        write_record(run_dir, running)
        crash_point("slurm.after_record")
        append_event(
            run_dir,
            "started",
            now,
            executor="slurm",
            slurm_job_id=slurm_id,
            argv0=prep.argv[0],
            workdir=str(workdir),
        )
        try:
            release(slurm_id)
        except SlurmError as exc:  # the poll releases it when it sees it still held
            log.warning("job=%s slurm=%s release failed: %s (will retry)", record.id, slurm_id, exc)
        self._add(running, run_dir)
        log.info("job=%s state=queued->running slurm_job_id=%s", record.id, slurm_id)

    def _add(self, record: JobRecord, run_dir: Path) -> None:
        r = self.runner
        r.running[record.id] = Running(
            record, run_dir, None, r.clock.monotonic() + r.config.heartbeat_interval
        )
        self.tracks[record.id] = Track()

    def _later(self, record: JobRecord, run_dir: Path, why: str) -> None:
        """Slurm did not answer: stay queued and try again shortly."""
        r = self.runner
        now = r.clock.now()
        queued = record.model_copy(
            update={
                "not_before": now + timedelta(seconds=RETRY_SUBMIT),
                "detail": f"waiting for Slurm: {why}",
            }
        )
        write_record(run_dir, queued)
        append_event(run_dir, "submit_deferred", now, why=why, delay_seconds=RETRY_SUBMIT)
        r.requeued.append(queued)
        log.warning("job=%s cannot submit to Slurm: %s (retrying)", record.id, why)

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
            append_event(
                self.runner.layout.run_dir(job_id),
                "slurm_stray_cancelled",
                self.runner.clock.now(),
                slurm_job_id=job.slurm_id,
                why="submitted, but never recorded in job.json (watcher crash)",
            )
            log.info("job=%s cancelled unrecorded Slurm job %s", job_id, job.slurm_id)
        return True

    # -- monitor --------------------------------------------------------------------
    def cancel(self, job: Running) -> None:
        """scancel the job (after request_stop recorded why); retried each tick on failure."""
        track = self.tracks.setdefault(job.record.id, Track())
        sid = job.record.slurm_job_id
        assert sid is not None
        try:
            cancel(sid)
            track.cancel_pending = False
        except (SlurmError, ValueError) as exc:
            track.cancel_pending = True
            log.warning("job=%s scancel %s failed: %s (will retry)", job.record.id, sid, exc)

    def poll(self, jobs: list[Running]) -> None:
        """One tick over every running Slurm job: markers, clock, then (when due) one query."""
        r = self.runner
        mono = r.clock.monotonic()
        exited = False
        for job in jobs:
            try:
                exited = self._check(job, mono) or exited
            except OSError as exc:
                r.io_errors += 1
                log.error("job=%s cannot update its files: %s (retrying)", job.record.id, exc)
        due = mono >= self._next_query or (exited and mono >= self._last_query + FAST_QUERY)
        if not due:
            return
        self._last_query = mono
        self._next_query = mono + self.config.poll_interval
        ids = [j.record.slurm_job_id for j in jobs if j.record.slurm_job_id is not None]
        try:
            states = query(ids)
        except SlurmError as exc:
            if mono >= self._next_warning:
                self._next_warning = mono + WARN_EVERY
                log.warning("cannot ask Slurm about %d jobs: %s (will retry)", len(ids), exc)
            return
        for job in jobs:
            sid = job.record.slurm_job_id
            assert sid is not None
            try:
                if not self.settle(job, states[sid]):
                    self._active(job, states[sid], mono)
            except OSError as exc:
                r.io_errors += 1
                log.error("job=%s cannot update its files: %s (retrying)", job.record.id, exc)

    def _check(self, job: Running, mono: float) -> bool:
        """ABORT and hopper's own wall clock; True if the wrapper has recorded an exit."""
        r = self.runner
        track = self.tracks.setdefault(job.record.id, Track())
        if not job.stop_sent and (job.run_dir / ABORT_FILE).exists():
            r.request_stop(job, Reason.ABORTED)
        elif track.cancel_pending:
            self.cancel(job)
        timeout = job.record.timeout_seconds
        if (
            not job.stop_sent
            and timeout is not None
            and track.running_since is not None
            and mono - track.running_since >= timeout
        ):
            r.request_stop(job, Reason.TIMEOUT)
        return (job.run_dir / EXIT_STATUS_FILE).exists()

    def _active(self, job: Running, state: SlurmState, mono: float) -> None:
        r = self.runner
        track = self.tracks.setdefault(job.record.id, Track())
        slurm_job = state.job
        assert slurm_job is not None
        if slurm_job.state != track.last_state:
            track.last_state = slurm_job.state
            append_event(
                job.run_dir,
                "slurm_state",
                r.clock.now(),
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
                append_event(job.run_dir, "released", r.clock.now(), slurm_job_id=state.slurm_id)
            except (SlurmError, ValueError) as exc:
                log.warning("job=%s release failed: %s (will retry)", job.record.id, exc)
        if mono >= job.next_heartbeat:
            job.record = job.record.model_copy(update={"heartbeat_at": r.clock.now()})
            write_record(job.run_dir, job.record, durable=False)
            job.next_heartbeat = mono + r.config.heartbeat_interval

    # -- finish ---------------------------------------------------------------------
    def settle(
        self, job: Running, state: SlurmState, exit_file: SlurmExitFile | None = None
    ) -> bool:
        """Finalize the job if it has ended (True); False while Slurm still runs it."""
        sid = job.record.slurm_job_id
        assert sid is not None
        if exit_file is None and not state.found:
            exit_file = read_exit_file(job.run_dir, sid)
        outcome = settle(state, exit_file, job.record.stop_requested)
        if outcome is None:
            return False
        if exit_file is None:
            exit_file = read_exit_file(job.run_dir, sid)
        self._finish(job, state, outcome, exit_file)
        return True

    def _finish(
        self,
        job: Running,
        state: SlurmState,
        outcome: SlurmOutcome,
        exit_file: SlurmExitFile | None,
    ) -> None:
        r = self.runner
        r.running.pop(job.record.id, None)
        self.tracks.pop(job.record.id, None)
        now = r.clock.now()
        append_event(
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
        reason, detail = outcome.reason, outcome.detail
        status: ExitStatus | None = None
        if reason is Reason.LOST and not state.found:
            append_event(job.run_dir, "lost", now, slurm_job_id=state.slurm_id)
        else:
            finished = _when(exit_file.finished_at, now) if exit_file else now
            status = ExitStatus(
                started=True,
                exit_code=outcome.exit_code,
                signal=outcome.signal,
                finished_at=finished,
            )
        agent = read_job_summary(job.run_dir, now, driven=driven(r.intake.agents, job.record.agent))
        if agent is not None:
            job.record = job.record.model_copy(update=record_fields(agent))
            refined = final_reason(reason, agent)
            if refined is not None:
                reason, detail = refined
        r._close(job.run_dir, job.record, reason, detail, status)
