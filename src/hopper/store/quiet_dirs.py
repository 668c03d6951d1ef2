"""Which queued jobs' run directories cannot have gained a marker since the last look.

The watcher's pass over its queued jobs looks for ABORT and PRIORITY markers
in each run directory: an ``lstat`` of ABORT, a ``rename`` of PRIORITY, and
the ``Path`` objects around them. Over 100,000 queued jobs that pass was a
quarter of the loop's time, every second, for files that are almost never
there. Making a file in a directory moves the directory's mtime, so one
``lstat`` of the run directory answers "nothing new here" for most jobs.

A directory is remembered as *quiet* only when a look found no marker and
its mtime was already :data:`SLACK_NS` older than the look: the kernel's
file times come from a coarse clock, so a marker made in the same tick as
the last change could otherwise leave the mtime as it was. Anything
unusual (the directory gone, not a directory, its mtime moved either way)
means: look at the markers as before. What this trusts: that nobody sets a
run directory's mtime back by hand after making a marker in it (then the
marker is seen when the job starts, or at the watcher's next start).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Container

SLACK_NS = 2_000_000_000  # an mtime this close to the look may hide a later change


class QuietDirs:
    """``{job id: run directory mtime}`` of directories found quiet."""

    def __init__(self, runs: str) -> None:
        self.runs = runs
        self._quiet: dict[str, int] = {}

    def look(self, job_id: str) -> tuple[bool, int | None]:
        """(quiet, mtime): quiet when the run directory is still as it was when found
        quiet (its markers need no look); mtime is the directory's now (ns), taken
        before any marker is looked at, or None if it is gone or not a directory."""
        try:
            st = os.lstat(f"{self.runs}/{job_id}")
        except (OSError, ValueError):
            self._quiet.pop(job_id, None)
            return False, None
        if not stat.S_ISDIR(st.st_mode):
            self._quiet.pop(job_id, None)
            return False, None
        mtime = st.st_mtime_ns
        return self._quiet.get(job_id) == mtime, mtime

    def looked(self, job_id: str, mtime: int | None) -> None:
        """The markers of ``job_id`` were looked at (none acted on) after its
        directory showed ``mtime``: remember it quiet if that mtime was old enough."""
        if mtime is not None and time.time_ns() - mtime > SLACK_NS:
            self._quiet[job_id] = mtime
        else:
            self._quiet.pop(job_id, None)

    def keep(self, job_ids: Container[str]) -> None:
        """Forget every job not in ``job_ids`` (they left the queue)."""
        self._quiet = {k: v for k, v in self._quiet.items() if k in job_ids}
