"""A raw PTY around an interactive agent CLI, for the real-CLI tests (no session host).

The CLI runs in a new session with the PTY as its controlling terminal. What
it prints is kept (``out``); the terminal queries it sends are answered with
``hopper.agents.interactive.terminal_replies`` as the session host does while
no person's terminal is attached. Waits read the PTY (select with a deadline),
so they return as soon as the awaited thing shows.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import termios
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hopper.agents.claude_interactive import screen_text
from hopper.agents.interactive import InteractiveAgent, terminal_replies
from waiting import WaitTimeout

ROWS, COLS = 40, 120
QUIET = 1.5  # seconds without output before the prompt is believed drawn and probed


class PtyAgent:
    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a new session, the PTY its controlling terminal
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, dict(env))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.out = b""
        self.exit_status: int | None = None

    def pump(self, timeout: float) -> bool:
        """Read what arrives within ``timeout``; answer its queries. False: nothing came."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the CLI closed the terminal
            data = b""
        if not data:
            return False
        self.out += data
        replies = terminal_replies(data)
        if replies:
            os.write(self.fd, replies)
        return True

    def pump_for(self, seconds: float) -> None:
        """Read (and answer) whatever comes for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.pump(left)

    def wait(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"timed out after {timeout}s waiting for {what}\n{self.screen()}")
            self.pump(min(left, 0.2))

    def wait_ready(self, agent: InteractiveAgent, timeout: float = 90) -> None:
        """Until the agent says it is at its prompt and the screen has been quiet a while."""
        deadline = time.monotonic() + timeout
        while True:
            self.wait(lambda: agent.ready(self.out[-4000:]), deadline - time.monotonic(), "prompt")
            while self.pump(QUIET):
                pass
            if agent.ready(self.out[-4000:]):
                return

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def screen(self) -> str:
        return screen_text(self.out[-3000:])

    def alive(self) -> bool:
        if self.exit_status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exit_status = status
        return self.exit_status is None

    def close(self, grace: float = 10) -> None:
        """SIGTERM to the CLI's process group, a grace, then SIGKILL; reaped."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                self.pump(0.1)
            if self.alive():
                os.killpg(self.pid, signal.SIGKILL)
                _, self.exit_status = os.waitpid(self.pid, 0)
        os.close(self.fd)
