"""The session executor: interactive agent jobs as messages to a live session host.

A job with ``mode = "interactive"`` (core/admission.py) runs here. Its start
finds or starts the host of its session (:mod:`hopper.executors.session_start`;
one of its own when the job names no session, which ends with the job) and,
once its ``running`` record (the agent's pid, the host as its supervisor) is
durable, drops the message where the host takes it. Poll: the host writes
the turn's end into the run directory (``turn.json``, like a supervisor's
exit.json), which becomes an :class:`Ended`; a host that is gone with no
turn.json makes the job ``lost``. Cancel (ABORT, shutdown) interrupts the
turn, as Esc would: the job ends ``aborted``/``interrupted`` and the session
lives on (a second interrupt within 2 s ends it, the host's rule). After a
watcher restart the host kept running: the job is adopted and its turn's end
is read once, like any other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hopper.agents.drive import SPEC_FILE
from hopper.agents.driven import PROMPT_BODY_FILE
from hopper.config import AgentConfig, Config
from hopper.core import lifecycle
from hopper.core.outcome import classify
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import JobState, Reason
from hopper.executors.calls import Lane
from hopper.executors.protocol import Context, Deferred, Ended, How, Launch, Polled, Start, Tick
from hopper.executors.session_start import (
    HostPlan,
    SessionStart,
    close_work,
    host_argv,
    host_work,
    interrupt_work,
    message_of,
    request_file,
    session_env,
)
from hopper.prepare import in_scratch, scratch_dir
from hopper.proc import identity
from hopper.running import Running, adopt
from hopper.sessionhost import contract
from hopper.sessionhost.contract import TurnEnd, TurnRequest
from hopper.sessionhost.spec import HostSpec
from hopper.store import ledger
from hopper.store.atomic import write_atomic, write_files
from hopper.store.sessions import job_session_dir, sessions_root

log = logging.getLogger(__name__)

# A turn's files a retry keeps under attempt-numbered names (besides job.log).
ATTEMPT_FILES = (contract.TURN_FILE, contract.CAST_FILE)


class SessionExecutor:
    name = "session"
    begins_unrecorded = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.lane = Lane("session", workers=2, wake=ctx.wake)

    def open(self) -> None:
        return None

    def close(self) -> None:
        self.lane.close()

    def folder(self, record: JobRecord) -> Path:
        return job_session_dir(self.ctx.layout, record.id, record.session)

    # -- start ----------------------------------------------------------------------
    def start(self, launch: Launch) -> Start:
        record, run_dir = launch.record, launch.run_dir
        if launch.ahead:
            return Deferred(record)  # a session host is real work: started with a slot only
        try:
            agent_spec, text = message_of(launch.prep.files, SPEC_FILE, PROMPT_BODY_FILE)
        except (KeyError, ValueError) as exc:
            why = f"agent {record.agent!r} has no interactive mode here ({exc})"
            return Ended(record, run_dir, How.REJECTED, Reason.BAD_PROMPT, why)
        write_files(run_dir, launch.prep.files)  # as a supervised job's, for who reads them
        if in_scratch(launch.workdir, run_dir):  # the session host runs there
            scratch_dir(run_dir)
        config = self.ctx.config
        table = config.agents.get(record.agent) or AgentConfig()
        folder = self.folder(record)
        shared = record.session is not None
        name = record.session or record.id
        spec = HostSpec(
            name=name,
            agent_name=record.agent,
            session_dir=str(folder),
            workdir=str(launch.workdir),
            agent=agent_spec,
            env=session_env(launch.env, shared, name),
            session_idle=table.session_idle,
            session_max=table.session_max,
            memory_max=record.memory_max_bytes,
            grace=config.kill_grace,
            own_job=None if shared else record.id,
        )
        plan = HostPlan(folder, spec, host_argv(), sessions_root(self.ctx.layout))
        message = message_for(record, run_dir, text, config, agent_spec)
        call = self.lane.submit(host_work(plan))
        return SessionStart(self, launch, call, plan, message)

    def close_later(self, folder: Path) -> None:
        self.lane.submit(close_work(folder))

    # -- monitor --------------------------------------------------------------------
    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        polled = Polled()
        for job in jobs:
            found: list[Ended] = []
            if self.ctx.guard.step(
                f"poll:{job.record.id}",
                lambda job=job, found=found: self._poll_one(job, tick, found),  # type: ignore[misc]
                what=f"job={job.record.id} cannot be polled or finished",
            ):
                polled.ended.extend(found)
            else:
                polled.failed.append(job)
        return polled

    def _poll_one(self, job: Running, tick: Tick, found: list[Ended]) -> None:
        end = self.turn_end(job.record, job.run_dir)
        if end is not None:
            found.append(self.end_of(job, end))
            return
        if not tick.sweep:
            return
        rec = job.record
        if identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time):
            state = contract.read_session(self.folder(rec))
            if state is not None and state.job == rec.id:
                self.respawned(job, state.agent_pid)
            return
        end = self.turn_end(rec, job.run_dir)  # written just before the host ended
        found.append(self.end_of(job, end) if end is not None else self.lost(job))

    @staticmethod
    def turn_end(record: JobRecord, run_dir: Path) -> TurnEnd | None:
        end = contract.read_turn_end(run_dir)
        return end if end is not None and end.job_id == record.id else None

    def _handed_over(self, job: Running) -> Ended | None:
        holder = self.ctx.holder(job)
        if holder is None:
            return None
        return Ended(job.record, job.run_dir, How.HANDED_OVER, detail=holder)

    def respawned(self, job: Running, agent_pid: int | None) -> None:
        """The host started a new agent for the job's turn (``on_dead = "resume"``):
        job.json's pid names it from now on."""
        if agent_pid is None or agent_pid == job.record.pid:
            return
        fact = lifecycle.Respawned(
            self.ctx.clock.now(),
            agent_pid,
            identity.start_time(agent_pid),
            "the agent died mid-turn and was resumed (on_dead = resume)",
        )
        job.record = ledger.commit(job.run_dir, lifecycle.respawned(job.record, fact))

    def end_of(self, job: Running, end: TurnEnd) -> Ended:
        taken = self._handed_over(job)
        if taken is not None:
            return taken
        if job.record.state is JobState.RUNNING:
            self.respawned(job, end.agent_pid)
        rec = job.record
        ledger.note(
            job.run_dir,
            "turn_ended",
            self.ctx.clock.now(),
            ended=end.ended,
            turn=end.turn,
            session=rec.session,
            agent_pid=end.agent_pid,
            detail=end.detail or None,
        )
        status, reason, detail = turn_outcome(end, rec, self.folder(rec))
        return Ended(rec, job.run_dir, How.EXITED, reason, detail, status, files=ATTEMPT_FILES)

    def lost(self, job: Running) -> Ended:
        taken = self._handed_over(job)
        if taken is not None:
            return taken
        ledger.note(job.run_dir, "lost", self.ctx.clock.now(), orphans_killed=0)
        detail = "the session host vanished without recording the turn's end"
        return Ended(job.record, job.run_dir, How.LOST, Reason.LOST, detail, files=ATTEMPT_FILES)

    # -- stop -----------------------------------------------------------------------
    def cancel(self, job: Running, reason: Reason) -> None:
        """Interrupt the turn (off the loop); the host records it ``interrupted``."""
        self.lane.submit(interrupt_work(self.folder(job.record)))

    def forget(self, job: Running, *, end: bool = False) -> None:
        """Taken over: touch nothing. ``end`` (its run directory is gone): interrupt
        its turn (a host of its own: close it)."""
        if not end:
            return
        folder = self.folder(job.record)
        if job.record.session is None:
            self.close_later(folder)
        else:
            self.lane.submit(interrupt_work(folder))

    # -- after a restart ------------------------------------------------------------
    def recovery(self) -> SessionRecovery:
        return SessionRecovery(self)

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        """Watch it again; a message the last watcher recorded running but died before
        dropping (no request, no turn.json) is dropped now, from prompt.body.md."""
        job = adopt(record, run_dir, self.ctx)
        redeliver(self.folder(record), record, run_dir, self.ctx.config)
        return job


