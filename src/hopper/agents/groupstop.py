"""Stopping an agent CLI's whole process group without blocking the reader. Standard library.

The driver starts the CLI as the leader of its own process group, so an idle
stop or an error stop reaches every process the CLI started (a tool, a child
holding stdout) and not only the CLI. :meth:`GroupStop.tick` is called from
the driver's read loop: it sends SIGINT, then SIGTERM, then SIGKILL, ``grace``
seconds apart, while the loop keeps reading the CLI's last lines (Claude
prints its result on SIGINT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

SEQUENCE = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


class GroupStop:
    def __init__(self, proc: subprocess.Popen[bytes], grace: float) -> None:
        self.proc = proc
        self.grace = grace
        self.plan: list[int] = []
        self.started = False
        self.next_at = 0.0

    def begin(self) -> None:
        """Start the escalation (once)."""
        if not self.started:
            self.started = True
            self.plan = list(SEQUENCE)
            self.next_at = 0.0

    def send(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already

    def tick(self) -> bool:
        """Send what is due; True once the reader should give up (all sent, CLI gone)."""
        if not self.started:
            return False
        now = time.monotonic()
        if now < self.next_at:
            return False
        if self.plan:
            self.send(self.plan.pop(0))
            self.next_at = now + self.grace
            return False
        # SIGKILLed a grace ago: whatever still holds the pipe left the group
        return self.proc.poll() is not None
