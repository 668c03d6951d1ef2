"""Running jobs: start under a supervisor, watch for ABORT and exit, finish.

One loop serves every running job (no thread per job): each tick stats the
ABORT marker and exit.json of each, and refreshes heartbeats when due.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from hopper import prepare
from hopper.agents.registry import driven
from hopper.agents.summary import read_job_summary, read_live_state, record_fields
from hopper.clock import Clock
from hopper.config import Config
from hopper.core.agent_outcome import final_reason
from hopper.core.mounts import BadMount
from hopper.core.outcome import classify
from hopper.core.prompt import BadPrompt
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.retry import backoff, should_retry
from hopper.core.states import JobState, Reason, check_transition
from hopper.errors import JobFileCorrupt
from hopper.executors.container import ContainerUnavailable
from hopper.executors.container_runner import ContainerJobs
from hopper.executors.slurm import EXIT_STATUS_FILE as SLURM_EXIT_FILE
from hopper.executors.slurm_runner import SlurmJobs
from hopper.faults import crash_point
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.proc import identity, spawn, treekill
from hopper.running import Running
from hopper.store.jobfile import (
    ABORT_FILE,
    EXIT_FILE,
    LOG_FILE,
    append_event,
    read_exit,
    read_resources,
    write_record,
)
from hopper.store.layout import Layout
from hopper.store.takeover import taken_by
from hopper.workspace import WorkspaceFailed

log = logging.getLogger(__name__)

# What a job back in the queue must not carry over from a start: the processes
# (or Slurm job) of the attempt that is over.
NOT_STARTED: dict[str, object] = {
    "pid": None,
    "pid_start_time": None,
    "supervisor_pid": None,
    "supervisor_start_time": None,
    "slurm_job_id": None,
}

SWEEP_INTERVAL = 0.5  # seconds between checks of ABORT markers and adopted supervisors


def _not_a_directory(path: Path) -> bool:
    """True if ``path`` is gone or is no longer a real directory (a link, a file)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def _reap_adopted(pid: int | None) -> None:
    """Reap an adopted supervisor if it is our child (after a SIGHUP re-exec it is).

    Only that pid: a blanket waitpid(-1) would steal statuses from Popen objects.
    A zombie keeps its pid, so this cannot hit an unrelated process.
    """
    if pid is None:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not ours (adopted after a crash): init reaps it


