"""A worktree job's start while git makes its worktree, off the watcher's loop.

``git worktree add`` checks a whole tree out: on a big repository, or one
whose lock another git holds, it can take longer than systemd's
``WatchdogSec``. So :class:`PendingStarts <hopper.pending_starts.PendingStarts>`
runs :func:`hopper.prepare.with_workspace` on its lane (executors/calls.py)
and keeps this :class:`Starting` meanwhile: the job holds its slot, the loop
goes on. When git is done the job's start goes on as any other (``begin``:
prepare, the executor's start); a git that fails or outlives its deadline
costs only this job (``workspace_failed``, saying which).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from hopper.core.record import JobRecord
from hopper.core.states import Reason
from hopper.executors.calls import Call
from hopper.executors.protocol import Deferred, Ended, How, Report, Start, Starting
from hopper.running import Running
from hopper.workspace import GIT_TIMEOUT, WorkspaceFailed

MARGIN = 5.0  # seconds past git's own deadlines before the start gives up on it


class WorkspaceStart(Starting):
    """git makes the job's worktree on the lane; then ``begin`` starts the job."""

    def __init__(
        self,
        record: JobRecord,
        run_dir: Path,
        call: Call[JobRecord],
        begin: Callable[[JobRecord, Path], Start],
    ) -> None:
        # three git calls at most (rev-parse, rev-parse, worktree add), each with its deadline
        super().__init__(record, run_dir, time.monotonic() + 3 * GIT_TIMEOUT + MARGIN)
        self.call, self.begin = call, begin
        self.stopping = False

    def fileno(self) -> int:
        return self.call.fileno()

    def report(self) -> Report:
        record, run_dir = self.record, self.run_dir
        if not self.call.done():
            self.call.close()
            if self.stopping:  # the watcher is going away: the job stays queued
                return Deferred(record)
            why = f"{record.inbox_path}: git did not make the worktree by its deadline"
            return Ended(record, run_dir, How.REJECTED, Reason.WORKSPACE_FAILED, why)
        try:
            ready = self.call.result()
        except WorkspaceFailed as exc:
            why = f"{record.inbox_path}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.WORKSPACE_FAILED, why)
        finally:
            self.call.close()
        return self.begin(ready, run_dir)

    def release(self, record: JobRecord) -> Running:
        raise AssertionError("a workspace start reports its next stage, never a running step")

    def abandon(self) -> None:
        self.call.close()  # git ends by its own deadline

    def hurry(self) -> None:
        self.stopping, self.deadline = True, 0.0
