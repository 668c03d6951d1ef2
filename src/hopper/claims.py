"""Claims: which inbox prompts are complete, and taking them in bounded batches.

inotify (watchdog, on its own thread) only *hints* which inbox paths to look
at; a full rescan every ``rescan_interval`` is the truth and catches whatever
the hints missed. A prompt is complete when it was renamed in, closed, or no
process holds it open for writing and it is older than ``settle``. Complete
prompts wait in a backlog (store/inbox_backlog.py) and are claimed at most
CLAIM_BATCH (or CLAIM_BUDGET seconds' worth) per turn, so starts and exits
never wait behind a flood; what a claim yields goes to ``claimed``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from hopper.clock import Clock
from hopper.config import Config
from hopper.core.record import JobRecord
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.proc.openfiles import open_for_writing
from hopper.store.claim import ClaimFailed
from hopper.store.inbox import Candidate, candidate, in_scope, is_settled, scan
from hopper.store.inbox_backlog import Backlog
from hopper.store.inbox_events import InboxEvents
from hopper.store.layout import Layout

log = logging.getLogger(__name__)

CLAIM_BATCH = 256  # prompts claimed per turn at most; the rest wait for the next turn
CLAIM_BUDGET = 0.2  # seconds of claiming per turn at most: starts and exits wait no longer


class Claims:
    """The inbox side of the watcher: complete prompts found, then claimed."""

    def __init__(
        self,
        layout: Layout,
        config: Config,
        clock: Clock,
        guard: LoopGuard,
        intake: Intake,
        events: InboxEvents,
        *,
        keepalive: Callable[[], None],
        claimed: Callable[[JobRecord], None],
    ) -> None:
        self.layout = layout
        self.config = config
        self.clock = clock
        self.guard = guard
        self.intake = intake
        self.events = events
        self.keepalive = keepalive  # heartbeat and WATCHDOG=1 inside a long batch
        self.claimed = claimed  # a claimed record: queued, or filed at claim (rejected)
        self.backlog = Backlog()  # complete prompts not yet claimed, and their claim order
        self.skipped: set[Path] = set()  # logged once, not claimable
        self.waiting: set[Path] = set()  # seen but not yet complete
        self.next_rescan = 0.0

    def busy(self) -> bool:
        """Prompts to claim, or still being written."""
        return bool(self.backlog) or bool(self.waiting)

    def inbox_drained(self) -> bool:
        """Nothing to claim now, nothing being written, no unclaimed prompt left."""
        return (
            not self.waiting
            and not self.backlog
            and not any(c.path not in self.skipped for c in scan(self.layout.inbox))
        )

    def turn(self) -> None:
        complete, pending, rescan = self.events.drain()
        inbox = self.layout.inbox
        complete = {p for p in complete if in_scope(inbox, p)}  # hints obey the scan's rules
        self.waiting |= {p for p in pending if in_scope(inbox, p)}
        self.waiting -= complete
        self.backlog.add(sorted(complete))
        mono = self.clock.monotonic()
        if not self.backlog and (rescan or mono >= self.next_rescan or self.waiting):
            self.rescan(full=rescan or mono >= self.next_rescan)
        elif rescan:
            self.next_rescan = 0.0  # after the backlog is claimed
        self._claim_batch()

    def _claim_batch(self) -> None:
        """Claim at most CLAIM_BATCH prompts (or CLAIM_BUDGET seconds' worth) from the
        backlog, pinging as we go; a prompt dropped during a flood comes in the next batch."""
        deadline = self.clock.monotonic() + CLAIM_BUDGET
        for path in self.backlog.batch(CLAIM_BATCH):
            self.guard.step(
                f"claim:{path}",
                lambda path=path: self._take(path),  # type: ignore[misc]
                what=f"cannot claim {path} (retried at the next rescan)",
            )
            self.keepalive()
            if self.clock.monotonic() >= deadline:
                break

    def rescan(self, *, full: bool) -> None:
        """Claim what is complete: the whole inbox, or (``full=False``) just the
        prompts still being written, looked up one by one rather than walked."""
        if full:
            self.next_rescan = self.clock.monotonic() + self.config.rescan_interval
            candidates = list(scan(self.layout.inbox))
            self.skipped &= {c.path for c in candidates}  # forget the ones that went away
        else:
            candidates = [c for p in sorted(self.waiting) if (c := candidate(p)) is not None]
        self.waiting &= {c.path for c in candidates}
        fresh = [c for c in candidates if c.path not in self.skipped]
        writers = self._writers(fresh)
        now = self.clock.time()
        settled: list[Path] = []
        for cand in fresh:
            has_writer = None if writers is None else cand.path in writers
            if is_settled(cand, now, self.config.settle, has_writer):
                self.waiting.discard(cand.path)
                settled.append(cand.path)
            else:
                self.waiting.add(cand.path)
        self.backlog.add(settled)

    @staticmethod
    def _writers(fresh: list[Candidate]) -> set[Path] | None:
        # Every candidate, not only young ones: a writer may pause longer than `settle`.
        return open_for_writing({c.path for c in fresh}) if fresh else set()

    def _take(self, path: Path) -> None:
        try:
            record = self.intake.take(path)
        except ClaimFailed as exc:
            self._skip(path, str(exc))
            return
        if record is not None:
            self.claimed(record)

    def _skip(self, path: Path, why: str) -> None:
        if path not in self.skipped:
            self.skipped.add(path)
            log.error("skipping %s: %s", path, why)
