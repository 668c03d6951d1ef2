"""The session host: one live interactive agent in a pseudo-terminal, its turns, its limits.

Theory of operation. One host per live session, in a session of its own (it
outlives the watcher as a job's supervisor does) and a child subreaper (the
agent's whole tree stays below it). It starts the agent's CLI on a pty in the
session's workdir and then loops, never blocking longer than its next
deadline, on one ``select``: the terminal's output (recorded into the
current message job's terminal.cast, fed to attached clients, kept as a
screen tail the agent's ``ready`` reads), its socket (attach, interrupt,
close, poke), and a self-pipe for signals (handlers only set flags).

Messages are files (``requests/<job id>.json``, the executor's); the host
takes the first in job-id order once the agent is ready, types it, and ends
the turn when the agent's Stop-hook marker appears (``stop_hook``), else
when the session log shows the agent waiting and quiet for ``settle``
seconds (``session_log``), else at the job's timeout (``timeout``); an
interrupt ends it ``interrupted`` (two within :data:`DOUBLE_INTERRUPT`
seconds close the session). Each end is written into the job's run
directory (turn.py) before the request is removed, so a watcher that died
meanwhile finds it there after its restart.

The session ends (``session.json`` says why) after ``session_idle`` seconds
with no message (the agent's session id is kept: the next message resumes
it in a new host), at ``session_max``, when the tree's RSS passes
``memory_max``, when the agent exits, on ``close`` or SIGTERM: SIGTERM to
the agent's process group, ``grace``, then SIGKILL rounds (proc/ladder.py,
proc/reaper.py). Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hopper.agents import policy, sessionmap
from hopper.agents.interactive import terminal_replies
from hopper.core import sessions as verdicts
from hopper.errors import HopperError
from hopper.proc import proctree
from hopper.proc.ladder import KillTree, Ladder
from hopper.proc.reaper import Reaper
from hopper.proc.rundir import RunDir
from hopper.sessionhost import contract as c
from hopper.sessionhost.agentapi import InteractiveAgent
from hopper.sessionhost.attach import Listener, Request
from hopper.sessionhost.logread import LogState
from hopper.sessionhost.terminal import Pty, SpawnError
from hopper.sessionhost.turn import Turn, iso, log_model, over_budget, usage_delta

DOUBLE_INTERRUPT = 2.0  # seconds: a second interrupt this soon closes the session
READY_FALLBACK = 60.0  # seconds after the start: type anyway if ready() never said so
# Once the agent has been at its prompt, a screen that drew something after it left the
# prompt (a turn's end, an interrupt) and then stayed still this long is back at it: a
# busy agent animates. (Its last frames may redraw only what changed, never the footer
# ready() looks for.) Not at the start: 2.1.197 drops keys while it probes the terminal.
READY_SETTLED = 2.0
REQUEST_SCAN = 0.25  # seconds between looks at requests/
LOG_SCAN = 0.25  # seconds between reads of the agent's session log
MEMORY_SCAN = 1.0
SCREEN_TAIL = 16 * 1024
READY_QUIET = 0.5  # seconds of no output before a message is typed (a screen drawn in pieces)
# The Enter goes once the screen has answered the paste and been quiet this long (Claude
# Code 2.1.197 probes the terminal after a paste and drops keys typed meanwhile) ...
ENTER_QUIET = 0.8
ENTER_MAX = 5.0  # ... or this long after the paste, quiet or not
MARKER_GRACE = 3.0  # seconds after the Stop hook's marker for the log to show the answer
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class HostSpec:
    """What the executor hands a new host (on its stdin: ``env`` holds secrets)."""

    name: str
    agent_name: str
    session_dir: str
    workdir: str
    agent: Mapping[str, Any]  # the job's agent spec: agent_for() picks the CLI
    env: Mapping[str, str]
    resume_id: str | None = None
    session_idle: float | None = 300.0
    session_max: float | None = 86400.0
    memory_max: int | None = None
    grace: float = 5.0
    settle: float = 3.0  # quiet seconds after the log says "waiting" before the turn ends
    own_job: str | None = None  # a session of its own: ends once this job's turn ended
    rows: int = 40
    cols: int = 120

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> HostSpec:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in obj.items() if k in names})


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
            self._turns(now)
            self._limits(now)
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
    def _pending(self) -> c.TurnRequest | None:
        try:
            names = sorted(os.listdir(self.session_dir / c.REQUESTS_DIR))
        except OSError:
            return None
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            data = c.read_small(self.session_dir / c.REQUESTS_DIR / name)
            req = c.TurnRequest.from_json(data) if data is not None else None
            if req is None or req.job_id in self.done_jobs:
                continue
            if c.read_turn_end(Path(req.run_dir)) is not None:
                self._drop_request(req.job_id)  # ended before a restart of ours
                continue
            return req
        return None

    def _drop_request(self, job_id: str) -> None:
        try:
            os.unlink(self.session_dir / c.REQUESTS_DIR / f"{job_id}.json")
        except OSError:
            pass

    def _turns(self, now: float) -> None:
        if self.turn is not None:
            self._watch_turn(now)
            return
        if now < self.next_requests:
            return
        self.next_requests = now + REQUEST_SCAN
        if not self.ready and self.agent.ready(bytes(self.screen)):
            self.ready = True  # ready after a quiet spell: no new output to look at
            if self.state.state == c.STARTING:
                self.save(state=c.IDLE)
        settled = self.last_output > self.unready_at and now - self.last_output >= READY_SETTLED
        if not self.ready and self.state.state != c.STARTING and settled:
            self.ready = True
        if not self.ready and now - self.unready_at >= READY_FALLBACK:
            self.note(f"the agent never looked ready in {READY_FALLBACK:.0f} s: typing anyway")
            self.ready = True
        if not self.ready or now - self.last_output < READY_QUIET:
            return
        req = self._pending()
        if req is None:
            return
        self._begin_turn(req, now)

    def _markers(self) -> frozenset[str]:
        return frozenset(str(p) for p in self.agent.markers(self.session_dir))

    def _read_log(self) -> tuple[list[str], list[Any]]:
        """job.log's lines for the log's new entries, and the entries."""
        try:
            view = self.agent.read_log(self.log.session_id, self.log.offset)
        except (OSError, ValueError, HopperError) as exc:
            self.note(f"cannot read the agent's session log: {exc}")
            return [], []
        lines, _ = self.log.feed(view)
        entries = getattr(view, "entries", None) or []
        return lines, [e for e in entries if isinstance(e, Mapping)]

    def _begin_turn(self, req: c.TurnRequest, now: float) -> None:
        assert self.pty is not None
        self._read_log()  # up to now: the turn's usage starts here
        number = self.state.turns + 1
        try:
            turn = Turn.begin(
                req, number, self._markers(), self.log.usage, (self.pty.rows, self.pty.cols), now
            )
        except OSError as exc:
            self.note(f"job={req.job_id} run directory unusable: {exc}; request dropped")
            self.done_jobs.add(req.job_id)
            self._drop_request(req.job_id)
            return
        self.turn = turn
        self.log.waiting = False
        turn.log(f"[hopper] turn {number} of session {self.spec.name} (agent pid {self.pty.pid})\n")
        turn.cast.output(bytes(self.screen[-4096:]), now)
        self._unready(now)
        keys = self.agent.type_prompt(req.text)
        if keys.endswith(b"\r"):  # the paste first, its Enter once the screen has taken it
            keys, turn.enter = keys[:-1], b"\r"
        self._type(keys)
        self.save(state=c.BUSY, job=req.job_id, turns=number)
        self.note(f"job={req.job_id} turn={number} typed")

    def _watch_turn(self, now: float) -> None:
        turn = self.turn
        assert turn is not None
        if turn.retry_at is not None and not self._retry_due(turn, now):
            return
        if turn.retype and not self._retype(turn, now):
            return
        if turn.enter:
            shown = self.last_output > turn.typed_at
            quiet = shown and now - self.last_output >= ENTER_QUIET
            if quiet or now - turn.typed_at >= ENTER_MAX:
                self._type(turn.enter)
                turn.enter, turn.typed_at = b"", now
        new_markers = self._markers() - turn.markers
        if now >= self.next_log or (new_markers and turn.marker_at is None):
            self.next_log = now + LOG_SCAN
            lines, entries = self._read_log()
            if lines:
                turn.log("".join(lines))
            if entries:
                turn.entries.extend(entries)
                turn.last_change = now
                turn.live.last_activity = time.time()
            turn.live.set(
                verdicts.turn_state(turn.entries, now, turn.last_change, self.spec.settle)
            )
            if entries:
                usage = usage_delta(turn.usage_before, self.log.usage)
                over = over_budget(
                    turn.request, usage, log_model(turn.entries), self.spec.agent_name
                )
                if over is not None:  # stopped as `hopper interrupt` stops it; the session lives on
                    self._unready(now)
                    self._type(self.agent.interrupt_keys())
                    self._end_turn(c.BUDGET, over, now)
                    return
        verdict = verdicts.turn_verdict(
            markers=len(new_markers),
            entries=turn.entries,
            now=now,
            last_change=turn.last_change,
            deadline=None,  # the timeout is the host's: it interrupts the turn too
            settle=self.spec.settle,
        )
        kind = verdicts.api_error_kind(turn.entries) if verdict is not None else None
        if verdict is not None and kind is not None:
            self._api_error(turn, kind, verdict.how, now)
        elif verdict is not None and verdict.how == c.STOP_HOOK:
            # The hook may fire before the log has the answer: a moment for it to land.
            if turn.marker_at is None:
                turn.marker_at = now
                self.next_log = now
            answered = verdicts.agent_state(turn.entries, now, now, 0.0) == "waiting_for_input"
            if answered or now - turn.marker_at >= MARKER_GRACE:
                # The Stop hook says the agent finished and is back at its prompt. Its last
                # frames may have redrawn only what changed (not the input box's footer the
                # screen check looks for), so the screen alone could miss it until the
                # READY_FALLBACK; the next message still waits for a quiet screen.
                self.ready = True
                self._end_turn(c.STOP_HOOK, "", now)
        elif verdict is not None:
            detail = f"the session log says {verdict.state} (quiet {self.spec.settle:g} s)"
            self.ready = self.ready or verdict.state == "waiting_for_input"
            self._end_turn(c.SESSION_LOG, detail, now)
        elif turn.deadline is not None and now >= turn.deadline:
            self._unready(now)
            self._type(self.agent.interrupt_keys())
            self._end_turn(c.TIMEOUT, f"no end of turn within {turn.request.timeout:g} s", now)
        else:
            self._idle(turn, now)

    def _api_error(self, turn: Turn, kind: str, how: str, now: float) -> None:
        """An API error ended the agent's reply (it is back at its prompt). ``on_error``,
        as for a headless job: ``retry`` types the message again after hopper's backoff
        (up to ``api_retries``, the kinds hopper retries); else the job fails
        ``agent_error/<kind>``, and ``pause`` holds the session's later messages."""
        req = turn.request
        self.ready = True
        text = (verdicts.turn_result(turn.entries) or "")[:300]
        if policy.retries_error(req.on_error, kind, turn.retries, req.api_retries):
            turn.retries += 1
            delay = policy.retry_delay(req.retry_backoff, turn.retries, None)
            turn.retry_at = now + delay
            turn.event("agent_retry", attempt=turn.retries, kind=kind, delay_seconds=delay)
            line = f"{kind}: retry {turn.retries}/{req.api_retries} in {delay:g}s"
            turn.log(f"[hopper] {line}\n")
            turn.live.set("retrying", kind, line)
            self.note(f"job={req.job_id} turn={turn.number} {line}")
            return
        paused = None
        if policy.pauses_on(req.on_error, kind) and req.session and req.sessions_dir:
            why = f"failed agent_error/{kind} (on_error = pause): {text[:200]}"
            try:
                path = sessionmap.write_pause(Path(req.sessions_dir), req.session, req.job_id, why)
            except OSError as exc:
                self.note(f"job={req.job_id} cannot pause session {req.session}: {exc}")
            else:
                paused = req.session
                turn.event("session_paused", session=req.session, error_kind=kind)
                turn.log(f"[hopper] session {req.session} paused: remove {path} to go on\n")
        detail = f"the agent reported an error ({kind}): {text}"
        self._end_turn(how, detail, now, error=kind, paused=paused)

    def _retry_due(self, turn: Turn, now: float) -> bool:
        """Waiting out the backoff before an ``on_error`` retry: True once the message is
        to be typed again (the job's timeout still ends the turn meanwhile)."""
        assert turn.retry_at is not None
        if turn.deadline is not None and now >= turn.deadline:
            self._end_turn(c.TIMEOUT, f"no end of turn within {turn.request.timeout:g} s", now)
            return False
        if now < turn.retry_at:
            return False
        turn.retry_at, turn.marker_at, turn.retype = None, None, True
        turn.entries.clear()  # the error is behind: the turn is judged from here on
        turn.markers = self._markers()
        turn.last_change = now
        turn.live.set("working")
        return True

    def _retype(self, turn: Turn, now: float) -> bool:
        """After an ``on_dead`` resume: the message typed again once the new agent is ready."""
        if not self.ready and self.agent.ready(bytes(self.screen)):
            self.ready = True
        if not self.ready and now - self.unready_at >= READY_FALLBACK:
            self.ready = True
        if not self.ready or now - self.last_output < READY_QUIET:
            return False
        keys = self.agent.type_prompt(turn.request.text)
        if keys.endswith(b"\r"):
            keys, turn.enter = keys[:-1], b"\r"
        self._unready(now)
        turn.retype, turn.typed_at = False, now
        self._type(keys)
        self.note(f"job={turn.request.job_id} turn={turn.number} typed again")
        return True

    def _resume(self, turn: Turn, detail: str, now: float) -> bool:
        """``on_dead = "resume"``: a new agent on ``--resume <session id>`` for the turn
        (once); False when it does not apply or cannot start."""
        sid = self.log.session_id
        if turn.request.on_dead != "resume" or turn.resumed or not sid or self.ladder.stopping:
            return False
        turn.resumed = True
        spec = self.spec
        try:
            argv = self.agent.argv(sid)
            pty = Pty.spawn(argv, self.agent.env(spec.env), spec.workdir, (spec.rows, spec.cols))
        except (SpawnError, OSError, ValueError, HopperError) as exc:
            self.note(f"job={turn.request.job_id} the agent cannot be resumed: {exc}")
            return False
        if self.pty is not None:
            self.pty.close()
        self.pty = pty
        self.reaper.pid, self.reaper.status = pty.pid, None
        self._unready(now)
        turn.retype = True
        turn.event("nudge", nudge=1, max_nudges=1, why="dead", detail=detail, agent_pid=pty.pid)
        turn.log(f"[hopper] {detail}: resuming session {sid} (agent pid {pty.pid})\n")
        self.note(f"job={turn.request.job_id} {detail}: resumed {sid} as pid {pty.pid}")
        self.save(agent_pid=pty.pid)
        return True

    def _idle(self, turn: Turn, now: float) -> None:
        """``idle_timeout``: working, yet nothing new in the session log since the last
        typing: a nudge typed into the session (``on_idle = "nudge"``, up to
        ``max_nudges``), else the turn ends ``idle_timeout``. Not the terminal: Claude's
        TUI redraws its spinner (elapsed seconds) all the while it waits on the model."""
        req = turn.request
        if req.idle_timeout is None or turn.enter or turn.live.state != "working":
            return
        quiet = now - max(turn.last_change, turn.typed_at)
        if quiet < req.idle_timeout:
            return
        if req.on_idle == "nudge" and turn.nudges < req.max_nudges:
            turn.nudges += 1
            turn.event("nudge", nudge=turn.nudges, max_nudges=req.max_nudges, why="idle")
            turn.log(f"[hopper] nudge {turn.nudges}/{req.max_nudges}: idle for {quiet:.0f} s\n")
            self.note(f"job={req.job_id} turn={turn.number} nudge {turn.nudges}: idle")
            keys = self.agent.type_prompt(policy.idle_nudge_text(req.idle_timeout).rstrip("\n"))
            if keys.endswith(b"\r"):
                keys, turn.enter = keys[:-1], b"\r"
            turn.typed_at = now
            self._type(keys)
            return
        spent = f" ({turn.nudges} nudges spent)" if req.on_idle == "nudge" else ""
        self._unready(now)
        self._type(self.agent.interrupt_keys())
        detail = f"no output for idle_timeout ({req.idle_timeout:g} s){spent}"
        self._end_turn(c.IDLE_TIMEOUT, detail, now)

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
        turn.result = answer if how in c.COMPLETED_TURNS else None
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
        self._drop_request(turn.request.job_id)
        if self.spec.own_job is not None and turn.request.job_id == self.spec.own_job:
            self._close(c.ENDED_JOB, "its one job ended", now)

    # -- limits and the end ---------------------------------------------------------
    def _limits(self, now: float) -> None:
        spec = self.spec
        if spec.session_max is not None and now - self.born >= spec.session_max:
            self._close(c.ENDED_MAX_AGE, f"session_max ({spec.session_max:g} s) reached", now)
            return
        idle = self.turn is None and spec.session_idle is not None
        if idle and spec.session_idle is not None and now - self.idle_since >= spec.session_idle:
            if self._pending() is None:
                self._close(
                    c.ENDED_IDLE, f"no message for session_idle ({spec.session_idle:g} s)", now
                )
                return
            self.idle_since = now
        if spec.memory_max is not None and now >= self.next_memory:
            self.next_memory = now + MEMORY_SCAN
            rss = tree_rss()
            if rss > spec.memory_max:
                self._close(
                    c.ENDED_MEMORY,
                    f"the session's tree used {rss} bytes, over memory_max {spec.memory_max}",
                    now,
                )

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
            if self._resume(self.turn, detail, now):
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


def tree_rss() -> int:
    """The resident bytes of every process below the host."""
    procs = proctree.tree()
    if procs is None:
        scan = proctree.scan()
        procs = {pid: scan[pid] for pid in proctree.below(scan)}
    pages = 0
    for fields in procs.values():
        try:
            if fields[proctree.STATE] != b"Z":
                pages += int(fields[proctree.RSS])
        except (IndexError, ValueError):
            continue
    return pages * os.sysconf("SC_PAGE_SIZE")


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
