"""A message job's start: its session's host found or started, off the loop.

Theory of operation. The session executor's :meth:`start
<hopper.executors.session.SessionExecutor.start>` hands :func:`host_work` to
its lane: the session's host is used if it runs (session.json says live and
its pid + start time match), waited for if it is closing, else a new one is
started (with ``--resume`` of the session's last agent session id: the
conversation goes on) and waited for until session.json names its agent's
pid. :class:`SessionStart` is collected when that answered: the job's
``running`` record names the agent (``pid``) and the host
(``supervisor_pid``), and only once it is durable is the message dropped
into ``requests/`` (:meth:`SessionStart.release`), where the host takes it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopper.agents import sessionmap
from hopper.core import lifecycle
from hopper.core.lifecycle import Started
from hopper.core.record import JobRecord
from hopper.core.states import Reason
from hopper.executors.calls import Call
from hopper.executors.protocol import Ended, How, Launch, Report, Starting
from hopper.proc import identity
from hopper.running import Running
from hopper.sessionhost import contract
from hopper.sessionhost.client import HostUnreachable, request
from hopper.sessionhost.contract import SessionState, TurnRequest
from hopper.sessionhost.launch import LaunchFailed, launch
from hopper.sessionhost.spec import HostSpec
from hopper.store.atomic import write_atomic
from hopper.store.sessions import host_alive

if TYPE_CHECKING:
    from hopper.executors.session import SessionExecutor

log = logging.getLogger(__name__)

HOST_READY = 20.0  # seconds for a new host to name its agent's pid
CLOSING_WAIT = 30.0  # seconds for a closing host to end before a new one starts
POLL = 0.05


class HostFailed(Exception):
    """The session's host could not be found or started (the message never ran)."""


@dataclass(frozen=True)
class HostPlan:
    """What :func:`host_work` needs: the session's directory and a new host's spec."""

    folder: Path
    spec: HostSpec
    argv: Sequence[str]
    sessions_dir: Path  # <root>/sessions: the session map (the last agent session id)


def _wait_state(
    folder: Path, until: Callable[[SessionState], bool], timeout: float
) -> SessionState | None:
    deadline = time.monotonic() + timeout
    while True:
        state = contract.read_session(folder)
        if state is not None and until(state):
            return state
        if time.monotonic() >= deadline:
            return state
        time.sleep(POLL)


def _resume_id(plan: HostPlan, old: SessionState | None) -> str | None:
    """The agent session id the next host resumes: the last host's, else the map's."""
    if old is not None and old.session_id:
        return old.session_id
    entry = sessionmap.read_entry(plan.sessions_dir, plan.spec.name)
    return entry.session_id if entry is not None else None


def host_work(plan: HostPlan) -> Callable[[], SessionState]:
    """The lane's work for one start: the live host's record, or a new host's."""

    def work() -> SessionState:
        old = contract.read_session(plan.folder)
        if old is not None and old.live and host_alive(old):
            if old.state != contract.CLOSING:
                return old
            old = _wait_state(plan.folder, lambda s: not s.live, CLOSING_WAIT)
            if old is not None and old.live and host_alive(old):
                raise HostFailed(f"session {plan.spec.name}'s host did not end its closing")
        resume = _resume_id(plan, old)
        spec = HostSpec(**{**plan.spec.__dict__, "resume_id": resume})
        try:
            pid = launch(spec, plan.argv)
        except LaunchFailed as exc:
            raise HostFailed(str(exc)) from exc
        state = _wait_state(
            plan.folder,
            lambda s: s.host_pid == pid and (s.agent_pid is not None or not s.live),
            HOST_READY,
        )
        if state is None or state.host_pid != pid:
            raise HostFailed(f"the session host (pid {pid}) wrote no session.json in time")
        if not state.live or state.agent_pid is None:
            raise HostFailed(state.detail or f"the session host ended: {state.ended_reason}")
        return state

    return work


def request_file(folder: Path, job_id: str) -> Path:
    return folder / contract.REQUESTS_DIR / f"{job_id}.json"


