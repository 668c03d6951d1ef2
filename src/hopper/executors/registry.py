"""The executors by name: a job's ``executor`` key picks one from this table.

Adding an executor is adding its factory here (and its name to the config's
``Executor`` choices); nothing else in the shell names an executor.
"""

from __future__ import annotations

from collections.abc import Callable

from hopper.executors.container_runner import ContainerExecutor
from hopper.executors.local import LocalExecutor
from hopper.executors.protocol import Context, Executor
from hopper.executors.session import SessionExecutor
from hopper.executors.slurm_runner import SlurmExecutor

Factory = Callable[[Context], Executor]

FACTORIES: dict[str, Factory] = {
    LocalExecutor.name: LocalExecutor,
    SlurmExecutor.name: SlurmExecutor,
    ContainerExecutor.name: ContainerExecutor,
    SessionExecutor.name: SessionExecutor,
}


def build(ctx: Context) -> dict[str, Executor]:
    """One of each registered executor, for one watcher."""
    return {name: factory(ctx) for name, factory in FACTORIES.items()}