class SessionRecovery:
    """A recovery pass's questions: a job's end is its turn.json, whatever the host's fate."""

    def __init__(self, executor: SessionExecutor) -> None:
        self.executor = executor

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        return snap

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        """A start never recorded: its message is taken back before it is queued again."""
        request_file(self.executor.folder(record), record.id).unlink(missing_ok=True)
        return True

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        assert snap.record is not None
        job = Running(snap.record, run_dir)
        end = self.executor.turn_end(job.record, run_dir)
        return self.executor.end_of(job, end) if end is not None else self.executor.lost(job)


def message_for(
    record: JobRecord, run_dir: Path, text: str, config: Config, agent_spec: Mapping[str, Any]
) -> TurnRequest:
    """The message the host types, with the job's limits and its on_idle, on_dead and
    on_error policies (from the agent's prepared spec) it follows during the turn."""
    table = config.agents.get(record.agent) or AgentConfig()
    return TurnRequest(
        job_id=record.id,
        run_dir=str(run_dir),
        text=text,
        timeout=record.timeout_seconds,
        cast_max=record.output_max_bytes,
        max_cost_usd=record.max_cost_usd,
        max_tokens=record.max_tokens,
        model=table.model,
        prices={model: row.model_dump() for model, row in config.prices.items()},
        idle_timeout=number(agent_spec.get("idle_timeout")),
        on_idle=str(agent_spec.get("on_idle") or "abort"),
        max_nudges=int(agent_spec.get("max_nudges") or 0),
        on_dead=str(agent_spec.get("on_dead") or "fail"),
        on_error=str(agent_spec.get("on_error") or "retry"),
        api_retries=int(agent_spec.get("api_retries") or 0),
        retry_backoff=number(agent_spec.get("retry_backoff")) or 0.0,
        session=record.session,
        sessions_dir=str(agent_spec["sessions_dir"]) if agent_spec.get("sessions_dir") else None,
    )