class SessionStart(Starting):
    """The host on the lane; collected when it answered (or at its deadline)."""

    def __init__(
        self,
        executor: SessionExecutor,
        launch: Launch,
        call: Call[SessionState],
        plan: HostPlan,
        message: TurnRequest,
    ) -> None:
        deadline = time.monotonic() + CLOSING_WAIT + HOST_READY + 20.0
        super().__init__(launch.record, launch.run_dir, deadline)
        self.executor, self.launch, self.call, self.plan = executor, launch, call, plan
        self.message = message
        self.state: SessionState | None = None

    def fileno(self) -> int:
        return self.call.fileno()

    def report(self) -> Report:
        record, run_dir = self.record, self.run_dir
        if not self.call.done():
            self.call.close()
            why = "its session host did not answer by the start's deadline"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        try:
            state = self.call.result()
        except (HostFailed, OSError) as exc:
            why = f"session {self.plan.spec.name}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        finally:
            self.call.close()
        self.state = state
        ctx = self.executor.ctx
        agent_pid = state.agent_pid
        fact = Started(
            at=ctx.clock.now(),
            owner=ctx.owner,
            workdir=state.workdir,
            argv0=str(self.plan.spec.agent.get("bin") or record.agent),
            pid=agent_pid,
            pid_start_time=identity.start_time(agent_pid) if agent_pid else None,
            supervisor_pid=state.host_pid,
            supervisor_start_time=state.host_start,
            host=ctx.host,
        )
        return lifecycle.started(record, fact)

    def release(self, record: JobRecord) -> Running:
        """The running record is durable: the message goes to the host (0600, atomic)."""
        path = request_file(self.plan.folder, record.id)
        write_atomic(path, self.message.to_json(), mode=0o600)
        log.info(
            "job=%s state=queued->running session=%s host=%s",
            record.id,
            self.plan.spec.name,
            record.supervisor_pid,
        )
        ctx = self.executor.ctx
        beat = ctx.clock.monotonic() + ctx.config.heartbeat_interval
        return Running(record, self.run_dir, beat, held=self.plan.folder)

    def abandon(self) -> None:
        """Never released: nothing was typed; a host of this job's own is closed."""
        self.call.close()
        if self.plan.spec.own_job is not None:
            self.executor.close_later(self.plan.folder)


def message_of(
    files: Mapping[str, str], spec_name: str, body_name: str
) -> tuple[dict[str, Any], str]:
    """The agent spec and the message text from the agent's prepared files."""
    spec = json.loads(files[spec_name])
    if not isinstance(spec, dict):
        raise ValueError(f"{spec_name} is not a JSON object")
    return spec, files[body_name].rstrip("\n")


def close_work(folder: Path) -> Callable[[], None]:
    def work() -> None:
        try:
            request(folder, "close", timeout=5.0)
        except HostUnreachable:
            pass

    return work


def interrupt_work(folder: Path) -> Callable[[], None]:
    def work() -> None:
        try:
            request(folder, "interrupt", timeout=5.0)
        except HostUnreachable as exc:
            log.warning("%s: cannot interrupt: %s", folder, exc)

    return work


def session_env(env: Mapping[str, str], shared: bool, name: str) -> dict[str, str]:
    """The agent's environment: a shared session's agent outlives each job, so the
    first job's own variables (its id, run dir, kill token) are not given to it."""
    out = dict(env)
    if shared:
        for key in ("HOPPER_JOB_ID", "HOPPER_RUN_DIR", "HOPPER_JOB_TOKEN", "HOPPER_BRANCH"):
            out.pop(key, None)
        out["HOPPER_SESSION"] = name
    return out


def host_argv() -> tuple[str, ...]:
    """The host's command: ``python -I -m hopper.sessionhost``; HOPPER_SESSION_HOST_ARGV
    (a JSON list) replaces it (the tests' fake agents)."""
    from hopper.sessionhost.launch import HOST_ARGV

    raw = os.environ.get("HOPPER_SESSION_HOST_ARGV")
    if not raw:
        return HOST_ARGV
    argv = json.loads(raw)
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
        raise ValueError("HOPPER_SESSION_HOST_ARGV must be a JSON list of strings")
    return tuple(argv)
