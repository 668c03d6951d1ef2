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
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from hopper.agents.base import Agent
from hopper.agents.registry import builtin_agents
from hopper.clock import Clock, SystemClock
from hopper.config import Config
from hopper.core.record import JobRecord
from hopper.core.states import Reason
from hopper.intake import Identity, Intake
from hopper.proc import identity
from hopper.proc.openfiles import open_for_writing
from hopper.reconcile import reconcile
from hopper.runner import Runner
from hopper.store.claim import ClaimFailed
from hopper.store.inbox import Candidate, is_settled, scan
from hopper.store.inbox_events import InboxEvents, InboxObserver
from hopper.store.jobfile import ABORT_FILE
from hopper.store.layout import Layout
from hopper.wake import Waker

log = logging.getLogger(__name__)


@dataclass
class Flags:
    stop: bool = False
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
    ) -> None:
        self.layout = layout
        self.config = config
        self.clock = clock or SystemClock()
        host = host or socket.gethostname()
        started = identity.start_time(os.getpid()) or time.time()
        self.ident = Identity(host=host, owner=f"{host}:{os.getpid()}:{started}")
        self.intake = Intake(layout, config, agents or builtin_agents(), self.clock, self.ident)
        self.runner = Runner(layout, config, self.intake, self.clock)
        self.queued: dict[str, JobRecord] = {}
        self.waker = Waker()
        self.events = InboxEvents(self.waker.wake)
        self.flags = Flags()
        self._skipped: set[Path] = set()  # logged once, not claimable
        self._waiting: set[Path] = set()  # seen but not yet complete
        self._next_rescan = 0.0
        self._stop_deadline: float | None = None

    # -- lifecycle --------------------------------------------------------------
    def run(self, *, until_idle: bool = False) -> int:
        """Serve until SIGTERM/SIGINT (or, with ``until_idle``, until nothing is left)."""
        self.layout.ensure()
        previous = self._install_signals()
        observer = InboxObserver(self.layout.inbox, self.events)
        observer.start()
        try:
            counts = reconcile(self.runner, self.clock, self.queued)
            if counts:
                log.info("recovered: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
            log.info("watching %s (host=%s)", self.layout.inbox, self.ident.host)
            while True:
                self.turn()
                if self.flags.stop and not self.runner.running:
                    break
                if self._stop_deadline is not None and self.clock.monotonic() > self._stop_deadline:
                    log.error(
                        "stop: %d jobs still running at the deadline; leaving them",
                        len(self.runner.running),
                    )
                    break
                if until_idle and self.idle():
                    break
                self.waker.wait(self._sleep_for())
        finally:
            observer.stop()
            self.waker.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0

    def _install_signals(self) -> dict[int, Any]:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            self.flags.stop = True
            self.flags.signals.append(signum)

        def on_child(signum: int, frame: FrameType | None) -> None:
            pass  # the wakeup fd does the work

        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
        previous: dict[int, Any] = {s: signal.getsignal(s) for s in handled}
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGCHLD, on_child)
        self.waker.attach_signals()
        return previous

    def turn(self) -> None:
        """One pass: intake, start, poll. Never raises for bad input."""
        if self.flags.stop:
            self._begin_stop()
        else:
            self._intake()
            self._start_queued()
        self.runner.poll()

    def idle(self) -> bool:
        return (
            not self.queued
            and not self.runner.running
            and not self._waiting
            and not any(c.path not in self._skipped for c in scan(self.layout.inbox))
        )

    def _sleep_for(self) -> float:
        until_rescan = max(0.0, self._next_rescan - self.clock.monotonic())
        if self.runner.running or self.queued or self._waiting or self.flags.stop:
            return min(self.config.poll_interval, until_rescan)
        return until_rescan

    # -- intake -----------------------------------------------------------------
    def _intake(self) -> None:
        complete, pending, rescan = self.events.drain()
        self._waiting |= pending
        for path in sorted(complete):
            self._waiting.discard(path)
            self._take(path)
        mono = self.clock.monotonic()
        if rescan or mono >= self._next_rescan or self._waiting:
            self._rescan(full=rescan or mono >= self._next_rescan)

    def _rescan(self, *, full: bool) -> None:
        if full:
            self._next_rescan = self.clock.monotonic() + self.config.rescan_interval
            candidates = list(scan(self.layout.inbox))
        else:
            candidates = [c for c in scan(self.layout.inbox) if c.path in self._waiting]
        live = {c.path for c in candidates}
        self._waiting &= live
        self._skipped &= live
        fresh = [c for c in candidates if c.path not in self._skipped]
        writers = self._writers(fresh)
        now = self.clock.time()
        for cand in fresh:
            has_writer = None if writers is None else cand.path in writers
            if is_settled(cand, now, self.config.settle, has_writer):
                self._waiting.discard(cand.path)
                self._take(cand.path)
            else:
                self._waiting.add(cand.path)

    def _writers(self, fresh: list[Candidate]) -> set[Path] | None:
        now = self.clock.time()
        young = {c.path for c in fresh if now - c.mtime < self.config.settle}
        return open_for_writing(young) if young else set()

    def _take(self, path: Path) -> None:
        try:
            record = self.intake.take(path)
        except ClaimFailed as exc:
            self._skip(path, str(exc))
            return
        except OSError as exc:
            log.error("cannot claim %s: %s (will retry at the next rescan)", path, exc)
            return
        if record is not None and record.reason is None:
            self.queued[record.id] = record

    def _skip(self, path: Path, why: str) -> None:
        if path not in self._skipped:
            self._skipped.add(path)
            log.error("skipping %s: %s", path, why)

    # -- scheduling -------------------------------------------------------------
    def _start_queued(self) -> None:
        for job_id in sorted(self.queued):
            record = self.queued[job_id]
            if (self.layout.run_dir(job_id) / ABORT_FILE).exists():
                del self.queued[job_id]
                self.runner.abort_queued(record)
                continue
            if len(self.runner.running) >= self.config.max_parallel:
                continue
            del self.queued[job_id]
            try:
                self.runner.start(record)
            except OSError as exc:
                log.error("job=%s could not start: %s", job_id, exc)
                self.runner.intake.reject(
                    self.layout.run_dir(job_id),
                    record,
                    Reason.SPAWN_FAILED,
                    f"could not start: {exc}",
                )

    # -- shutdown ---------------------------------------------------------------
    def _begin_stop(self) -> None:
        if self._stop_deadline is not None:
            return
        log.info("stopping: ending %d running jobs (on_stop=abort)", len(self.runner.running))
        self._stop_deadline = self.clock.monotonic() + self.config.kill_grace + 10.0
        for job in list(self.runner.running.values()):
            if not job.stop_sent:
                self.runner.request_stop(job, Reason.SHUTDOWN)
