"""The watcher: one loop that claims, schedules, monitors and finalizes.

Theory of operation. inotify (watchdog, on its own thread) only *hints*
which inbox paths to look at; a full rescan every ``rescan_interval`` is the
truth, and catches whatever the hints missed. The main thread does all the
work: each turn it takes complete prompts, starts queued jobs while slots are
free, polls running jobs (ABORT marker, exit record, heartbeat), then sleeps
on a self-pipe that signals, inotify hints and child exits all write to.
Signal handlers only set flags.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from hopper.agents.base import Agent
from hopper.agents.registry import builtin_agents
from hopper.clock import Clock, SystemClock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import PriorityChange
from hopper.core.owner import Owner, WatcherId
from hopper.core.queued import QueuedJobs
from hopper.core.record import JobRecord
from hopper.core.recovery import Action
from hopper.core.schedule import KnownJob, schedule
from hopper.core.states import Reason
from hopper.endings import Endings
from hopper.executors import registry
from hopper.executors.protocol import Context, Ended, Executor, How
from hopper.hooks import HookRunner
from hopper.intake import Intake
from hopper.loopguard import LoopGuard, is_unwritable
from hopper.proc import identity
from hopper.proc.openfiles import open_for_writing
from hopper.reconcile import FiledRuns, reconcile
from hopper.runner import Runner, holder_for
from hopper.scaleout import ScaleOut
from hopper.sdnotify import Notifier
from hopper.store import ledger
from hopper.store.claim import ClaimFailed
from hopper.store.inbox import Candidate, candidate, in_scope, is_settled, scan
from hopper.store.inbox_backlog import Backlog
from hopper.store.inbox_events import InboxEvents, InboxObserver
from hopper.store.jobfile import ABORT_FILE
from hopper.store.known import KnownJobs
from hopper.store.layout import Layout
from hopper.store.markers import read_pause, take_priority_request
from hopper.store.takeover import taken_by
from hopper.wake import Waker

log = logging.getLogger(__name__)

QUEUE_SWEEP_INTERVAL = 1.0  # seconds between full passes over the queued jobs
SWEEP_BUDGET = 0.1  # seconds of a pass per turn at most: a large queue is swept over turns
SWEEP_REST = 3.0  # after a slice of a pass, this many times its cost without sweeping
WINDOW_MIN = 64  # queued jobs below this count are always scheduled in full
CLAIM_BATCH = 256  # prompts claimed per turn at most; the rest wait for the next turn
CLAIM_BUDGET = 0.2  # seconds of claiming per turn at most: starts and exits wait no longer
DEGRADED_RETRY = 1.0  # seconds between write probes while the root takes no writes


@dataclass
class Flags:
    stop: bool = False
    reload: bool = False
    signals: list[int] = field(default_factory=list)


class Watcher:
    def __init__(
        self,
        layout: Layout,
        config: Config,
        *,
        clock: Clock | None = None,
        agents: dict[str, Agent] | None = None,
        host: str | None = None,
        executors: Mapping[str, Executor] | None = None,
    ) -> None:
        """``executors``: by name, instead of the registered ones (tests drive the
        watcher in-process with a fake one and a fake clock)."""
        self.layout = layout
        self.config = config
        self.clock = clock or SystemClock()
        host = host or socket.gethostname()
        started = identity.start_time(os.getpid()) or time.time()
        self.ident = WatcherId(host=host, owner=Owner(host, os.getpid(), started).text())
        agents = agents or builtin_agents(config)
        self.intake = Intake(layout, config, agents, self.clock, self.ident)
        self.guard = LoopGuard()  # one set of failing steps, each logged once
        self.limits = config.slot_limits()
        self.scale = ScaleOut(layout, config, self.ident, self.clock, self.limits)
        self.hooks = HookRunner(self.clock)
        if executors is None:
            ctx = Context(
                layout,
                config,
                self.clock,
                self.ident.host,
                self.ident.owner,
                self.guard,
                holder_for(self.ident.owner),
                agents,
            )
            executors = registry.build(ctx)
        endings = Endings(config, self.intake, self.clock, self.hooks, agents)
        self.runner = Runner(
            layout, config, self.intake, self.clock, executors, self.scale, endings, self.guard
        )
        self.degraded: str | None = None  # why the root takes no writes now (None: healthy)
        self._backlog = Backlog()  # complete prompts not yet claimed, and their claim order
        self._last_beat = self.clock.monotonic()
        self._filed = FiledRuns()  # finished runs a reconcile pass need not read again
        self.queued = QueuedJobs()  # by id, with the start order kept (core/queued.py)
        self.waker = Waker()
        self.events = InboxEvents(self.waker.wake)
        self.flags = Flags()
        self._skipped: set[Path] = set()  # logged once, not claimable
        self._waiting: set[Path] = set()  # seen but not yet complete
        self._next_rescan = 0.0
        self._next_reconcile = 0.0
        self._next_queue_sweep = 0.0
        self._sweep: list[str] = []  # queued ids this pass has still to look at, last first
        self._next_slice = 0.0
        self._next_notify = 0.0
        self.notifier = Notifier()
        self._stop_deadline: float | None = None
        self.known = KnownJobs(layout)
        self._paused: frozenset[str] = frozenset()  # queued ids held only by PAUSE

    # -- lifecycle --------------------------------------------------------------
    def run(self, *, until_idle: bool = False) -> int:
        """Serve until SIGTERM/SIGINT (or, with ``until_idle``, until nothing is left)."""
        # Each start-up step is guarded: a full or read-only root comes up
        # degraded (and says so) instead of crash-looping under systemd.
        self._guarded("start-up: create the root's folders", self.layout.ensure)
        self._guarded("start-up: read the heartbeats", self.scale.start)
        self._beat(force=True)  # before any claim: we are alive
        reexec = False
        previous = self._install_signals()
        observer = InboxObserver(self.layout.inbox, self.events)
        observer.start()
        self.runner.open()  # the local executor starts its fork server
        try:
            if self.degraded is None:
                self._guarded("reconcile", self._reconcile)
                self._guarded("intake", lambda: self._rescan(full=True))
            self.notifier.ready(self._status_line())
            log.info("watching %s (host=%s)", self.layout.inbox, self.ident.host)
            while True:
                self.turn()
                self._notify()
                if self.flags.reload and not self.flags.stop:
                    reexec = True
                    break
                if self.flags.stop and (not self.runner.busy or self.config.on_stop == "detach"):
                    break
                if self._stop_deadline is not None and self.clock.monotonic() > self._stop_deadline:
                    log.error(
                        "stop: %d jobs still running at the deadline; leaving them",
                        len(self.runner.running),
                    )
                    break
                if until_idle and self.idle():
                    break
                self.waker.wait(self._sleep_for(), self.runner.waiting_on())
        finally:
            if reexec:
                self.notifier.reloading()
            else:
                self.notifier.stopping()
            self.runner.close()
            self._guarded("beat", lambda: self.scale.close(len(self.runner.running)))
            self.hooks.close(timeout=self.config.hooks.timeout)
            observer.stop()
            self.waker.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if reexec:
            self._reexec()
        return 0

    @staticmethod
    def _reexec() -> None:
        """SIGHUP: replace this process with a fresh watcher; jobs keep running.

        The pid (and so the owner string) stays the same, so the new image
        adopts every running job at its first reconcile.
        """
        log.info("reloading: re-executing the watcher; running jobs are kept")
        argv = [sys.executable, "-m", "hopper", *sys.argv[1:]]
        os.execv(sys.executable, argv)  # noqa: S606 - an argv, no shell

    def _status_line(self) -> str:
        line = f"{len(self.runner.running)} running, {len(self.queued)} queued" + (
            f", {self.runner.io_errors} write errors" if self.runner.io_errors else ""
        )
        if self.degraded is not None:
            return f"DEGRADED: {self.degraded}; claiming paused; {line}"
        return line

    def _notify(self) -> None:
        """Watchdog pings come only from here: a wedged loop stops them.

        Called once a turn and from inside long steps (:meth:`_keepalive`), so
        a turn that does much work still pings while it makes progress.
        """
        mono = self.clock.monotonic()
        if mono >= self._next_notify:
            interval = self.notifier.watchdog_interval()
            self.notifier.watchdog()
            self.notifier.status(self._status_line())
            # 0.8 of systemd's customary half: a ping due in the middle of a long
            # step still lands within WatchdogSec/2 of the previous one.
            self._next_notify = mono + (0.8 * interval if interval else 5.0)

    def _install_signals(self) -> dict[int, Any]:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            self.flags.stop = True
            self.flags.signals.append(signum)

        def on_reload(signum: int, frame: FrameType | None) -> None:
            self.flags.reload = True

        def on_child(signum: int, frame: FrameType | None) -> None:
            self.runner.child_exited = True  # the wakeup fd wakes the loop

        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP)
        previous: dict[int, Any] = {s: signal.getsignal(s) for s in handled}
        signal.signal(signal.SIGHUP, on_reload)
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGCHLD, on_child)
        self.waker.attach_signals()
        return previous

    def turn(self) -> None:
        """One pass: intake, start, poll. Never raises: each step is guarded.

        A turn is bounded: at most CLAIM_BATCH claims (the rest wait in the
        backlog for the next turn), and the long steps call :meth:`_keepalive`
        so the heartbeat file and WATCHDOG=1 keep coming whatever the load.
        """
        self._guarded("beat", self._beat)
        self._guarded("starts", self.runner.settle_starts)  # reported since the last turn
        if self.flags.stop:
            self._guarded("stop", self._begin_stop)
        elif self.degraded is None:  # a full or read-only root: claim and start nothing
            self._guarded("intake", self._intake)
            self._guarded("start", self._start_queued)
            if self.clock.monotonic() >= self._next_reconcile:
                self._guarded("reconcile", self._reconcile)
        before = len(self.runner.running)
        self._guarded("poll", self.runner.poll)  # ended jobs are handled in Runner.ended
        if len(self.runner.running) < before and not self.flags.stop:
            # A slot just freed: fill it now, not a poll_interval later.
            self._guarded("start", self._start_queued)
        self._guarded("starts", self.runner.settle_starts)

    def _beat(self, *, force: bool = False) -> None:
        """Our heartbeat file; a host that just died is reconciled at once.

        The heartbeat is also the probe of the root: a write refused for
        space or writability enters degraded mode, and while degraded every
        turn tries again, so the first write that succeeds ends it.
        """
        force = force or self.degraded is not None
        mono = self.clock.monotonic()
        try:
            newly = self.scale.beat(self.runner.running, len(self.queued), force=force)
        except OSError as exc:
            if is_unwritable(exc):
                self._degrade(f"cannot write {exc.filename or self.layout.root}: {exc.strerror}")
                return
            raise
        if self.scale.wrote:
            silent = mono - self._last_beat
            self._last_beat = mono
            if silent >= self.config.host_dead_after:
                # Stopped (SIGSTOP, a frozen VM) long enough to look dead: another
                # host may have taken our jobs. Check them all before acting.
                log.warning(
                    "this watcher wrote no heartbeat for %.0fs (host_dead_after %gs): "
                    "checking which of its jobs other watchers took over",
                    silent,
                    self.config.host_dead_after,
                )
                self._drop_taken()
            if self.degraded is not None:
                self._recovered()
        if newly:
            self._next_reconcile = 0.0

    def _degrade(self, why: str) -> None:
        if self.degraded is None:
            log.error(
                "DEGRADED: %s; claiming nothing until the root takes writes again "
                "(running jobs are kept; free space or remount read-write)",
                why,
            )
            self.notifier.status(f"DEGRADED: {why}; claiming paused")
        self.degraded = why

    def _recovered(self) -> None:
        log.info("recovered from degraded mode: the root takes writes again (%s)", self.degraded)
        self.degraded = None
        self._next_reconcile = 0.0  # recovery may have been skipped at start-up
        self._next_rescan = 0.0
        self._next_notify = 0.0  # tell systemd at once

    def _guarded(self, phase: str, step: Callable[[], None]) -> None:
        """Run one step of the loop: any exception is logged once (per phase) and kept in."""
        self.guard.step(phase, step)

    def _keepalive(self) -> None:
        """Inside a long step: heartbeat and WATCHDOG=1 when due (two clock reads otherwise)."""
        self._guarded("beat", self._beat)
        self._notify()

    def _mine(self, job_id: str, record: JobRecord) -> bool:
        """Is this queued job still ours? Drops it (logged) if another watcher took it."""
        holder = taken_by(self.layout.run_dir(job_id), record.owner, self.ident.owner)
        if holder is None:
            return True
        self.queued.pop(job_id, None)
        log.warning(
            "job=%s was taken over by %s while this watcher was silent; leaving it to them",
            job_id,
            holder,
        )
        return False

    def _drop_taken(self) -> None:
        for job_id, record in list(self.queued.items()):
            self._mine(job_id, record)
        for job in list(self.runner.running.values()):
            self.runner.taken(job)

    def _reconcile(self) -> None:
        """Recover anything half-done (at start, then every reconcile_interval)."""
        self._next_reconcile = self.clock.monotonic() + self.config.reconcile_interval
        self._drop_taken()
        counts = reconcile(
            self.runner,
            self.clock,
            self.queued,
            self.scale.view(fresh=True),
            keepalive=self._keepalive,
            filed=self._filed,
        )
        acted = {k: v for k, v in counts.items() if k not in (Action.NOTHING, Action.NOT_MINE)}
        if acted:
            log.info("recovered: %s", ", ".join(f"{k}={v}" for k, v in acted.items()))

    def idle(self) -> bool:
        held = (  # PAUSE: drained (lengths first: no set of a long queue on every turn)
            not self.runner.running
            and len(self.queued) <= len(self._paused)
            and set(self.queued) <= self._paused
        )
        return (
            (not self.queued or held)
            and not self.runner.requeued
            and not self.runner.busy
            and not self._waiting
            and not self._backlog
            and not any(c.path not in self._skipped for c in scan(self.layout.inbox))
        )

    def _sleep_for(self) -> float:
        if self.degraded is not None:  # no rescans: probe the root again soon
            return min(DEGRADED_RETRY, self.config.poll_interval if self.runner.running else 1e9)
        if self._backlog:
            return 0.0  # more prompts to claim: the next turn at once
        until_rescan = max(0.0, self._next_rescan - self.clock.monotonic())
        if self.runner.busy or self.queued or self._waiting or self.flags.stop:
            return min(self.config.poll_interval, until_rescan)
        return until_rescan

    # -- intake -----------------------------------------------------------------
    def _intake(self) -> None:
        complete, pending, rescan = self.events.drain()
        inbox = self.layout.inbox
        complete = {p for p in complete if in_scope(inbox, p)}  # hints obey the scan's rules
        self._waiting |= {p for p in pending if in_scope(inbox, p)}
        self._waiting -= complete
        self._backlog.add(sorted(complete))
        mono = self.clock.monotonic()
        if not self._backlog and (rescan or mono >= self._next_rescan or self._waiting):
            self._rescan(full=rescan or mono >= self._next_rescan)
        elif rescan:
            self._next_rescan = 0.0  # after the backlog is claimed
        self._claim_batch()

    def _claim_batch(self) -> None:
        """Claim at most CLAIM_BATCH prompts (or CLAIM_BUDGET seconds' worth) from the
        backlog, pinging as we go; a prompt dropped during a flood comes in the next batch."""
        deadline = self.clock.monotonic() + CLAIM_BUDGET
        for path in self._backlog.batch(CLAIM_BATCH):
            self.guard.step(
                f"claim:{path}",
                lambda path=path: self._take(path),  # type: ignore[misc]
                what=f"cannot claim {path} (retried at the next rescan)",
            )
            self._keepalive()
            if self.clock.monotonic() >= deadline:
                break

    def _rescan(self, *, full: bool) -> None:
        """Claim what is complete: the whole inbox, or (``full=False``) just the
        prompts still being written, looked up one by one rather than walked."""
        if full:
            self._next_rescan = self.clock.monotonic() + self.config.rescan_interval
            candidates = list(scan(self.layout.inbox))
            self._skipped &= {c.path for c in candidates}  # forget the ones that went away
        else:
            candidates = [c for p in sorted(self._waiting) if (c := candidate(p)) is not None]
        self._waiting &= {c.path for c in candidates}
        fresh = [c for c in candidates if c.path not in self._skipped]
        writers = self._writers(fresh)
        now = self.clock.time()
        settled: list[Path] = []
        for cand in fresh:
            has_writer = None if writers is None else cand.path in writers
            if is_settled(cand, now, self.config.settle, has_writer):
                self._waiting.discard(cand.path)
                settled.append(cand.path)
            else:
                self._waiting.add(cand.path)
        self._backlog.add(settled)

    def _writers(self, fresh: list[Candidate]) -> set[Path] | None:
        # Every candidate, not only young ones: a writer may pause longer than `settle`.
        return open_for_writing({c.path for c in fresh}) if fresh else set()

    def _take(self, path: Path) -> None:
        try:
            record = self.intake.take(path)
        except ClaimFailed as exc:
            self._skip(path, str(exc))
            return
        if record is None:
            return
        if record.reason is None:
            self.queued[record.id] = record
        else:  # rejected at claim: filed already; its hooks run
            self.runner.ended(Ended(record, self.layout.run_dir(record.id), How.FILED))

    def _skip(self, path: Path, why: str) -> None:
        if path not in self._skipped:
            self._skipped.add(path)
            log.error("skipping %s: %s", path, why)

    # -- scheduling -------------------------------------------------------------
    def _start_queued(self) -> None:
        """Abort, reprioritise, then ask core/schedule.py what starts and what fails."""
        for retry in self.runner.requeued:
            self.queued[retry.id] = retry
        self.runner.requeued.clear()
        full = self._sweep_markers()
        if not self.queued:
            self._paused = frozenset()
            return
        if not full and self.runner.busy >= self.config.max_parallel:
            return  # no slot to fill; failures wait for the next sweep
        window = self.queued_window(full)
        mine = self.runner.active()
        decision = schedule(
            queued=window,
            running=mine,
            limits=self.limits,
            pause=read_pause(
                self.layout,
                (r.group for r in window),
                (r.session for r in window),  # on_error = pause
            ),
            known=self._known_jobs(),
            now=self.clock.now(),
            dependency_timeout=self.config.dependency_timeout,
            elsewhere=self.scale.elsewhere(window, mine),  # slots other watchers hold
        )
        self._paused = decision.paused
        for failure in decision.fail:
            record = self.queued.get(failure.job_id)
            if record is None or not self._mine(failure.job_id, record):
                continue
            del self.queued[failure.job_id]
            self._guarded(
                f"reject:{failure.job_id}",
                lambda f=failure, r=record: self._reject(f.job_id, r, f.reason, f.detail),  # type: ignore[misc]
            )
        for n, job_id in enumerate(decision.start):
            if n % 16 == 15:
                self._keepalive()
            record = self.queued.get(job_id)
            if record is None or not self._mine(job_id, record):
                continue  # taken over while we were stopped: never start it twice
            del self.queued[job_id]
            if not self.runner.start(record):
                self.queued[job_id] = record  # another watcher took the slot first

    def _sweep_markers(self) -> bool:
        """ABORT and PRIORITY markers of queued jobs; True when a pass has just ended.

        A pass looks at every queued job (and then the dependency verdicts are
        taken over the whole queue): once a second, not on every turn (a
        backlog of 100,000 would make each start O(n)). A pass spends at most
        SWEEP_BUDGET per turn and then rests SWEEP_REST times as long, so over
        a large queue it is spread over turns, takes at most a quarter of the
        loop's time, and claims and starts go on between its slices.
        """
        mono = self.clock.monotonic()
        if mono < self._next_slice:
            return False
        if not self._sweep:
            if mono < self._next_queue_sweep:
                return False
            self._next_queue_sweep = mono + QUEUE_SWEEP_INTERVAL
            self._sweep = sorted(self.queued, reverse=True)  # taken from the end: claim order
        deadline = mono + SWEEP_BUDGET
        n = 0
        while self._sweep:
            n += 1
            if n % CLAIM_BATCH == 0:
                self._keepalive()
                if self.clock.monotonic() >= deadline:
                    break
            job_id = self._sweep.pop()
            queued = self.queued.get(job_id)  # started, ended, or a keepalive dropped it
            if queued is None:
                continue
            run_dir = self.layout.run_dir(job_id)
            if (run_dir / ABORT_FILE).exists():
                if self._mine(job_id, queued):
                    self.runner.abort_queued(self.queued.pop(job_id))
                continue
            self._guarded(
                f"priority:{job_id}",
                lambda job_id=job_id, run_dir=run_dir: self._apply_priority(  # type: ignore[misc]
                    job_id, run_dir
                ),
            )
        end = self.clock.monotonic()
        self._next_slice = end + SWEEP_REST * (end - mono)
        return not self._sweep

    def _reject(self, job_id: str, record: JobRecord, reason: Reason, detail: str) -> None:
        self.runner.reject(record, reason, detail)

    def queued_window(self, full: bool) -> list[JobRecord]:
        """The queued jobs the scheduler needs to see this turn.

        A full sweep sees all of them. Otherwise: every job with a session or
        dependencies (their order and verdicts depend on the rest), plus the
        first few other jobs in start order — enough to fill every slot several
        times over — taken from the order core/queued.py keeps, so a start costs
        O(log n), not a pass over the queue.
        A job the window leaves out (its group paused or at its limit) is seen
        at the end of the next pass of the sweep, within QUEUE_SWEEP_INTERVAL
        while the queue is small enough to sweep in one turn.
        """
        if full or len(self.queued) <= WINDOW_MIN:
            return list(self.queued.values())
        size = max(WINDOW_MIN, 4 * self.config.max_parallel)
        return self.queued.special() + self.queued.first(size)

    def _apply_priority(self, job_id: str, run_dir: Path) -> None:
        """``hopper priority`` left a request: the owner writes it into job.json."""
        request = take_priority_request(run_dir)
        if request is None:
            return
        record = self.queued[job_id]
        now = self.clock.now()
        if isinstance(request, str):
            ledger.note(run_dir, "priority_rejected", now, detail=request)
            log.warning("job=%s priority request ignored: %s", job_id, request)
            return
        updated = ledger.commit(
            run_dir, lifecycle.priority_changed(record, PriorityChange(now, request))
        )
        self.queued[job_id] = updated
        log.info("job=%s priority=%d->%d", job_id, record.priority, request)

    def _known_jobs(self) -> list[KnownJob]:
        """(id, name, state) of every job, only when some queued job has ``after``."""
        if not any(r.after for r in self.queued.values()):
            return []
        mine = {
            **{i: KnownJob(i, r.name, r.state) for i, r in self.queued.items()},
            **{
                i: KnownJob(i, j.record.name, j.record.state)
                for i, j in self.runner.running.items()
            },
        }
        others = [k for k in self.known.refresh(skip=mine) if k.id not in mine]
        return [*mine.values(), *others]

    # -- shutdown ---------------------------------------------------------------
    def _begin_stop(self) -> None:
        if self._stop_deadline is not None:
            return
        policy = self.config.on_stop
        self.runner.finish_starts()  # released first, so they are stopped with the rest
        log.info("stopping: %d running jobs (on_stop=%s)", len(self.runner.running), policy)
        if policy == "wait":
            self._stop_deadline = self.clock.monotonic() + self.config.stop_timeout
            return
        self._stop_deadline = self.clock.monotonic() + self.config.kill_grace + 10.0
        if policy == "detach":
            return
        for job in list(self.runner.running.values()):
            if not job.stop_sent:
                self.runner.request_stop(job, Reason.SHUTDOWN)
