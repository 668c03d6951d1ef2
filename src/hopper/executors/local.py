"""The local executor: each job under its own supervisor process on this host.

All the machinery (the gated start, the cheap poll, adoption, the end from
exit.json or ``lost``) is :mod:`hopper.executors.supervised`, which the
container executor uses too; this executor runs the job's own argv under it.
It is the one executor whose start may be begun ahead (``Launch.ahead``): a
forked, gated supervisor records nothing until it is released.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hopper.core.record import JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import Reason
from hopper.executors.protocol import Context, Ended, Launch, Polled, Start, Tick
from hopper.executors.supervised import Command, Supervised
from hopper.running import Running


class LocalRecovery:
    """A recovery pass's questions: an abandoned start's supervisor is ended by
    recovery itself (stale supervisors), so there is nothing more to clear."""

    def __init__(self, sup: Supervised) -> None:
        self.sup = sup

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        return snap

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        return True

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        return self.sup.settle(snap, run_dir, lost)


class LocalExecutor:
    name = "local"
    begins_unrecorded = True  # Supervised.begin: a SupervisedStart, nothing recorded

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.sup = Supervised(ctx)

    def open(self) -> None:
        self.sup.open()

    def close(self) -> None:
        self.sup.close()

    def start(self, launch: Launch) -> Start:
        grace, memory = self.ctx.config.kill_grace, launch.record.memory_max_bytes
        prep = launch.prep
        command = Command(prep.argv, dict(launch.env), grace, memory, dict(prep.files))
        return self.sup.begin(launch, command)

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        return self.sup.poll(jobs, tick)

    def cancel(self, job: Running, reason: Reason) -> None:
        self.sup.cancel(job)

    def forget(self, job: Running, *, end: bool = False) -> None:
        self.sup.forget(job, end=end)

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return self.sup.adopt(record, run_dir)

    def recovery(self) -> LocalRecovery:
        return LocalRecovery(self.sup)