def redeliver(folder: Path, record: JobRecord, run_dir: Path, config: Config) -> bool:
    """Drop the job's message again if it never reached its host. The order of the
    looks matters: the host removes a request only after its turn.json is durable."""
    path = request_file(folder, record.id)
    if path.exists() or contract.read_turn_end(run_dir) is not None:
        return False
    text = contract.read_small(run_dir / PROMPT_BODY_FILE)
    if text is None:
        return False
    spec = contract.read_small(run_dir / SPEC_FILE)
    try:
        agent_spec = json.loads(spec) if spec is not None else {}
    except ValueError:
        agent_spec = {}
    if not isinstance(agent_spec, dict):
        agent_spec = {}
    body = text.decode(errors="replace").rstrip("\n")
    message = message_for(record, run_dir, body, config, agent_spec)
    write_atomic(path, message.to_json(), mode=0o600)
    log.info("job=%s message dropped again for session %s", record.id, folder.name)
    return True


def turn_outcome(end: TurnEnd, record: JobRecord, folder: Path) -> tuple[ExitStatus, Reason, str]:
    """The exit status, reason and detail a turn's end gives its job."""
    how = end.ended
    status = ExitStatus(
        started=True,
        pid=end.agent_pid,
        supervisor_pid=end.host_pid,
        exit_code=0 if how in contract.COMPLETED_TURNS else None,
        timed_out=how == contract.TIMEOUT,
        finished_at=end.finished_at,
    )
    if how in contract.COMPLETED_TURNS:
        return status, Reason.COMPLETED, f"turn {end.turn} ended ({how})"
    if how == contract.TIMEOUT:
        return status, Reason.TIMEOUT, end.detail or "the turn ran past its timeout"
    if how == contract.IDLE_TIMEOUT:
        return status, Reason.IDLE_TIMEOUT, end.detail or "no output for idle_timeout"
    if how == contract.INTERRUPTED:
        why = "interrupted" if record.stop_requested is None else f"{record.stop_requested}"
        return (
            status,
            Reason.INTERRUPTED,
            f"turn {end.turn} interrupted ({why}); the session lives on",
        )
    if how == contract.BUDGET:
        return status, Reason.BUDGET_EXCEEDED, end.detail
    if how == contract.AGENT_EXITED:
        return status, Reason.EXIT_NONZERO, end.detail or "the agent exited during the turn"
    session = contract.read_session(folder)
    if session is not None and session.ended_reason == contract.ENDED_MEMORY:
        return status, Reason.MEMORY_LIMIT, end.detail
    if record.stop_requested is Reason.SHUTDOWN:
        return status, Reason.SHUTDOWN, end.detail
    return status, classify(status, Reason.ABORTED).reason, end.detail


def number(value: object) -> float | None:
    """A spec's number of seconds, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
