"""What the watcher reads about its Slurm jobs without acting on them.

The wrapper's exit record (``slurm-exit.json``, written when the batch script
ends) and :class:`StateView`, recovery's one listing of Slurm's jobs, asked
for lazily and shared by every run directory of a reconcile pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from hopper.core.slurm_parse import (
    SlurmExitFile,
    SlurmJob,
    SlurmParseError,
    SlurmState,
    parse_exit_file,
    states_for,
)
from hopper.executors.calls import Lane, wait_alive
from hopper.executors.slurm import COMMAND_TIMEOUT, EXIT_STATUS_FILE, SlurmError, list_jobs
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_text

log = logging.getLogger(__name__)


def read_exit_file(run_dir: Path, slurm_id: str) -> SlurmExitFile | None:
    """The wrapper's exit record, if it wrote one for this Slurm job (not an older one)."""
    try:
        text = read_text(run_dir / EXIT_STATUS_FILE, SMALL_LIMIT)  # no link, FIFO, huge file
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.error("%s", exc)
        return None
    try:
        record = parse_exit_file(text)
    except SlurmParseError as exc:
        log.error("%s: %s", run_dir / EXIT_STATUS_FILE, exc)
        return None
    return record if record.slurm_id == slurm_id else None


class StateView:
    """Recovery's look at Slurm: one listing, asked for lazily, shared by every run dir.

    With a ``lane`` the listing runs there and recovery waits for it calling
    ``keepalive`` (heartbeat, ``WATCHDOG=1``), bounded by ``timeout`` per call.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        lane: Lane | None = None,
        keepalive: Callable[[], None] = lambda: None,
        timeout: float = COMMAND_TIMEOUT,
    ) -> None:
        self.env = env
        self.lane, self.keepalive, self.timeout = lane, keepalive, timeout
        self._jobs: list[SlurmJob] | None = None
        self._failed = False

    def _list(self) -> list[SlurmJob]:
        env, timeout, lane = self.env, self.timeout, self.lane
        if lane is None:
            return list_jobs(env, timeout)
        return wait_alive(lane.submit(lambda: list_jobs(env, timeout, lane.run)), self.keepalive)

    def _all(self) -> list[SlurmJob] | None:
        if self._jobs is None and not self._failed:
            try:
                self._jobs = self._list()
            except SlurmError as exc:
                self._failed = True
                log.warning("recovery: cannot ask Slurm (%s); will ask again", exc)
        return self._jobs

    def state(self, slurm_id: str) -> SlurmState | None:
        """The job as Slurm knows it (``found=False``: forgotten); None: Slurm did not answer."""
        jobs = self._all()
        return None if jobs is None else states_for([slurm_id], jobs)[slurm_id]

    def named(self, job_id: str) -> list[SlurmJob] | None:
        jobs = self._all()
        return None if jobs is None else [j for j in jobs if j.name == job_id]
