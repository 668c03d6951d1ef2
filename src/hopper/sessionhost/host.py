"""The session host: one live interactive agent in a pseudo-terminal, its turns, its limits.

Theory of operation. One host per live session, in a session of its own (it
outlives the watcher as a job's supervisor does) and a child subreaper (the
agent's whole tree stays below it). It starts the agent's CLI on a pty in the
session's workdir and then loops, never blocking longer than its next
deadline, on one ``select``: the terminal's output (recorded into the
current message job's terminal.cast, fed to attached clients, kept as a
screen tail the agent's ``ready`` reads), its socket (attach, interrupt,
close, poke), and a self-pipe for signals (handlers only set flags).

Messages are files (``requests/<job id>.json``, the executor's), typed one at
a time and watched to their turn's end (messages.py: the Stop-hook marker,
the session log, the timeout); the turn policies are policies.py's
(``on_error``, ``on_dead``, ``on_idle``); an interrupt ends a turn
``interrupted`` (two within :data:`DOUBLE_INTERRUPT` seconds close the
session). Each end is written into the job's run directory (turn.py) before
the request is removed, so a watcher that died meanwhile finds it there
after its restart.

The session ends (``session.json`` says why) at one of its limits
(limits.py: ``session_idle``, ``session_max``, ``memory_max``), when the
agent exits, on ``close`` or SIGTERM: SIGTERM to the agent's process group,
``grace``, then SIGKILL rounds (proc/ladder.py, proc/reaper.py). Standard
library only.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hopper.agents.interactive import terminal_replies
from hopper.core import sessions as verdicts
from hopper.errors import HopperError
from hopper.proc.ladder import KillTree, Ladder
from hopper.proc.reaper import Reaper
from hopper.proc.rundir import RunDir
from hopper.sessionhost import contract as c
from hopper.sessionhost import limits, messages, policies
from hopper.sessionhost.agentapi import InteractiveAgent
from hopper.sessionhost.attach import Listener, Request
from hopper.sessionhost.logread import LogState
from hopper.sessionhost.spec import HostSpec
from hopper.sessionhost.terminal import Pty, SpawnError
from hopper.sessionhost.timing import DOUBLE_INTERRUPT, ENTER_QUIET, MARKER_GRACE
from hopper.sessionhost.turn import Turn, iso

__all__ = ["Host", "HostSpec", "serve"]  # HostSpec: spec.py's, here too for older imports

SCREEN_TAIL = 16 * 1024  # bytes of the screen kept (ready(), attach)
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Flags:
    term: bool = False
    child: bool = False


@dataclass
class Host:
    spec: HostSpec
    agent: InteractiveAgent
    session_dir: Path = field(init=False)
    files: RunDir = field(init=False)
    flags: Flags = field(default_factory=Flags)

    def __post_init__(self) -> None:
        self.session_dir = Path(self.spec.session_dir)
        self.files = RunDir(self.spec.session_dir)
        self.reaper = Reaper()
        self.pty: Pty | None = None
        self.turn: Turn | None = None
        self.log = LogState()
        self.log.session_id = self.spec.resume_id
        now = time.monotonic()
        self.born = now
        self.idle_since = now
        self.ready = False
        self.screen = bytearray()
        self.last_output = now
        self.unready_at = now  # when the agent was last not known to be at its prompt
        self.ladder = Ladder(grace=self.spec.grace)
        self.last_interrupt = -1e9
        self.next_requests = self.next_log = self.next_memory = now
        self.done_jobs: set[str] = set()
        # Nudges a finished turn left queued in the agent: each is answered as a turn
        # of its own (a Stop marker each) before the next message may be typed.
        self.owed = 0
        self.owed_markers: frozenset[str] = frozenset()
        self.owed_since = now
        self.state = c.SessionState(
            name=self.spec.name,
            agent=self.spec.agent_name,
            workdir=self.spec.workdir,
            state=c.STARTING,
            host_pid=os.getpid(),
            host_start=start_time(os.getpid()),
            started_at=iso(time.time()),
            updated_at=iso(time.time()),
            session_id=self.spec.resume_id,
        )
        self.listener = Listener(self.files.fd)

    # -- records ------------------------------------------------------------------
    def note(self, text: str) -> None:
        line = f"{iso(time.time())} {text}\n"
        try:
            self.files.append(c.HOST_LOG, line.encode(errors="replace"))
        except OSError:
            pass

    def save(self, **changes: Any) -> None:
        self.state = replace(self.state, updated_at=iso(time.time()), **changes)
        try:
            self.files.replace(c.SESSION_FILE, self.state.to_json(), durable=True)
        except OSError as exc:
            self.note(f"cannot write session.json: {exc}")

    # -- start --------------------------------------------------------------------
    def start(self) -> bool:
        spec = self.spec
        try:
            self.agent.prepare(self.session_dir, Path(spec.workdir), spec.env)
            env = self.agent.env(spec.env)
            argv = self.agent.argv(spec.resume_id)
            self.pty = Pty.spawn(argv, env, spec.workdir, (spec.rows, spec.cols))
        except (SpawnError, OSError, ValueError, HopperError) as exc:
            self.note(f"the agent cannot start: {exc}")
            self.save(
                state=c.ENDED,
                ended_reason=c.ENDED_FAILED,
                ended_at=iso(time.time()),
                detail=f"the agent cannot start: {exc}",
            )
            return False
        self.reaper.pid = self.pty.pid
        sid = getattr(self.agent, "session_id", None)  # the conversation argv() names
        if isinstance(sid, str) and sid:
            self.log.session_id = sid
        self.save(agent_pid=self.pty.pid, session_id=self.log.session_id)
        self.note(f"agent pid={self.pty.pid} argv0={argv[0]} resume={spec.resume_id}")
        return True

    # -- the loop -----------------------------------------------------------------
    def run(self) -> int:
        if not self.start():
            self.listener.close()
            return 1
        assert self.pty is not None
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGCHLD, self._on_child)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            while not self._over():
                self._step(wake_r)
        finally:
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
        self._finish()
        return 0

    def _on_term(self, signum: int, frame: object) -> None:
        self.flags.term = True

    def _on_child(self, signum: int, frame: object) -> None:
        self.flags.child = True

    def _over(self) -> bool:
        """The agent is reaped and nothing is left below the host."""
        return self.pty is None or (
            self.reaper.status is not None and not self.reaper.has_children()
        )

    def _timeout(self, now: float) -> float:
        due = [self.next_requests, self.next_memory]
        if self.turn is not None:
            due.append(self.next_log)
            if self.turn.enter:
                due.append(now + ENTER_QUIET / 2)
            if self.turn.marker_at is not None:
                due.append(self.turn.marker_at + MARKER_GRACE)
            if self.turn.deadline is not None:
                due.append(self.turn.deadline)
            if self.turn.retry_at is not None:
                due.append(self.turn.retry_at)
        if self.ladder.due is not None:
            due.append(self.ladder.due)
        return max(0.0, min(min(due) - now, 1.0))

    def _step(self, wake_r: int) -> None:
        assert self.pty is not None
        now = time.monotonic()
        fds: list[Any] = [wake_r, self.listener, *self.listener.clients]
        if self.pty.master >= 0:
            fds.append(self.pty.master)
        writers = [cl for cl in self.listener.clients if cl.outbuf]
        try:
            readable, writable, _ = select.select(fds, writers, [], self._timeout(now))
        except InterruptedError:
            readable, writable = [], []
        now = time.monotonic()
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        for client in writable:
            self.listener.flush(client)
        if self.pty.master in readable:
            self._output(now)
        if self.listener in readable:
            self.listener.accept()
        for client in list(self.listener.clients):
            if client in readable:
                for req in self.listener.read(client):
                    self._serve(req, now)
        self.reaper.reap()
        if self.flags.term:
            self.flags.term = False
            self._close(c.ENDED_CLOSED, "the host was asked to stop (SIGTERM)", now)
        if self.reaper.status is not None and self.ladder.due is None:
            self._agent_gone(now)
        if self.ladder.due is None:
            messages.turns(self, now)
            limits.check(self, now)
        self._ladder(now)

    # -- terminal -----------------------------------------------------------------
    def _output(self, now: float) -> None:
        assert self.pty is not None
        data = self.pty.read()
        if data is None:  # every holder of the slave side is gone
            self.pty.close()
            self.pty.master = -1
            return
        if not data:
            return
        self.screen += data
        del self.screen[:-SCREEN_TAIL]
        self.last_output = now
        if not any(not cl.read_only for cl in self.listener.attached()):
            replies = terminal_replies(data)  # a person's terminal answers for itself
            if replies:
                self._type(replies)
        if self.turn is not None:
            self.turn.cast.output(data, now)
        self.listener.broadcast(data)
        if not self.ready and self.agent.ready(bytes(self.screen)):
            self.ready = True
            if self.state.state == c.STARTING:
                self.save(state=c.IDLE)

    def _unready(self, now: float) -> None:
        """The agent leaves its prompt (a message typed, an interrupt): the screen so far
        says nothing about when it is back."""
        self.ready = False
        self.screen.clear()
        self.unready_at = now

    def _type(self, data: bytes) -> None:
        if self.pty is not None and self.pty.master >= 0:
            self.pty.write(data)

    # -- requests from the socket ---------------------------------------------------
    def _serve(self, req: Request, now: float) -> None:
        if req.op == "input":
            self._type(req.data)
            return
        if req.op == "attach":
            self.listener.answer(req.client, {"ok": True, "state": self.state.state})
            self.listener.send(req.client, bytes(self.screen))
            self.listener.flush(req.client)
            return
        if req.op == "poke":
            self.next_requests = now
            self.listener.answer(req.client, {"ok": True}, end=True)
            return
        if req.op == "close":
            self._close(c.ENDED_CLOSED, "closed on request (hopper sessions close)", now)
            self.listener.answer(req.client, {"ok": True, "state": self.state.state}, end=True)
            return
        # interrupt
        double = now - self.last_interrupt <= DOUBLE_INTERRUPT
        self.last_interrupt = now
        if double:
            self._close(c.ENDED_CLOSED, "two interrupts within 2 s", now)
            self.listener.answer(req.client, {"ok": True, "closed": True}, end=True)
            return
        job = self.turn.request.job_id if self.turn is not None else None
        submitted = self.turn is not None and not self.turn.enter
        if submitted:  # typed again once the agent shows its prompt anew
            self._unready(now)
        self._type(self.agent.interrupt_keys())
        if self.turn is not None:
            self._end_turn(c.INTERRUPTED, "interrupted on request", now)
            self.ready = self.ready or not submitted  # its Enter never went: still at the prompt
        self.listener.answer(req.client, {"ok": True, "job": job}, end=True)

    # -- turns ----------------------------------------------------------------------
    def _end_turn(
        self, how: str, detail: str, now: float, error: str | None = None, paused: str | None = None
    ) -> None:
        turn = self.turn
        if turn is None:
            return
        if self.pty is not None and self.pty.master >= 0:
            self._output(now)  # what the terminal shows up to the end goes into the cast
        self.turn = None
        answer = verdicts.turn_result(turn.entries) or self.log.last_text
        ended_by = sorted(messages.markers(self) - turn.markers)[:1] if how == c.STOP_HOOK else []
        if answer is None and ended_by:  # the log lacks it: the hook may carry it
            answer = self.agent.stop_answer(Path(ended_by[0]))
        turn.result = answer if how in c.COMPLETED_TURNS else None
        sent = turn.typed[:-1] if turn.enter else turn.typed  # the last one's Enter not yet
        if how in c.COMPLETED_TURNS and sent:
            self.owed = verdicts.queued_after(turn.entries, sent)
            self.owed_markers, self.owed_since = turn.markers | frozenset(ended_by), now
        pid = self.pty.pid if self.pty is not None else None
        record = turn.finish(how, detail, self.log.session_id, pid, self.log.usage, error, paused)
        self.done_jobs.add(turn.request.job_id)
        self.idle_since = now
        self.note(f"job={turn.request.job_id} turn={turn.number} ended={how}")
        self.log.last_text = None
        state = self.state.state if self.state.state == c.CLOSING else c.IDLE
        self.save(
            state=state,
            job=None,
            session_id=self.log.session_id,
            usage=dict(self.log.usage),
            last_turn_at=iso(time.time()),
        )
        turn.commit(record)  # after session.json: whoever sees turn.json sees the session idle
        messages.drop_request(self, turn.request.job_id)
        if self.spec.own_job is not None and turn.request.job_id == self.spec.own_job:
            self._close(c.ENDED_JOB, "its one job ended", now)

    # -- limits and the end ---------------------------------------------------------
    def _close(self, why: str, detail: str, now: float) -> None:
        if self.ladder.stopping:
            return
        self.note(f"closing: {why}: {detail}")
        if self.turn is not None:
            self._end_turn(c.SESSION_ENDED, f"the session ended: {detail}", now)
        self.save(state=c.CLOSING, ended_reason=why, detail=detail)
        self.ladder = self.ladder.begin(now, [signal.SIGTERM])

    def _agent_gone(self, now: float) -> None:
        status = self.reaper.status
        assert status is not None
        code = os.waitstatus_to_exitcode(status)
        detail = f"the agent exited (status {code})"
        if self.turn is not None:
            if policies.resume(self, self.turn, detail, now):
                return
            self._end_turn(c.AGENT_EXITED, detail, now)
        if self.state.ended_reason is None:
            self.save(ended_reason=c.ENDED_AGENT, detail=detail)
        self.ladder = self.ladder.begin(now, [])  # leftovers: SIGKILL rounds

    def _ladder(self, now: float) -> None:
        self.ladder, action = self.ladder.step(now)
        if action is None or self.pty is None:
            return
        if isinstance(action, KillTree):
            self.pty.signal_group(signal.SIGKILL)
            self.reaper.kill_all()
        else:
            self.pty.signal_group(action.signal)

    def _finish(self) -> None:
        if self.pty is not None:
            self.pty.close()
        self.listener.close()
        reason = self.state.ended_reason or c.ENDED_AGENT
        self.save(state=c.ENDED, job=None, ended_reason=reason, ended_at=iso(time.time()))
        self.note(f"ended: {reason}")


def start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch, as psutil reckons it
    (proc/identity.py compares with psutil's create_time)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return None


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def serve(spec: HostSpec, agent: InteractiveAgent) -> int:
    """Run a host for ``spec`` in this process until its session ends."""
    become_subreaper()
    os.makedirs(Path(spec.session_dir) / c.REQUESTS_DIR, mode=0o700, exist_ok=True)
    return Host(spec, agent).run()
