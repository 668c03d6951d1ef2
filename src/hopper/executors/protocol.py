"""What every executor does, and the one value a job's end is told by.

An executor runs jobs somewhere (a supervised local process, a Slurm job, a
container …). It never holds the runner: it is given what it needs (layout,
config, clock, who we are) and answers with values. The shell
(:mod:`hopper.runner`) owns the set of running jobs, checks ABORT markers,
writes heartbeats and handles every :class:`Ended` in one place (leases,
worktree, retry or finalize, hooks), whichever executor — or recovery, a
reject, a takeover — produced it. Executors are peers: none is built on
another (local and container share :mod:`hopper.executors.supervised` as a
part), and the shell never names one.

Adding an executor
------------------
Implement :class:`Executor` and register its factory in
:mod:`hopper.executors.registry` (and its name in the config's ``Executor``
choices). What each method must guarantee:

- ``start(launch)``: nothing of the job may run before its ``running`` record
  is durable. Return a :class:`Running` only if you committed that record
  yourself; usually return a :class:`Starting` (its :meth:`Starting.report`
  gives the ``running`` step; the shell commits a turn's steps together, then
  calls :meth:`Starting.release`). An :class:`Ended` (``REJECTED``) says it
  never ran; :class:`Deferred`: back to the queue, nothing started (also the
  answer to a ``launch.ahead`` you cannot begin without a slot). Never block
  the loop: slow work goes on a :class:`~hopper.executors.calls.Lane` and the
  Starting is readable when it answered. Raising is allowed: the shell's start
  policy decides whether it is tried again.
- ``poll(jobs, tick)``: called every turn with *your* running jobs; cheap
  unless ``tick.sweep`` or ``tick.children``. Each job that ended comes back
  once, in ``Polled.ended`` (``EXITED`` with the exit status, or ``LOST``),
  with ``files`` naming the attempt's files a retry keeps; before writing
  anything for an end, ask ``ctx.holder(job)`` (another watcher may own it:
  then ``HANDED_OVER``). A job you cannot look at goes in ``Polled.failed``;
  one past a deadline only you can see, in ``Polled.stop``.
- An :class:`Ended` may carry ``filed``: the shell calls it once the end is
  filed (terminal or queued for a retry) and the job has left the running
  set, never for one handed over or not filed. What served the job may then
  serve another (a supervisor, forkserver.py): nothing will signal it for
  this job again.
- ``cancel(job, reason)``: stop it (its record already says why, and the
  shell never asks twice); it still ends through ``poll``.
- ``forget(job, end=...)``: the shell drops the job (taken over by another
  watcher: touch nothing; ``end``: its run directory is gone: end its
  processes, record nothing).
- ``adopt(record, run_dir)``: a job recorded running by a previous watcher
  still runs: record that we own it (:func:`hopper.running.adopt`) and
  watch it from the next poll.
- ``recovery()``: one :class:`Recovery` per recovery pass, holding what the
  pass learns once (Slurm's listing): ``observe`` adds what only you know to a
  run's snapshot before core/recovery.py decides; ``clear`` ends whatever an
  unrecorded start may have left before the job is queued again (False: cannot
  tell now, the job waits for the next pass); ``settle`` gives the end of a job
  that finished while no watcher looked (None: cannot tell now).
- ``open`` / ``close``: before the first start / the watcher is going away
  (jobs keep running; lanes are closed, hung calls killed).

What only your executor keeps per job goes in ``Running.held`` (opaque to the
shell). The :class:`Context` is values, but for two calls an executor makes
back: ``wake`` (from a lane's thread, when an engine answered) and
``keepalive`` (while recovery waits on an engine, so heartbeats go on).

Why the recovery methods are not folded into ``adopt`` and ``poll``: a
job found finished after a restart is ended without being adopted (no
``adopted`` record, which would claim it runs), and ``observe`` must run before
the pure decision, ``clear`` and ``settle`` after it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from hopper.agents.base import Agent, Preparation
from hopper.clock import Clock
from hopper.config import Config
from hopper.core.lifecycle import Step
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import Reason
from hopper.loopguard import LoopGuard
from hopper.proc.forkclient import ForkServer
from hopper.running import Running
from hopper.store.layout import Layout
from hopper.store.takeover import taken_by


class How(StrEnum):
    """How a job came to end on this watcher."""

    EXITED = "exited"  # the executor recorded an exit status
    LOST = "lost"  # gone without a recorded status
    VANISHED = "vanished"  # its run directory was deleted while it ran
    REJECTED = "rejected"  # it never ran (claim, schedule or start refused it)
    ABORTED = "aborted"  # aborted while queued
    FILED = "filed"  # already filed terminal elsewhere (a reject at claim): hooks only
    HANDED_OVER = "handed_over"  # another watcher took it over: theirs to finish


@dataclass(frozen=True)
class Ended:
    """One job that ended, as every path reports it (poll, recovery, reject, takeover)."""

    record: JobRecord  # as last known: running, queued, or (FILED) already final
    run_dir: Path
    how: How
    reason: Reason | None = None  # None only for HANDED_OVER
    detail: str = ""
    status: ExitStatus | None = None  # the exit record, when there is one
    # The files of this attempt in its run directory (besides job.log) a retry
    # keeps under attempt-numbered names: the executor's to name.
    files: tuple[str, ...] = ()
    # Called once the end is filed (and never if it is not, or handed over): the
    # executor may then reuse what served the job (a supervisor: forkserver.py).
    filed: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    @property
    def job_id(self) -> str:
        return self.record.id


@dataclass(frozen=True)
class Launch:
    """A job prepared to start: what every executor needs to run it."""

    record: JobRecord  # queued, with its workspace paths
    run_dir: Path
    prep: Preparation
    workdir: Path
    env: Mapping[str, str]  # the whole environment; holds secrets: never write or log it
    # What hopper sets (config, agent, prompt env, HOPPER_*), without what the
    # watcher inherited: what a container job gets.
    job_vars: Mapping[str, str] = field(default_factory=dict)
    # Begin it ahead, while every slot is busy: only if it records and makes
    # nothing a withdraw cannot undo (else answer Deferred, nothing done).
    ahead: bool = False
    # A start ahead is released or withdrawn within this many seconds (the shell
    # begins it afresh after that: pending_starts.py); None: it may wait as long
    # as the slots stay busy.
    held_for: float | None = None


@dataclass(frozen=True)
class Deferred:
    """The executor cannot start the job now: back to the queue as ``record``."""

    record: JobRecord


class Starting(ABC):
    """A start the executor has begun without waiting for it (the local one: its
    supervisor is asked for; the job's pid comes later). The shell selects on
    :meth:`fileno`, then takes each ready one's :meth:`report`, commits the
    reports of a turn together (durable before anything acts on them), and
    only then calls :meth:`release`: nothing runs before its record says so.
    The job holds its leases meanwhile."""

    def __init__(self, record: JobRecord, run_dir: Path, deadline: float) -> None:
        self.record = record
        self.run_dir = run_dir
        self.deadline = deadline  # time.monotonic(): collect it by then, ready or not

    @abstractmethod
    def fileno(self) -> int:
        """Readable once :meth:`report` will not wait long."""

    @abstractmethod
    def report(self) -> Report:
        """The job's ``running`` step to commit, or how the start failed; or its next
        stage, a :class:`Starting` itself (the container image check, then its
        supervisor); or :class:`Deferred`: back to the queue, nothing started."""

    @abstractmethod
    def release(self, record: JobRecord) -> Running:
        """Its running ``record`` is durable: let the job run."""

    @abstractmethod
    def abandon(self) -> None:
        """Never released (its record could not be committed, or the watcher is
        going away): the gated job is ended without running."""

    def withdraw(self) -> None:
        """Begun ahead (``Launch.ahead``) and never to be released: leave the run
        as a queued job's (waits briefly; a start that cannot be begun ahead
        never gets here)."""
        self.abandon()

    def hurry(self) -> None:
        """The watcher is stopping: be ready to report soon (a start that waits on an
        engine goes back to the queue instead of waiting out its deadline)."""
        return None


Start = Running | Deferred | Ended | Starting  # started, wait, never ran, or on its way
# What a Starting reports (see its report()); Running: a next stage that started at once.
Report = Step | Ended | Starting | Deferred | Running


@dataclass(frozen=True)
class Tick:
    """What one poll may look at: ``sweep`` is the periodic full look (ABORT,
    adopted processes); ``children`` that a child of ours exited (SIGCHLD)."""

    monotonic: float
    sweep: bool
    children: bool


@dataclass
class Polled:
    """One poll's answer: jobs that ended, jobs the executor wants stopped (its
    own deadline), and jobs that could not be looked at (disk full, a bug …:
    logged once; the shell files one whose run directory is gone)."""

    ended: list[Ended] = field(default_factory=list)
    stop: list[tuple[Running, Reason]] = field(default_factory=list)
    failed: list[Running] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    """What an executor is given instead of the runner."""

    layout: Layout
    config: Config
    clock: Clock
    host: str
    owner: str  # this watcher's owner string (host:pid:start)
    guard: LoopGuard  # one bad job never stops the loop (each failure logged once)
    agents: Mapping[str, Agent]  # by name (whether a driver runs a job's agent)
    # Forks the supervisors of every executor that runs them here (local, container).
    fork_server: ForkServer = field(default_factory=ForkServer)
    # Wakes the loop's sleep (thread-safe): an engine command off the loop answered.
    wake: Callable[[], None] = field(default=lambda: None)
    # Heartbeat and WATCHDOG=1 when due: called while recovery waits on an engine.
    keepalive: Callable[[], None] = field(default=lambda: None)

    def holder(self, job: Running) -> str | None:
        """Who took ``job`` over while we were silent, if anyone (check before any write)."""
        return taken_by(job.run_dir, job.record.owner, self.owner)


class Recovery(Protocol):
    """One recovery pass's questions to an executor (see the module docstring)."""

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        """Add what this executor knows of a run to its snapshot (Slurm: its state)."""

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        """Before a job is queued again: end anything started but never recorded
        (``local``: its last start was on this host). False if that cannot be
        known now (then the job is left for the next pass)."""

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        """The end of a job recovery found finished (``lost``: with no exit record);
        None if it cannot be told now."""


