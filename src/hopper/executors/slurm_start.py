"""A Slurm start on its way: sbatch runs on the executor's lane, never on the loop.

Theory of operation. :meth:`SlurmExecutor.start
<hopper.executors.slurm_runner.SlurmExecutor.start>` writes the wrapper and
hands :func:`submit_work` to its lane: cancel what an earlier, unanswered
sbatch of this job may have left (only then), then ``sbatch --hold``. The
loop goes on; :class:`SlurmStart` is collected when the answer is in (its
descriptor is readable): the ``running`` record with the Slurm id is
committed with the turn's other starts, and only then is the job released
(``scontrol release``, on the lane too). A controller that does not answer
within ``[slurm] command_timeout`` costs only this job, which goes back to
the queue with why (its sbatch may yet have gone through: the next try
cancels it first, as before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hopper.core import lifecycle
from hopper.core.lifecycle import Started
from hopper.core.record import JobRecord
from hopper.core.slurm_parse import TERMINAL
from hopper.core.states import Reason
from hopper.executors.calls import Call, Lane
from hopper.executors.protocol import Deferred, Ended, How, Launch, Report, Starting
from hopper.executors.slurm import SlurmError, SlurmUnavailable, cancel, list_jobs, submit
from hopper.faults import crash_point
from hopper.running import Running
from hopper.store import ledger

if TYPE_CHECKING:
    from hopper.executors.slurm_runner import SlurmExecutor

log = logging.getLogger(__name__)

START_MARGIN = 5.0  # seconds past the calls' deadlines before a start gives up on them


@dataclass(frozen=True)
class Submitted:
    """What the lane did for one start: the Slurm id, or why there is none."""

    slurm_id: str | None
    error: SlurmError | None = None
    cancelled: tuple[str, ...] = ()  # unrecorded Slurm jobs of this name cancelled first


def submit_work(
    job_id: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    uncertain: bool,
    lane: Lane,
    timeout: float,
) -> Callable[[], Submitted]:
    """The lane's work for one start (``uncertain``: an earlier sbatch went unanswered)."""

    def work() -> Submitted:
        cancelled: list[str] = []
        if uncertain:  # it may have gone through: cancel it before submitting again
            try:
                for job in list_jobs(None, timeout, lane.run):
                    if job.name == job_id and job.state not in TERMINAL:
                        cancel(job.slurm_id, None, None, timeout, lane.run)
                        cancelled.append(job.slurm_id)
            except SlurmError as exc:
                why = f"cannot cancel an earlier, unanswered submission first: {exc}"
                return Submitted(None, SlurmUnavailable(why), tuple(cancelled))
        try:
            return Submitted(submit(argv, env, timeout, lane.run), None, tuple(cancelled))
        except SlurmError as exc:
            return Submitted(None, exc, tuple(cancelled))

    return work


class SlurmStart(Starting):
    """sbatch on the lane; collected when it answered (or at its deadline)."""

    def __init__(
        self, executor: SlurmExecutor, launch: Launch, call: Call[Submitted], timeout: float
    ) -> None:
        # list, cancel, sbatch: three calls at most, each with its own deadline
        super().__init__(launch.record, launch.run_dir, time.monotonic() + 3 * timeout + 5.0)
        self.executor, self.launch, self.call = executor, launch, call
        self.stopping = False
        self.slurm_id: str | None = None

    def fileno(self) -> int:
        return self.call.fileno()

    def report(self) -> Report:
        executor, record, run_dir = self.executor, self.record, self.run_dir
        if not self.call.done():
            self.call.close()
            executor.uncertain.add(record.id)  # it may yet go through: cancelled next try
            if self.stopping:
                return Deferred(record)  # the watcher is going away: still queued
            return executor.later(record, run_dir, "sbatch did not finish by its deadline")
        done = self.call.result()
        self.call.close()
        for sid in done.cancelled:
            ledger.note(
                run_dir,
                "slurm_stray_cancelled",
                executor.ctx.clock.now(),
                slurm_job_id=sid,
                why="submitted, but never recorded in job.json (an unanswered sbatch)",
            )
        if isinstance(done.error, SlurmUnavailable):
            executor.uncertain.add(record.id)
            return executor.later(record, run_dir, str(done.error))
        if done.error is not None or done.slurm_id is None:
            why = f"Slurm refused the job: {done.error}"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        executor.uncertain.discard(record.id)
        crash_point("slurm.after_submit")
        self.slurm_id = done.slurm_id
        fact = Started(
            at=executor.ctx.clock.now(),
            owner=executor.ctx.owner,
            workdir=str(self.launch.workdir),
            argv0=self.launch.prep.argv[0],
            slurm_job_id=done.slurm_id,
        )
        return lifecycle.started(record, fact)

    def release(self, record: JobRecord) -> Running:
        crash_point("slurm.after_record")  # recorded, not yet released
        assert self.slurm_id is not None
        self.executor.release_later(record, self.slurm_id, note=False)
        log.info("job=%s state=queued->running slurm_job_id=%s", record.id, self.slurm_id)
        beat = self.executor.ctx.clock.monotonic() + self.executor.ctx.config.heartbeat_interval
        return Running(record, self.run_dir, beat)

    def abandon(self) -> None:
        """Its record could not be committed: the held Slurm job goes (on the lane)."""
        self.call.close()
        if self.slurm_id is not None:
            self.executor.cancel_later(self.slurm_id)
        else:
            self.executor.uncertain.add(self.record.id)

    def hurry(self) -> None:
        self.stopping, self.deadline = True, 0.0
