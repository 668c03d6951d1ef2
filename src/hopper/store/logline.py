"""The end of a run's job.log, read safely, and the line of it that says what went wrong.

For the dashboard's list: a failed row shows ``core/errorline.error_line`` of
the last :data:`TAIL` bytes of its job.log (the first line there that looks
like an error, else the last line). Read with ``saferead``'s rules: no link,
no FIFO, never blocking, a fixed number of bytes however big the log is.
"""

from __future__ import annotations

import os
from pathlib import Path

from hopper.core.errorline import error_line
from hopper.store.jobfile import LOG_FILE
from hopper.store.saferead import UnreadableFile, open_regular

TAIL = 16 * 1024


def log_error_line(run_dir: Path) -> str | None:
    """None when there is no job.log, it is empty, or it cannot be read safely."""
    try:
        fd = open_regular(run_dir / LOG_FILE)
    except (OSError, UnreadableFile):
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - TAIL)
        data = os.pread(fd, size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    if start:
        data = data.split(b"\n", 1)[-1]  # the first piece is part of an earlier line
    return error_line(data.decode("utf-8", "replace"))
