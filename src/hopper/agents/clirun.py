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

from hopper.agents.argv import turn_argv
from hopper.agents.groupstop import GroupStop
from hopper.agents.livestate import LiveState
from hopper.agents.stream import DIALECTS, StreamState, parse_line
from hopper.core.agent_outcome import judge, live_action

STREAM_FILE = "agent.jsonl"
DEFAULT_IDLE_AFTER = 30.0  # seconds without output before the live state says idle


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
    ) -> None:
        """``signals``: the driver's list of stop signals received, taken from here;
        ``stopping``: whether the driver was told to stop."""
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

    def run(self, message: Path, session_id: str | None, resume: bool) -> RunResult:
        """Run the CLI once on ``message`` (resuming ``session_id`` when ``resume``)."""
        argv = turn_argv(self.spec, message, session_id, resume)
        state = StreamState(self.dialect)
        self.note("agent_started", argv0=argv[0], resume=resume, session_id=session_id)
        self.say(f"[hopper] {'resuming' if resume else 'starting'} {self.spec.get('agent_name')}")
        self.live.set("starting")
        stdin_path = message if self.spec.get("stdin", True) else Path(os.devnull)
        with open(stdin_path, "rb") as stdin:
            try:
                # its own group: an idle or error stop reaches every child it started
                proc = subprocess.Popen(
                    argv,
                    cwd=self.workdir,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=None,
                    process_group=0,
                )
            except OSError as exc:
                self.say(f"[error] cannot start {argv[0]}: {exc}")
                return RunResult(state, None, False, False, "unknown", f"cannot start: {exc}")
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        idle_timeout = self.spec.get("idle_timeout")
        idle_after = float(self.spec.get("idle_after") or DEFAULT_IDLE_AFTER)
        if idle_timeout is not None:
            idle_after = min(idle_after, float(idle_timeout) / 2)
        buf = b""
        tail = b""
        last = time.monotonic()
        idle = False
        self.taken = None
        stop = GroupStop(proc, float(self.spec.get("grace", 5.0)))
        stream = open(self.run_dir / STREAM_FILE, "ab")  # noqa: SIM115
        try:
            while True:
                if self.signals:  # the supervisor's stop: pass it on, it escalates itself
                    stop.send(self.signals.pop(0))
                if stop.tick():
                    break
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    quiet = time.monotonic() - last
                    if quiet >= idle_after and self.live.state in ("starting", "working"):
                        self.live.set("idle", detail=f"no output for {quiet:.0f}s")
                    timed_out = idle_timeout is not None and quiet >= idle_timeout
                    if timed_out and not idle and not self.taken:
                        idle = True
                        self.note("idle_timeout", idle_timeout_seconds=idle_timeout)
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
                if self._judge_live(state):
                    stop.begin()
            if buf.strip():
                self._line(buf, state, stream)
        finally:
            stream.close()
            proc.stdout.close()
        code = self._wait(proc)
        self.note("agent_exited", exit_code=code)
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

    def _line(self, line: bytes, state: StreamState, stream: Any) -> None:
        if not line.strip():
            return
        stream.write(line + b"\n")
        stream.flush()
        obj = parse_line(line)
        if obj is None:
            self.say(line.decode("utf-8", "replace"))
            return
        for text in state.feed(obj):
            self.say(text)

    def _judge_live(self, state: StreamState) -> bool:
        """Act on what the stream just said; True when the CLI must be stopped now."""
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
