"""The container executor: a supervised job whose command is a container run.

Theory of operation. A container job runs under the job's own supervisor
exactly like a local job (gate, job.log, timeout, limits, exit.json, adoption
after a watcher restart: the shared part, :mod:`hopper.executors.supervised`,
which this executor uses as the local one does); only its command differs. Every engine call runs
on the executor's lane (calls.py), never on the watcher's loop: the start
first checks the engine and the image there, and that a bash job's image
has bash (:class:`ImageCheck`: a missing or hung one fails the job
``spawn_failed`` with what to do), then
:meth:`ContainerExecutor.command_for` plans the mounts (core/mounts.py), translates
every path hopper hands the job, and returns the supervised argv:
container_run.py around ``<engine> run --name hopper-<id> …``. An agent job
keeps its driver on the host; the driver runs each CLI turn through the same
wrapper (the driver spec's ``container`` key). At the end
(container_end.py) the container is removed, whatever the outcome; an end
the engine may explain (its OOM killer) waits, parked, for its answer; a
container of the job's name found by recovery before the job (re)starts is
removed, so the job runs once; when the supervisor vanished, the engine's
own record of the container says how it ended (``Supervised.engine_exit``).
The supervised part's ends come back as values: this executor parks them
(poll) or refines them at once (recovery), never the other way round.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from hopper.agents.base import Preparation
from hopper.agents.drive import SPEC_FILE
from hopper.agents.registry import driven
from hopper.core.mounts import BadMount
from hopper.core.outcome import Outcome
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import Reason
from hopper.executors.calls import Call, Lane
from hopper.executors.container import (
    STOP_MARGIN,
    ContainerUnavailable,
    check_image,
    mount_map,
    resolve_engine,
    run_argv,
    shim_argv,
)
from hopper.executors.container_end import ContainerEnds, needs_look
from hopper.executors.container_probe import has_program, missing_program
from hopper.executors.protocol import (
    Context,
    Deferred,
    Ended,
    How,
    Launch,
    Polled,
    Report,
    Start,
    Starting,
    Tick,
)
from hopper.executors.supervised import Command, Supervised
from hopper.running import Running

log = logging.getLogger(__name__)

HOST_ONLY_ENV = frozenset({"HOPPER_ROOT"})  # the root is not mounted into the container
DRIVER_GRACE = 5.0  # the driver's own grace between its stop signals (agents/driven.py)
CHECK_MARGIN = 5.0  # seconds past the image check's deadline before its start gives up


class ImageCheck(Starting):
    """A container start whose image check runs on the executor's lane, off the loop.

    Until the engine answers, the job waits here (holding its slot, blocking
    nothing else); then it is started like a local job (its supervisor, the
    next stage), or fails ``spawn_failed`` with the engine's answer, or with
    which call hung and for how long.
    """

    def __init__(
        self, executor: ContainerExecutor, launch: Launch, call: Call[None], deadline: float
    ) -> None:
        super().__init__(launch.record, launch.run_dir, deadline)
        self.executor, self.launch, self.call = executor, launch, call
        self.stopping = False

    def fileno(self) -> int:
        return self.call.fileno()

    def report(self) -> Report:
        record, run_dir = self.record, self.run_dir
        if not self.call.done():
            self.call.close()
            if self.stopping:  # the watcher is going away: the job stays queued
                return Deferred(record)
            timeout = self.executor.ctx.config.container.command_timeout
            why = f"the image check did not finish within {timeout:g}s (its engine call hung)"
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, why)
        try:
            self.call.result()
        except ContainerUnavailable as exc:
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, exc.detail)
        finally:
            self.call.close()
        return self.executor.supervise(self.launch)  # its supervisor, next

    def release(self, record: JobRecord) -> Running:
        raise AssertionError("an image check reports its next stage, never a running step")

    def abandon(self) -> None:
        self.call.close()  # the call itself ends at its deadline, or when the lane closes

    def hurry(self) -> None:
        self.stopping, self.deadline = True, 0.0


class ContainerRecovery:
    """A recovery pass's questions: the engine asked at once (with keep-alives)."""

    def __init__(self, executor: ContainerExecutor) -> None:
        self.executor = executor

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        return snap

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        if local:
            self.executor.ends.clear_stray(record, run_dir)  # created, never recorded
        return True

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        """As a local job's end, then the engine's look and its container removed."""
        end = self.executor.sup.settle(snap, run_dir, lost)
        if end.how not in (How.EXITED, How.LOST):
            return end
        ends = self.executor.ends
        outcome = ends.refine_now(end.record, Outcome(end.reason or Reason.LOST, end.detail))
        ends.remove_now(end.record)  # its container goes, whatever the outcome
        return replace(end, reason=outcome.reason, detail=outcome.detail)


