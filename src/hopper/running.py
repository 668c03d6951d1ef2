"""A job this watcher is running: the value every executor keeps per live job.

Its own module so an executor can build one without importing the runner
(runner -> slurm_runner -> runner was an import cycle hidden by a lazy import).
What only one executor needs to know about a running job (the local
supervisor's process handle, an untrusted exit record …) lives in
:attr:`Running.held`, which the shell never reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hopper.core import lifecycle
from hopper.core.lifecycle import Adopted
from hopper.core.record import JobRecord
from hopper.store import ledger

if TYPE_CHECKING:
    from hopper.executors.protocol import Context

log = logging.getLogger(__name__)


@dataclass
class Running:
    record: JobRecord
    run_dir: Path
    next_heartbeat: float = 0.0
    stop_sent: bool = False
    # The executor's own, opaque to the shell (the local one: its supervisor's handle).
    held: object = None


def adopt(record: JobRecord, run_dir: Path, ctx: Context) -> Running:
    """A job still running after a restart, owned by this watcher from now on."""
    step = lifecycle.adopted(record, Adopted(ctx.clock.now(), ctx.owner))
    owned = ledger.commit(run_dir, step, durable=False)
    log.info("job=%s adopted pid=%s", record.id, record.pid)
    return Running(owned, run_dir, ctx.clock.monotonic())