@dataclass
class Runner:
    layout: Layout
    config: Config
    intake: Intake
    clock: Clock
    running: dict[str, Running] = field(default_factory=dict)
    _reap: list[spawn.Handle] = field(default_factory=list)
    pool: spawn.ForkServer | None = None  # forks the supervisors; owned by the watcher
    child_exited: bool = True  # set by the watcher's SIGCHLD handler
    _next_sweep: float = 0.0
    requeued: list[JobRecord] = field(default_factory=list)  # retries, for the scheduler
    io_errors: int = 0  # failed writes since start (disk full …), for status reports
    slurm: SlurmJobs = field(init=False)  # executor = "slurm": submit, poll, cancel
    containers: ContainerJobs = field(init=False)  # executor = "container": run, remove
    guard: LoopGuard = field(default_factory=LoopGuard)  # one bad job never stops the loop
    handed_over: set[str] = field(default_factory=set)  # dropped: another watcher took them

    def __post_init__(self) -> None:
        self.slurm = SlurmJobs(self)
        self.containers = ContainerJobs(self)

    # -- start ------------------------------------------------------------------
    def start(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        try:
            record = prepare.with_workspace(self.layout, record)
        except WorkspaceFailed as exc:
            self.intake.reject(
                run_dir, record, Reason.WORKSPACE_FAILED, f"{record.inbox_path}: {exc}"
            )
            return
        try:
            ready = prepare.prepare(self.layout, self.config, self.intake.agents, record, run_dir)
        except BadPrompt as exc:
            self.intake.reject(run_dir, record, Reason.BAD_PROMPT, exc.describe(record.inbox_path))
            return
        prep, workdir, env = ready.prep, ready.workdir, ready.env
        if record.executor == "slurm":
            self.slurm.start(record, run_dir, prep, workdir, env)
            return
        argv, grace = prep.argv, self.config.kill_grace
        if record.executor == "container":
            try:
                argv, env, grace = self.containers.launch(
                    record, run_dir, prep, workdir, ready.job_vars, env
                )
            except ContainerUnavailable as exc:
                self.intake.reject(run_dir, record, Reason.SPAWN_FAILED, exc.detail)
                return
            except BadMount as exc:
                self.intake.reject(
                    run_dir, record, Reason.BAD_PROMPT, f"{record.inbox_path}: {exc}"
                )
                return
        launch = spawn.LaunchSpec(
            argv=argv,
            cwd=str(workdir),
            env=env,
            log=str(run_dir / LOG_FILE),
            stop_signals=prep.stop_signals,
            grace=grace,
            timeout=record.timeout_seconds,
            # A container's memory_max is the engine's (--memory): the supervisor's tree
            # also holds the engine's own client, which is not the job's memory.
            memory_max=None if record.container else record.memory_max_bytes,
            output_max=record.output_max_bytes,
            sample_interval=self.config.sample_interval,
            idle_timeout=prep.idle_timeout,
        )
        try:
            proc = spawn.launch(run_dir, launch, self.pool)
            pid = spawn.read_pid(proc)
        except spawn.SpawnFailed as exc:
            self.intake.reject(run_dir, record, Reason.SPAWN_FAILED, str(exc))
            return
        crash_point("start.after_spawn")
        now = self.clock.now()
        running = self.running_record(
            record,
            workdir,
            now,
            pid=pid,
            pid_start_time=identity.start_time(pid),
            supervisor_pid=proc.pid,
            supervisor_start_time=identity.start_time(proc.pid),
            host=self.intake.ident.host,  # a retry taken over from a dead host runs here
        )
        write_record(run_dir, running)
        crash_point("start.after_record")
        append_event(
            run_dir,
            "started",
            now,
            pid=pid,
            supervisor_pid=proc.pid,
            argv0=prep.argv[0],
            workdir=str(workdir),
            **({"container": record.container.name} if record.container else {}),
        )
        spawn.release(proc)
        self.running[record.id] = Running(
            running, run_dir, proc, self.clock.monotonic() + self.config.heartbeat_interval
        )
        log.info("job=%s state=queued->running pid=%s", record.id, pid)

    def running_record(
        self, record: JobRecord, workdir: Path, now: datetime, **fields: object
    ) -> JobRecord:
        """``record`` as it starts running under this watcher; ``fields`` say on what."""
        check_transition(record.state, JobState.RUNNING)  # QUEUED -> RUNNING
        return record.model_copy(
            update={
                "state": JobState.RUNNING,
                "started_at": now,
                "heartbeat_at": now,
                "workdir": str(workdir),
                "owner": self.intake.ident.owner,
                **fields,
            }
        )

    # -- adopt ------------------------------------------------------------------
    def adopt(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        owned = record.model_copy(update={"owner": self.intake.ident.owner})
        write_record(run_dir, owned, durable=False)
        append_event(
            run_dir, "adopted", self.clock.now(), owner=self.intake.ident.owner, pid=record.pid
        )
        self.running[record.id] = Running(owned, run_dir, None, self.clock.monotonic())
        log.info("job=%s adopted pid=%s", record.id, record.pid)

    # -- monitor ----------------------------------------------------------------
    def poll(self) -> None:
        """One pass over every running job.

        Cheap by design, because it runs every tick for every job: a
        supervisor that is our child is looked at only after a SIGCHLD
        (``child_exited``); ABORT markers and adopted supervisors (not our
        children) are checked on a sweep every SWEEP_INTERVAL (or poll_interval
        if longer), which keeps "touch ABORT" well within a second.
        """
        mono = self.clock.monotonic()
        sweep = mono >= self._next_sweep
        if sweep:
            self._next_sweep = mono + max(SWEEP_INTERVAL, self.config.poll_interval)
        children = self.child_exited or sweep
        self.child_exited = False
        slurm_jobs = [j for j in self.running.values() if j.record.slurm_job_id is not None]
        if slurm_jobs:
            self.slurm.poll(slurm_jobs)  # one squeue for all of them
        for job_id in list(self.running):
            job = self.running[job_id]
            if job.record.slurm_job_id is not None:
                continue
            if self.guard.step(
                f"poll:{job_id}",
                lambda job=job: self._poll_one(job, sweep=sweep, children=children),  # type: ignore[misc]
                what=f"job={job_id} cannot be polled or finished",
            ):
                continue
            if _not_a_directory(job.run_dir):
                self._vanished(job)  # deleted (or swapped for a link) under it: filed lost once
                continue
            # ENOSPC, EIO, a bad file in its run directory …: keep the job and try
            # again next tick (logged once); the supervisor's exit.json is durable.
            self.running.setdefault(job_id, job)
            self.io_errors += 1
        self._reap = [p for p in self._reap if p.poll() is None]

    def _own_exit(self, job: Running) -> ExitStatus | None:
        """exit.json if this job's own supervisor wrote it (not a stale one from a crash)."""
        try:
            status = read_exit(job.run_dir)
        except JobFileCorrupt as exc:
            # Not the supervisor's (it writes a valid one, by rename, when the
            # job ends): the job wrote it. Ignore it; if the supervisor then
            # dies without replacing it, lose() says why.
            if job.bad_exit is None:
                log.warning("job=%s ignoring %s", job.record.id, exc.render())
            job.bad_exit = exc.message
            return None
        if status is None:
            return None
        mine = job.record.supervisor_pid
        if status.supervisor_pid is not None and mine is not None and status.supervisor_pid != mine:
            return None
        return status

    def _poll_one(self, job: Running, *, sweep: bool = True, children: bool = True) -> None:
        # A supervisor that is our child writes exit.json and then exits, so
        # its exit (SIGCHLD, Popen.poll) is the cheap signal to look; only an
        # adopted one (not our child) needs exit.json read, on each sweep.
        if job.supervisor is None and sweep:
            status = self._own_exit(job)
            if status is not None:
                self.finish(job, status)
                return
        if sweep and not job.stop_sent and os.path.exists(os.path.join(job.run_dir, ABORT_FILE)):
            self.request_stop(job, Reason.ABORTED)
        look = children if job.supervisor is not None else sweep
        if look and self._supervisor_gone(job):
            status = self._own_exit(job)  # it may have written just before exiting
            if status is not None:
                self.finish(job, status)
            else:
                self.lose(job)
            return
        mono = self.clock.monotonic()
        if mono >= job.next_heartbeat and not self.taken(job):
            update: dict[str, object] = {"heartbeat_at": self.clock.now()}
            live = read_resources(job.run_dir)  # the supervisor's latest measurement
            if live is not None:
                update["resources"] = live
            update.update(read_live_state(job.run_dir))  # an agent's live state, if any
            job.record = job.record.model_copy(update=update)
            write_record(job.run_dir, job.record, durable=False)
            job.next_heartbeat = mono + self.config.heartbeat_interval

    def taken(self, job: Running) -> bool:
        """Has another watcher taken this job over (we were stopped too long)? Then drop it.

        Checked before anything that writes the job's record: its heartbeat,
        finishing it, filing it lost. The new owner finishes it; we must not.
        """
        holder = taken_by(job.run_dir, job.record.owner, self.intake.ident.owner)
        if holder is None:
            return False
        self.running.pop(job.record.id, None)
        self.handed_over.add(job.record.id)
        if job.supervisor is not None:
            self._reap.append(job.supervisor)
        log.warning(
            "job=%s was taken over by %s while this watcher was silent; leaving it to them",
            job.record.id,
            holder,
        )
        return True

    def _supervisor_gone(self, job: Running) -> bool:
        if job.supervisor is not None:
            return job.supervisor.poll() is not None
        rec = job.record
        return not identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time)

    def request_stop(self, job: Running, reason: Reason) -> None:
        """Record why, then ask the supervisor to stop the job (it escalates to SIGKILL)."""
        now = self.clock.now()
        job.record = job.record.model_copy(update={"stop_requested": reason})
        write_record(job.run_dir, job.record)
        append_event(
            job.run_dir,
            "abort_requested" if reason is Reason.ABORTED else "stop_requested",
            now,
            reason=reason,
        )
        rec = job.record
        if rec.slurm_job_id is not None:
            self.slurm.cancel(job)  # scancel; Slurm escalates to SIGKILL after KillWait
        elif identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time):
            assert rec.supervisor_pid is not None
            identity.send(rec.supervisor_pid, signal.SIGTERM)
        job.stop_sent = True
        log.info("job=%s stop requested reason=%s", rec.id, reason)

    # -- finish -----------------------------------------------------------------
    def finish(self, job: Running, status: ExitStatus) -> None:
        if self.taken(job):
            return
        self.running.pop(job.record.id, None)
        if job.supervisor is not None:
            self._reap.append(job.supervisor)
        elif job.record.host == self.intake.ident.host:  # never a pid of another host
            _reap_adopted(job.record.supervisor_pid)
        outcome = self.containers.refine(job.record, classify(status, job.record.stop_requested))
        now = self.clock.now()
        append_event(
            job.run_dir,
            "exited",
            now,
            exit_code=status.exit_code,
            signal=status.signal,
            timed_out=status.timed_out,
            leftovers_killed=status.leftovers_killed,
            limit=status.limit,
            resources=status.resources.model_dump() if status.resources else None,
        )
        reason, detail = outcome.reason, outcome.detail
        by_driver = driven(self.intake.agents, job.record.agent)
        agent = read_job_summary(job.run_dir, now, driven=by_driver)
        if agent is not None:
            live = read_live_state(job.run_dir)  # the agent's last state and detail
            job.record = job.record.model_copy(update={**live, **record_fields(agent)})
            refined = final_reason(reason, agent)
            if refined is not None:
                reason, detail = refined
        self._close(job.run_dir, job.record, reason, detail, status)

    def _vanished(self, job: Running) -> None:
        """Its run directory was deleted (or swapped for a link) while it ran.

        Filed ``lost`` once, in a fresh run directory, and never retried (its
        prompt went with the directory); its processes are ended: the
        supervisor, told to stop, ends the tree and exits without a record.
        """
        self.running.pop(job.record.id, None)
        self.guard.forget(f"poll:{job.record.id}")
        rec = job.record
        log.error(
            "job=%s its run directory %s was deleted while it ran; filing it lost",
            rec.id,
            job.run_dir,
        )
        if job.supervisor is not None:
            self._reap.append(job.supervisor)
        if rec.host == self.intake.ident.host:
            if identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time):
                assert rec.supervisor_pid is not None
                identity.send(rec.supervisor_pid, signal.SIGTERM)
            else:
                treekill.end_job(rec.id)
        try:
            if job.run_dir.is_symlink():
                job.run_dir.unlink()  # the link itself, never what it points to
            job.run_dir.mkdir(exist_ok=True)
            now = self.clock.now()
            started = rec.started_at
            self.intake.file_terminal(
                job.run_dir,
                rec,
                Reason.LOST,
                "its run directory was deleted while it ran (by the job?); "
                "its log and prompt went with it",
                now,
                {
                    "finished_at": now,
                    "duration_seconds": (now - started).total_seconds() if started else None,
                },
            )
        except OSError as exc:
            log.error("job=%s cannot file it in %s: %s", rec.id, job.run_dir, exc)

    def lose(self, job: Running) -> None:
        """The supervisor is gone and recorded nothing: end any orphans, fail as lost."""
        if self.taken(job):
            return
        rec = job.record
        local = rec.host == self.intake.ident.host  # a dead host's pids are not ours to judge
        # A container job: the engine may have recorded how the container ended.
        engine_status = self.containers.engine_exit(rec, self.clock.now()) if local else None
        self.running.pop(job.record.id, None)
        killed = 0
        if local:
            # Everything carrying the job's token, and the job's own tree if its
            # pid is still the job: a setsid'd orphan under init included.
            alive = rec.pid is not None and identity.is_alive(rec.pid, rec.pid_start_time)
            roots = frozenset([rec.pid]) if alive and rec.pid else frozenset[int]()
            killed = treekill.end_job(rec.id, roots)
        if engine_status is not None:
            append_event(
                job.run_dir,
                "container_exit_from_engine",
                self.clock.now(),
                exit_code=engine_status.exit_code,
                orphans_killed=killed,
            )
            self.finish(job, engine_status)
            return
        append_event(job.run_dir, "lost", self.clock.now(), orphans_killed=killed)
        self._close(
            job.run_dir,
            rec,
            Reason.LOST,
            "the supervisor vanished without recording an exit status"
            + (f" (its exit.json was not trusted: {job.bad_exit})" if job.bad_exit else ""),
            None,
        )

    def _close(
        self,
        run_dir: Path,
        record: JobRecord,
        reason: Reason,
        detail: str,
        status: ExitStatus | None,
    ) -> None:
        now = self.clock.now()
        if record.state is JobState.RUNNING:
            self.containers.remove(record)  # whatever the outcome; its output is in job.log
        if record.state is JobState.RUNNING:
            # Final figures from exit.json; else (lost) the last live ones.
            used = status.resources if status is not None else None
            used = used or read_resources(run_dir)
            if used is not None:
                record = record.model_copy(update={"resources": used})
        if record.state is JobState.RUNNING and should_retry(
            reason, record.attempt, record.retries
        ):
            self._retry(run_dir, record, reason, detail, status)
            return
        finished = status.finished_at if status is not None else now
        started = record.started_at
        fields: dict[str, object] = {
            "exit_code": status.exit_code if status else None,
            "signal": status.signal if status else None,
            "finished_at": finished,
            "duration_seconds": (finished - started).total_seconds() if started else None,
        }
        self.intake.file_terminal(run_dir, record, reason, detail, now, fields)

    def _retry(
        self,
        run_dir: Path,
        record: JobRecord,
        reason: Reason,
        detail: str,
        status: ExitStatus | None,
    ) -> None:
        """Keep this attempt's log and exit record under attempt-numbered names; requeue."""
        n = record.attempt
        for name in (LOG_FILE, EXIT_FILE, SLURM_EXIT_FILE):
            source = run_dir / name
            if source.exists():
                stem, dot, ext = name.partition(".")
                source.rename(run_dir / f"{stem}.{n}{dot}{ext}")
        delay = backoff(n, self.config.retry_backoff)
        now = self.clock.now()
        check_transition(record.state, JobState.QUEUED)  # RUNNING -> QUEUED (retry)
        queued = record.model_copy(
            update={
                "state": JobState.QUEUED,
                "attempt": n + 1,
                "not_before": now + timedelta(seconds=delay),
                "detail": f"attempt {n} {reason}: {detail}; retrying in {delay:g}s",
                **NOT_STARTED,
                "stop_requested": None,
                "exit_code": status.exit_code if status else None,
                "signal": status.signal if status else None,
            }
        )
        write_record(run_dir, queued)
        append_event(
            run_dir,
            "retry_scheduled",
            now,
            attempt=n,
            next_attempt=n + 1,
            reason=reason,
            delay_seconds=delay,
        )
        self.requeued.append(queued)
        log.info("job=%s attempt=%d reason=%s retry in %gs", record.id, n, reason, delay)

    def requeue(self, record: JobRecord) -> JobRecord:
        """Recovery: recorded running but never released. Back to queued."""
        run_dir = self.layout.run_dir(record.id)
        check_transition(record.state, JobState.QUEUED)  # RUNNING -> QUEUED
        queued = record.model_copy(
            update={
                "state": JobState.QUEUED,
                **NOT_STARTED,
                "started_at": None,
                "owner": self.intake.ident.owner,
            }
        )
        write_record(run_dir, queued)
        (run_dir / EXIT_FILE).unlink(missing_ok=True)
        append_event(run_dir, "requeued", self.clock.now(), why="never released to run")
        return queued

    def abort_queued(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        append_event(run_dir, "abort_requested", self.clock.now(), reason=Reason.ABORTED)
        self._close(run_dir, record, Reason.ABORTED, "aborted before it started", None)
