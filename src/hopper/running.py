"""A job this watcher is running: the value both executors keep per live job.

Its own module so the Slurm executor can build one without importing the runner
(runner -> slurm_runner -> runner was an import cycle hidden by a lazy import).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hopper.core.record import JobRecord
from hopper.proc.spawn import Handle


@dataclass
class Running:
    record: JobRecord
    run_dir: Path
    supervisor: Handle | None  # None when adopted after a restart
    next_heartbeat: float = 0.0
    stop_sent: bool = False
    bad_exit: str | None = None  # why an exit.json found while it ran was not trusted
