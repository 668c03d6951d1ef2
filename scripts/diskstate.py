"""The disk's state as a measurement starts: what a new file costs, whether ext4 journals.

Imported by path by scripts/bench, scripts/drain-cpu and scripts/drain-timeline
(each puts this folder on sys.path). On ext4 without a journal (this VM's:
no /proc/fs/jbd2 entry for its device) the inode allocator looks at and skips
every inode freed in the last minute (five minutes while its inode table block
is dirty), so a create costs ~30 us on a quiet disk and up to ~1 ms after a
mass deletion: a test suite's clean-up, or the previous run's ``rmtree``.
Every per-job figure carries that, so each run says what it started on, and
interleaved runs keep their files (``--keep``) until the series ends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def create_cost(folder: Path, n: int = 200) -> float:
    """CPU per new file (us) in ``folder``, made in a fresh ``.create-probe`` folder
    there that is left in place (a clean-up would free inodes: the very cost)."""
    probe = folder / ".create-probe"
    probe.mkdir()
    cpu = time.thread_time()
    for i in range(n):
        os.close(os.open(probe / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    return round((time.thread_time() - cpu) / n * 1e6, 1)


def journaled() -> str:
    """The devices with a journal (jbd2 lists one entry per journaled device)."""
    try:
        return ", ".join(sorted(os.listdir("/proc/fs/jbd2"))) or "none"
    except OSError:
        return "none"


def line(folder: Path) -> str:
    """One line for a measurement's output: the create cost in ``folder`` and the journals."""
    return (
        f"disk: a new file {create_cost(folder)} us of CPU as this starts "
        f"(journaled devices: {journaled()}; without a journal, ext4 makes a create "
        "the dearer the more files were freed in the last minutes)"
    )
