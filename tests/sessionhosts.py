"""A session host with the fake agent (tests/sessionfake.py), for the tests that need one."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from hopper.sessionhost import contract as c
from hopper.sessionhost.host import HostSpec
from hopper.sessionhost.launch import launch
from sessionfake import HERE
from waiting import poll_until

FAKE_HOST = [sys.executable, str(HERE), "host"]
WAIT = 30.0


class Session:
    """A host started for a test; ended (SIGKILL to its group) afterwards."""

    def __init__(self, tmp: Path, folder: Path | None = None) -> None:
        self.tmp = tmp
        self.dir = folder or tmp / "sessions" / "s"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pids: list[int] = []
        self.runs = 0

    def start(self, **options: object) -> int:
        spec = HostSpec(
            name="s",
            agent_name="fake",
            session_dir=str(self.dir),
            workdir=str(self.tmp),
            agent={"kind": "fake"},
            env={"PATH": os.environ["PATH"]},
            **options,  # type: ignore[arg-type]
        )
        pid = launch(spec, argv=FAKE_HOST)
        self.pids.append(pid)
        poll_until(lambda: (self.state() or _no).state == c.IDLE, WAIT, "the agent ready")
        return pid

    def state(self) -> c.SessionState | None:
        return c.read_session(self.dir)

    def send(self, text: str, job: str | None = None, **options: object) -> Path:
        self.runs += 1
        job = job or f"j{self.runs:03d}"
        run = self.tmp / "runs" / job
        run.mkdir(parents=True)
        request = c.TurnRequest(job, str(run), text, **options)  # type: ignore[arg-type]
        (self.dir / c.REQUESTS_DIR / f"{job}.json").write_bytes(request.to_json())
        return run

    def ended(self, run: Path) -> c.TurnEnd:
        return poll_until(lambda: c.read_turn_end(run), WAIT, f"turn.json in {run}")

    def gone(self) -> c.SessionState:
        state = poll_until(
            lambda: (s := self.state()) is not None and s.state == c.ENDED and s, WAIT, "the end"
        )
        assert isinstance(state, c.SessionState)
        return state

    def cleanup(self) -> None:
        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


_no = c.SessionState("", "", "", "none", 0, None, "", "")


def cast_of(run: Path) -> bytes:
    try:
        return (run / c.CAST_FILE).read_bytes()
    except FileNotFoundError:
        return b""
