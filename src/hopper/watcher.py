"""The watcher: one loop that claims, schedules, monitors and finalizes.

Theory of operation. The main thread does all the work, one bounded turn at
a time: it settles the starts that reported, claims complete prompts
(claims.py: inotify hints read in this thread, a periodic rescan as the
truth, bounded batches), starts queued jobs while slots are free
(starting.py: markers, core/schedule.py, the runner), polls running jobs
through their executors (runner.py: exits, ABORT, heartbeats; every end
handled in one place), then sleeps in one ``select`` on the inbox's inotify
descriptor (store/inbox_watch.py) and a self-pipe that signals, child exits
and start reports write to (wake.py). Signal handlers only set flags. This
module holds the loop itself: start-up, signals, the heartbeat and degraded
mode, recovery passes, systemd notifications and the stop.
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
from functools import partial
from types import FrameType
from typing import Any

from hopper.agents.base import Agent
from hopper.agents.registry import builtin_agents
from hopper.claims import Claims
from hopper.clock import Clock, SystemClock
from hopper.config import Config
from hopper.core.owner import Owner, WatcherId
from hopper.core.queued import QueuedJobs
from hopper.core.record import JobRecord
from hopper.core.recovery import Action
from hopper.core.states import Reason
from hopper.endings import Endings
from hopper.executors import registry
from hopper.executors.protocol import Context, Ended, Executor, How
from hopper.hooks import HookRunner
from hopper.intake import Intake
from hopper.loopguard import LoopGuard, is_unwritable
from hopper.proc import identity
from hopper.reconcile import FiledRuns, reconcile
from hopper.runner import Runner
from hopper.scaleout import ScaleOut
from hopper.sdnotify import Notifier
from hopper.starting import Starts
from hopper.store import ledger
from hopper.store.inbox_events import InboxEvents
from hopper.store.inbox_watch import InboxWatch
from hopper.store.layout import Layout
from hopper.store.record_spares import RecordSpares
from hopper.wake import Waker

log = logging.getLogger(__name__)

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
        self.waker = Waker()
        if executors is None:
            ctx = Context(
                layout,
                config,
                self.clock,
                self.ident.host,
                self.ident.owner,
                self.guard,
                agents,
                wake=self.waker.wake,  # an engine command answered off the loop
                keepalive=self._keepalive,  # recovery waiting on an engine
            )
            executors = registry.build(ctx)
        endings = Endings(config, self.intake, self.clock, self.hooks, agents)
        self.runner = Runner(
            layout,
            config,
            self.intake,
            self.clock,
            executors,
            self.scale,
            endings,
            self.guard,
            defer_filing=not config.budgets.all_rules(),  # no spend to count before a start
        )
        self.degraded: str | None = None  # why the root takes no writes now (None: healthy)
        self._last_beat = self.clock.monotonic()
        self._filed = FiledRuns()  # finished runs a reconcile pass need not read again
        self.queued = QueuedJobs()  # by id, with the start order kept (core/queued.py)
        self.events = InboxEvents()
        self.claims = Claims(
            layout,
            config,
            self.clock,
            self.guard,
            self.intake,
            self.events,
            keepalive=self._keepalive,
        )
        self.starts = Starts(
            layout,
            config,
            self.clock,
            self.guard,
            self.runner,
            self.scale,
            self.limits,
            self.queued,
            owner=self.ident.owner,
            keepalive=self._keepalive,
        )
        self.flags = Flags()
        self._next_reconcile = 0.0
        self._next_notify = 0.0
        self.notifier = Notifier()
        self._stop_deadline: float | None = None
        self._spares: RecordSpares | None = None
        self._spares_before: RecordSpares | None = None

    # -- lifecycle --------------------------------------------------------------
    def run(self, *, until_idle: bool = False) -> int:
        """Serve until SIGTERM/SIGINT (or, with ``until_idle``, until nothing is left)."""
        # Each start-up step is guarded: a full or read-only root comes up
        # degraded (and says so) instead of crash-looping under systemd.
        self._guarded("start-up: create the root's folders", self.layout.ensure)
        self._guarded("start-up: read the heartbeats", self.scale.start)
        self._guarded("start-up: spare record files", self._open_spares)
        self._beat(force=True)  # before any claim: we are alive
        reexec = False
        previous = self._install_signals()
        watch = InboxWatch(self.layout.inbox)  # read in this thread, once a turn
        if watch.start():
            self.events.watch = watch
        self.runner.open()  # the local executor starts its fork server
        try:
            if self.degraded is None:
                self._guarded("reconcile", self._reconcile)
                self._guarded("intake", lambda: self.claims.rescan(full=True))
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
                        self.runner.running_count(),
                    )
                    break
                if until_idle and self.idle():
                    break
                # The turn's own claims (renames out of the inbox) left events: read them
                # now, so they wake no turn; a hint among them means no sleep at all.
                self._guarded("inbox", self.events.pull)
                inbox = [watch] if watch.live else []  # a prompt renamed in wakes the loop
                self.waker.wait(self._sleep_for(), [*self.runner.waiting_on(), *inbox])
        finally:
            if reexec:
                self.notifier.reloading()
            else:
                self.notifier.stopping()
            self.runner.close()
            self._guarded("spare record files", self._close_spares)
            self._guarded("beat", lambda: self.scale.close(self.runner.running_count()))
            self.hooks.close(timeout=self.config.hooks.timeout)
            self.events.watch = None
            watch.close()
            self.waker.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if reexec:
            self._reexec()
        return 0

    def _open_spares(self) -> None:
        """Finished jobs' record files recycled for new jobs' first records while this
        watcher runs (store/record_spares.py): a rename instead of a new file each."""
        spares = RecordSpares(self.layout.state_dir, self.ident.host, os.getpid())
        self._spares_before = ledger.use_spares(spares)
        self._spares = spares

    def _close_spares(self) -> None:
        if self._spares is not None:
            ledger.use_spares(self._spares_before)
            self._spares.close()
            self._spares = None

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
        line = f"{self.runner.running_count()} running, {len(self.queued)} queued" + (
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
            self.runner.note_child_exit()  # the wakeup fd wakes the loop

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
        self._guarded("inbox", self.events.pull)  # every turn: the descriptor stays drained
        self._guarded("beat", self._beat)
        self._guarded("starts", self.runner.settle_starts)  # reported since the last turn
        if self.flags.stop:
            self._guarded("stop", self._begin_stop)
        elif self.degraded is None:  # a full or read-only root: claim and start nothing
            self._guarded("intake", self._intake)
            self._guarded("start", self.starts.start_queued)
            if self.clock.monotonic() >= self._next_reconcile:
                self._guarded("reconcile", self._reconcile)
        before = self.runner.running_count()
        self._guarded("poll", self.runner.poll)  # ended jobs are handled in Runner.ended
        if self.runner.running_count() < before and not self.flags.stop:
            # A slot just freed: fill it now, not a poll_interval later, with the
            # spend of what just ended counted.
            self.starts.budgets.refresh()
            self._guarded("start", self.starts.start_queued)
        self._guarded("starts", self.runner.settle_starts)
        # Plain jobs' ends, left by the poll for after those starts (Runner._defer).
        self._guarded("file", self.runner.file_deferred)
        if not self.flags.stop:
            self._guarded("budgets", self.starts.budget_turn)  # news, on_budget = "stop"
        if not self.flags.stop and self.degraded is None:
            # Every slot busy: the next job's supervisor is forked while they run.
            self._guarded("start ahead", self.starts.start_ahead)

    def _beat(self, *, force: bool = False) -> None:
        """Our heartbeat file; a host that just died is reconciled at once.

        The heartbeat is also the probe of the root: a write refused for
        space or writability enters degraded mode, and while degraded every
        turn tries again, so the first write that succeeds ends it.
        """
        force = force or self.degraded is not None
        mono = self.clock.monotonic()
        try:
            newly = self.scale.beat(self.runner.running_ids(), len(self.queued), force=force)
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
        self.claims.next_rescan = 0.0
        self._next_notify = 0.0  # tell systemd at once

    def _guarded(self, phase: str, step: Callable[[], None]) -> None:
        """Run one step of the loop: any exception is logged once (per phase) and kept in."""
        self.guard.step(phase, step)

    def _keepalive(self) -> None:
        """Inside a long step: heartbeat and WATCHDOG=1 when due (two clock reads otherwise)."""
        self._guarded("beat", self._beat)
        self._notify()

    def _intake(self) -> None:
        """Claim a batch; each record it yielded queued, or (filed at claim) finished.

        The batch hands the loop back early once the loop is woken (a job's end,
        a start's report: its wake-up pipe or a start's descriptor is ready), so
        a flood is claimed while jobs run, not while a finished job's slot waits
        for the loop."""
        waiting_on = self.runner.waiting_on()
        for record in self.claims.turn(lambda: self.waker.pending(waiting_on)):
            self.guard.step(f"claimed:{record.id}", partial(self._claimed, record))

    def _claimed(self, record: JobRecord) -> None:
        if record.reason is None:
            self.queued[record.id] = record
        else:  # rejected at claim: filed already; its hooks run
            self.runner.ended(Ended(record, self.layout.run_dir(record.id), How.FILED))

    def _drop_taken(self) -> None:
        self.starts.drop_taken()
        for job in self.runner.running_jobs():
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
        paused = self.starts.paused  # by PAUSE, or by a budget reached
        if self.starts.held:
            paused = paused | self.starts.held
        held = (  # PAUSE: drained (lengths first: no set of a long queue on every turn)
            not self.runner.running_count()
            and len(self.queued) <= len(paused)
            and set(self.queued) <= paused
        )
        return (
            (not self.queued or held)
            and not self.runner.has_requeued()
            and not self.runner.busy
            and self.claims.inbox_drained()
        )

    def _sleep_for(self) -> float:
        if self.degraded is not None:  # no rescans: probe the root again soon
            polling = self.config.poll_interval if self.runner.running_count() else 1e9
            return min(DEGRADED_RETRY, polling)
        if self.claims.backlog or (self.events.fresh and not self.flags.stop):
            return 0.0  # more prompts to claim, or hints to look at: the next turn at once
        until_rescan = max(0.0, self.claims.next_rescan - self.clock.monotonic())
        if self.runner.busy or self.queued or self.claims.waiting or self.flags.stop:
            return min(self.config.poll_interval, until_rescan)
        return until_rescan

    # -- shutdown ---------------------------------------------------------------
    def _begin_stop(self) -> None:
        if self._stop_deadline is not None:
            return
        policy = self.config.on_stop
        self.runner.finish_starts()  # released first, so they are stopped with the rest
        log.info("stopping: %d running jobs (on_stop=%s)", self.runner.running_count(), policy)
        if policy == "wait":
            self._stop_deadline = self.clock.monotonic() + self.config.stop_timeout
            return
        self._stop_deadline = self.clock.monotonic() + self.config.kill_grace + 10.0
        if policy == "detach":
            return
        for job in self.runner.running_jobs():
            if not job.stop_sent:
                self.runner.request_stop(job, Reason.SHUTDOWN)
