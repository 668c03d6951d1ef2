"""One run of an agent CLI under the driver: started, streamed, judged as it goes.

The driver (agents/drive.py) decides across runs: hopper's retries, nudges,
the check, the session, the final record. :class:`CliRun` runs the CLI once:

* in its own process group, with the message on stdin (never on a command
  line), its stdout on a pipe, its stderr into job.log;
* every raw stream line appended to ``agent.jsonl`` and rendered, human
  readable, to the driver's stdout, which *is* job.log, as it arrives;
* each error the CLI reports judged as it arrives (``live_action``): one
  hopper acts on stops the CLI's whole group at once;
* ``agent.state.json`` kept current (starting, working, idle, retrying …);
* a run that prints nothing for ``idle_timeout`` stopped (SIGINT, SIGTERM,
  SIGKILL to the group);
* the spend followed as each message's usage arrives (agents/budget.py): a run
  that reaches the job's ``max_cost_usd`` or ``max_tokens`` before it ends is
  stopped the same way (``budget_exceeded``);
* the supervisor's stop signals, which the driver receives, passed on to the
  CLI's group.

It returns a :class:`RunResult`. Standard library plus hopper's pure stream
and outcome modules, like the driver (no pydantic).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hopper.agents.argv import cli_for, turn_argv
from hopper.agents.budget import JobBudget
from hopper.agents.groupstop import GroupStop
from hopper.agents.livestate import LiveState
from hopper.agents.stream import DIALECTS, StreamState, parse_line
from hopper.core.agent_outcome import judge, live_action

STREAM_FILE = "agent.jsonl"
BUDGET_EXCEEDED = "budget_exceeded"  # a RunResult's kind when a spending limit ended it
DEFAULT_IDLE_AFTER = 30.0  # seconds without output before the live state says idle
FRAGMENT_EVERY = 0.5  # seconds: streamed text still waiting for its newline reaches job.log


@dataclass
class RunResult:
    state: StreamState
    exit_code: int | None
    idle: bool
    ok: bool
    kind: str | None
    detail: str
    text_tail: str = ""
    dead: bool = False  # the CLI ended without a result and nobody stopped it
    delay: float | None = None  # the CLI's announced retry delay, when hopper took over


class Note(Protocol):
    """Append an event to events.jsonl (the driver's ``event``)."""

    def __call__(self, name: str, **fields: Any) -> None: ...


class CliRun:
    def __init__(
        self,
        spec: dict[str, Any],
        dialect: str,
        live: LiveState,
        note: Note,
        say: Callable[[str], None],
        signals: list[int],
        stopping: Callable[[], bool],
        budget: JobBudget | None = None,
    ) -> None:
        """``signals``: the driver's list of stop signals received, taken from here;
        ``stopping``: whether the driver was told to stop; ``budget``: the job's limits
        and what its earlier runs spent."""
        self.spec = spec
        self.run_dir = Path(spec["run_dir"])
        self.workdir = str(spec["workdir"])
        self.dialect = dialect
        self.structured = dialect in DIALECTS
        self.live = live
        self.note = note
        self.say = say
        self.signals = signals
        self.stopping = stopping
        self.taken: tuple[str, str, float | None] | None = None  # a live error hopper acted on
        self.budget = budget
        self.over: str | None = None  # the detail of the spending limit this run reached

    def run(self, message: Path, session_id: str | None, resume: bool) -> RunResult:
        """Run the CLI once on ``message`` (resuming ``session_id`` when ``resume``)."""
        argv = turn_argv(self.spec, message, session_id, resume)
        state = StreamState(self.dialect)
        self.note("agent_started", argv0=argv[0], resume=resume, session_id=session_id)
        self.say(f"[hopper] {'resuming' if resume else 'starting'} {self.spec.get('agent_name')}")
        self.live.set("starting")
        stdin_path = message if self.spec.get("stdin", True) else Path(os.devnull)
        # a CLI whose stdout is silent while it streams traces its progress on stderr
        # (not through a container's engine: the tracing would not reach inside)
        progress = None if self.spec.get("container") else cli_for(self.spec).progress
        env = {**os.environ, **progress.env(os.environ)} if progress else None
        with open(stdin_path, "rb") as stdin:
            try:
                # its own group: an idle or error stop reaches every child it started
                proc = subprocess.Popen(
                    argv,
                    cwd=self.workdir,
                    env=env,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if progress else None,
                    process_group=0,
                )
            except OSError as exc:
                self.say(f"[error] cannot start {argv[0]}: {exc}")
                return RunResult(state, None, False, False, "unknown", f"cannot start: {exc}")
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        err = _Stderr(proc.stderr, progress.marker, progress.usage) if progress else None
        idle_timeout = self.spec.get("idle_timeout")
        idle_after = float(self.spec.get("idle_after") or DEFAULT_IDLE_AFTER)
        if idle_timeout is not None:
            idle_after = min(idle_after, float(idle_timeout) / 2)
        buf = b""
        tail = b""
        last = time.monotonic()
        idle = False
        self.taken = None
        self.over = None
        stop = GroupStop(proc, float(self.spec.get("grace", 5.0)))
        stream = open(self.run_dir / STREAM_FILE, "ab")  # noqa: SIM115
        shown = time.monotonic()  # when streamed text last reached the log
        try:
            while True:
                if self.signals:  # the supervisor's stop: pass it on, it escalates itself
                    stop.send(self.signals.pop(0))
                if stop.tick():
                    break
                fds = [fd] if err is None or err.closed else [fd, err.fd]
                ready, _, _ = select.select(fds, [], [], 0.2)
                if err is not None and err.fd in ready and err.read(state):
                    last = time.monotonic()  # the stream moves: not idle
                    if not self.taken:
                        self.live.activity()
                    if self._over_budget(state):
                        stop.begin()
                if time.monotonic() - shown >= FRAGMENT_EVERY:
                    shown = time.monotonic()
                    self._fragment(state)
                if fd not in ready:
                    quiet = time.monotonic() - last
                    if quiet >= idle_after and self.live.state in ("starting", "working"):
                        self.live.set("idle", detail=f"no output for {quiet:.0f}s")
                    timed_out = idle_timeout is not None and quiet >= idle_timeout
                    if timed_out and not idle and not self.taken:
                        idle = True
                        self.note("idle_timeout", idle_timeout_seconds=idle_timeout)
                        if state.close_line():
                            self.say("")
                        self.say(f"[hopper] no output for {idle_timeout:g}s: stopping the agent")
                        stop.begin()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                last = time.monotonic()
                if not self.taken:
                    self.live.activity()
                if not self.structured:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    tail = (tail + chunk)[-20000:]
                    continue
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self._line(line, state, stream)
                if lines:
                    shown = time.monotonic()
                if self._judge_live(state) or self._over_budget(state):
                    stop.begin()
            if buf.strip():
                self._line(buf, state, stream)
            if err is not None:
                err.drain(state)
            self._fragment(state)
            if state.close_line():  # a line cut short ends here
                self.say("")
        finally:
            stream.close()
            proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()
        code = self._wait(proc)
        self.note("agent_exited", exit_code=code)
        if self.over is not None:
            return RunResult(state, code, False, False, BUDGET_EXCEEDED, self.over)
        if state.budget_stop:  # the CLI's own guard (--max-budget-usd) ended it
            own = "the CLI's own budget guard (--max-budget-usd) ended the run"
            detail = (self.budget.reached(state) if self.budget else None) or own
            return RunResult(state, code, False, False, BUDGET_EXCEEDED, detail)
        if self.taken is not None:
            _, kind, delay = self.taken
            detail = f"the CLI reported a {kind} error and was stopped at once"
            return RunResult(state, code, False, False, kind, detail, delay=delay)
        if not self.structured:
            ok = code == 0
            return RunResult(
                state,
                code,
                idle,
                ok,
                None if ok else "unknown",
                "the agent exited 0" if ok else f"the agent exited {code}",
                tail.decode("utf-8", "replace"),
            )
        if idle:
            return RunResult(state, code, True, False, None, "no output for idle_timeout")
        verdict = judge(state.summary(), code)
        dead = not state.completed and not state.failed and not self.stopping()
        return RunResult(state, code, False, verdict.ok, verdict.kind, verdict.detail, dead=dead)

    def _over_budget(self, state: StreamState) -> bool:
        """True (once) when the spend so far reached a limit of the job while the run goes
        on; a run that already reported its end is left to end (its work is done)."""
        if self.budget is None or self.over is not None or self.taken or state.completed:
            return False
        detail = self.budget.reached(state)
        if detail is None:
            return False
        self.over = detail
        if state.close_line():
            self.say("")
        self.note(BUDGET_EXCEEDED, detail=detail)
        self.say(f"[hopper] {detail}: stopping the agent")
        return True

    def _line(self, line: bytes, state: StreamState, stream: Any) -> None:
        if not line.strip():
            return
        stream.write(line + b"\n")
        stream.flush()
        obj = parse_line(line)
        if obj is None:
            if state.close_line():
                self.say("")
            self.say(line.decode("utf-8", "replace"))
            return
        for text in state.feed(obj):
            self.say(text)

    @staticmethod
    def _fragment(state: StreamState) -> None:
        """Streamed text still waiting for its newline, into job.log as it stands."""
        text = state.take_fragment()
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()

    def _judge_live(self, state: StreamState) -> bool:
        """Act on what the stream just said; True when the CLI must be stopped now."""
        if state.live and state.close_line():
            self.say("")
        if state.waiting and not self.taken:
            self.live.set("waiting_for_input", detail=state.waiting)
        state.waiting = None
        stop = False
        for err in state.live:
            action = live_action(err.kind)
            self.note("agent_api_error", error_kind=err.kind, detail=err.text, action=action)
            if self.taken:
                continue
            if action == "wait":  # the CLI retries it (a 500 …): show it
                self.live.set("retrying", err.kind, err.text)
                continue
            self.taken = (action, err.kind, err.delay_seconds)
            stop = True
            if action == "stop":
                self.live.set("api_error", err.kind, err.text)
                self.say(f"[hopper] {err.kind} error ({err.text}): stopping the agent")
            else:
                self.live.set("retrying", err.kind, err.text)
                self.say(f"[hopper] {err.kind} ({err.text}): hopper takes over the retry")
        state.live.clear()
        return stop

    @staticmethod
    def _wait(proc: subprocess.Popen[bytes]) -> int | None:
        rc = proc.wait()
        return rc if rc >= 0 else None


class _Stderr:
    """A CLI's stderr on a pipe: lines holding the progress ``marker`` are counted, not
    logged; the others are copied to job.log whole (a line cut short only at the end)."""

    def __init__(
        self,
        pipe: Any,
        marker: bytes,
        usage: Callable[[bytes], tuple[dict[str, int], str | None] | None] | None = None,
    ) -> None:
        self.fd: int = pipe.fileno()
        self.marker = marker
        self.usage = usage
        self.closed = False
        self._buf = b""

    def read(self, state: StreamState) -> bool:
        """Read what is there; True if it held progress."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.closed = True
            return self._emit(state, [self._buf] if self._buf.strip() else [])
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return self._emit(state, lines)

    def drain(self, state: StreamState, wait: float = 1.0) -> None:
        """What is left once stdout has closed: read until EOF, at most ``wait`` seconds
        (a child of the CLI may hold the pipe open)."""
        deadline = time.monotonic() + wait
        while not self.closed:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                break
            self.read(state)
        if self._buf.strip():
            self._emit(state, [self._buf])
        self._buf = b""

    def _emit(self, state: StreamState, lines: list[bytes]) -> bool:
        moved = False
        shown = [ln for ln in lines if ln.strip()]
        for line in shown:
            if self.marker in line:
                moved = True
                found = self.usage(line) if self.usage else None
                if found is not None:  # one model response's usage, as it arrives
                    figures, model = found
                    state.note_usage(f"response-{len(state.message_usage)}", figures)
                    state.model = model or state.model
                continue
            if state.close_line():
                sys.stdout.write("\n")
            sys.stdout.buffer.write(line + b"\n")
        sys.stdout.flush()
        return moved