class ContainerExecutor:
    """Jobs under their supervisors whose command runs them in a container."""

    name = "container"
    begins_unrecorded = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.has_bash: dict[str, bool] = {}  # image id -> whether bash runs in it (asked once)
        self.lane = Lane("container", wake=ctx.wake)  # engine calls, off the loop
        self.ends = ContainerEnds(ctx, self.lane, self.engine)
        self.sup = Supervised(ctx, "container_exit_from_engine", self._engine_exit)

    def open(self) -> None:
        self.sup.open()

    def close(self) -> None:
        self.lane.close()  # a hung engine call is killed, not waited for
        self.sup.close()

    def cancel(self, job: Running, reason: Reason) -> None:
        self.sup.cancel(job)

    def forget(self, job: Running, *, end: bool = False) -> None:
        self.sup.forget(job, end=end)

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return self.sup.adopt(record, run_dir)

    def recovery(self) -> ContainerRecovery:
        return ContainerRecovery(self)

    def engine(self) -> list[str]:
        return resolve_engine(self.ctx.config.container.engine)

    def start(self, launch: Launch) -> Start:
        """The image check on the lane first; the job's supervisor once it passed."""
        record, run_dir = launch.record, launch.run_dir
        if launch.ahead:
            return Deferred(record)  # the engine is real work: started with a slot only
        job = record.container
        assert job is not None, "a container job is admitted with its container"
        try:
            engine = self.engine()
        except ContainerUnavailable as exc:
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, exc.detail)
        timeout = self.ctx.config.container.command_timeout
        lane, bash = self.lane, launch.prep.argv[:1] == ["bash"]

        def check() -> None:  # on the lane
            image_id = check_image(engine, job.image, lane.run, timeout)
            if bash:
                self.need_bash(engine, job.image, image_id)

        # Collected by its deadline, ready or not: the call is killed well before.
        deadline = time.monotonic() + timeout + CHECK_MARGIN
        return ImageCheck(self, launch, lane.submit(check), deadline)

    def supervise(self, launch: Launch) -> Report:
        """The job's supervisor, its command a container run (the image checked)."""
        record, run_dir = launch.record, launch.run_dir
        try:
            argv, env, grace, files = self.command_for(
                record, run_dir, launch.prep, launch.workdir, launch.job_vars, launch.env
            )
        except ContainerUnavailable as exc:
            return Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, exc.detail)
        except BadMount as exc:
            why = f"{record.inbox_path}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.BAD_PROMPT, why)
        # A container's memory_max is the engine's (--memory): the supervisor's tree
        # also holds the engine's own client, which is not the job's memory.
        command = Command(argv, env, grace, memory_max=None, files=files)
        fields = {"container": record.container.name} if record.container else {}
        return self.sup.begin(launch, command, fields)

    def command_for(
        self,
        record: JobRecord,
        run_dir: Path,
        prep: Preparation,
        workdir: Path,
        job_vars: Mapping[str, str],
        host_env: Mapping[str, str],  # the supervisor's whole environment
    ) -> tuple[list[str], dict[str, str], float, dict[str, str]]:
        """The supervised argv, its environment, the supervisor's grace and the
        agent's files (a driver's spec with the container's part), which the job
        writes before its exec.

        Raises ContainerUnavailable (engine or image missing) or
        core.mounts.BadMount (a path that cannot be mounted).
        """
        job = record.container
        assert job is not None, "a container job is admitted with its container"
        cfg = self.ctx.config
        engine = self.engine()  # the image was checked before (start), off the loop
        mmap = mount_map(job, workdir, run_dir)
        inside = {k: mmap.translate(v) for k, v in job_vars.items() if k not in HOST_ONLY_ENV}
        names = sorted(inside)
        env = {**host_env, **inside}
        if driven(dict(self.ctx.agents), record.agent):
            # The driver stays on the host; each CLI turn runs in the container.
            prefix = run_argv(
                engine,
                job,
                mmap,
                names,
                [],
                run_args=cfg.container.run_args,
                memory_max=record.memory_max_bytes,
                interactive=True,
            )
            spec = json.loads(prep.files[SPEC_FILE])
            spec["container"] = {
                "prefix": shim_argv(engine, job.name, DRIVER_GRACE, prefix),
                "mounts": [[m.host, m.container] for m in mmap.mounts],
            }
            files = {**prep.files, SPEC_FILE: json.dumps(spec, indent=2) + "\n"}
            return prep.argv, env, cfg.kill_grace, files
        run = run_argv(
            engine,
            job,
            mmap,
            names,
            prep.argv,
            run_args=cfg.container.run_args,
            memory_max=record.memory_max_bytes,
        )
        # The supervisor's SIGTERM becomes `<engine> stop -t kill_grace`; its own
        # SIGKILL waits a little longer, so the engine's stop runs its course.
        argv = shim_argv(engine, job.name, cfg.kill_grace, run)
        return argv, env, cfg.kill_grace + STOP_MARGIN, dict(prep.files)

    def need_bash(self, engine: list[str], image: str, image_id: str) -> None:
        """A bash job's image must have bash; raises ContainerUnavailable saying so if not.

        Runs on the lane (the probe is a container run); the answer is kept per image id.
        """
        if image_id not in self.has_bash:
            cfg = self.ctx.config.container
            run, timeout = self.lane.run, cfg.command_timeout
            found = has_program(engine, image, "bash", cfg.run_args, run, timeout)
            if found is None:
                return  # the engine could not tell: the job runs and says what went wrong
            self.has_bash[image_id] = found
        if not self.has_bash[image_id]:
            raise ContainerUnavailable(missing_program(engine, image, "bash"))

    # -- the end: the engine's side on the lane (container_end.py) ----------------------
    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        """As a local job's; an end whose container must go is parked while the
        engine is asked (how it ended, when it may explain it; then rm)."""
        parked = self.ends.parked()
        looking = [j for j in jobs if j.record.id not in parked] if parked else jobs
        polled = self.sup.poll(looking, tick)
        ended: list[Ended] = []
        for end in polled.ended:
            if end.how in (How.EXITED, How.LOST):  # filed once its container is gone
                look = needs_look(end.record, Outcome(end.reason or Reason.LOST, end.detail))
                self.ends.park(end, look=look)
            else:
                ended.append(end)
        polled.ended = ended + self.ends.answered(jobs)
        return polled

    def _engine_exit(self, record: JobRecord) -> ExitStatus | None:
        return self.ends.exit_from_engine(record, self.ctx.clock.now())