class Executor(Protocol):
    name: str
    # start() only begins: it returns a Starting (or raises) and records nothing
    # before it; so a job claimed this turn may have its queued record written
    # after it (intake.py's write behind), while the executor works.
    begins_unrecorded: bool

    def open(self) -> None:
        """Before the first start (the local executor warms its supervisors)."""

    def close(self) -> None:
        """The watcher is going away; jobs keep running."""

    def start(self, launch: Launch) -> Start:
        """Start the job, record it running (before it may run), or say why not;
        or begin it and hand back a :class:`Starting` the shell finishes."""

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        """Look at this executor's running jobs; those that ended come back as :class:`Ended`."""

    def cancel(self, job: Running, reason: Reason) -> None:
        """Stop the job (its record already says why); it ends through :meth:`poll`."""

    def forget(self, job: Running, *, end: bool = False) -> None:
        """Drop what we hold for the job, touching nothing (another watcher took it
        over); ``end``: its run directory is gone: end its processes, record nothing."""

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        """Watch a job that still runs under a previous watcher; record that we own it."""

    def recovery(self) -> Recovery:
        """A recovery pass starts: what it asks this executor, fresh for the pass."""


def executor_for(executors: Mapping[str, Executor], record: JobRecord) -> Executor:
    """The job's executor among ``executors``; ValueError (naming the ones there are)
    if there is none of its name."""
    try:
        return executors[record.executor]
    except KeyError:
        raise ValueError(
            f"job {record.id}: no executor {record.executor!r} in this watcher "
            f"(it has {', '.join(sorted(executors))})"
        ) from None
