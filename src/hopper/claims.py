"""Claims: which inbox prompts are complete, and taking them in bounded batches.

inotify (read in the loop's thread: store/inbox_watch.py) only *hints* which inbox paths to look
at; a full rescan every ``rescan_interval`` is the truth and catches whatever
the hints missed. A prompt is complete when it was renamed in, or, written in
place, once it has not changed for ``settle`` seconds and no process holds it
open for writing (store/inbox_settle.py: a prompt written in two steps is
claimed once, whole). Complete prompts wait in a backlog
(store/inbox_backlog.py) and are claimed at most CLAIM_BATCH (or CLAIM_BUDGET
seconds' worth) per turn, so starts and exits never wait behind a flood; a
turn returns the records its claims yielded (queued, or filed at claim), for the
watcher to queue or finish.
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
from hopper.store.inbox import Candidate, candidate, in_scope, scan
from hopper.store.inbox_backlog import Backlog
from hopper.store.inbox_events import InboxEvents
from hopper.store.inbox_settle import Settling
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
    ) -> None:
        self.layout = layout
        self.config = config
        self.clock = clock
        self.guard = guard
        self.intake = intake
        self.events = events
        self.keepalive = keepalive  # heartbeat and WATCHDOG=1 inside a long batch
        self.backlog = Backlog()  # complete prompts not yet claimed, and their claim order
        self.skipped: set[Path] = set()  # logged once, not claimable
        self.waiting = Settling(config.settle)  # written in place, not yet still for `settle`
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

    def turn(self, woken: Callable[[], bool] | None = None) -> list[JobRecord]:
        """Hints and rescans turned into complete prompts; a batch of them claimed:
        the records they yielded (queued, or filed at claim: rejected).

        ``woken()``, asked after each of the batch's claims, ends the batch early
        when it says the loop has something else to do (a job ended, a start
        reported); at least one prompt is claimed a turn."""
        complete, pending, rescan = self.events.drain()
        inbox = self.layout.inbox
        mono = self.clock.monotonic()
        complete = {p for p in complete if in_scope(inbox, p)}  # hints obey the scan's rules
        written = {p for p in pending if in_scope(inbox, p)} - complete
        self.waiting.forget(complete)
        self.waiting.touched(written, mono)  # changed now: whole no sooner than `settle` on
        self.backlog.discard(written)  # written again before its claim: it waits again
        self.backlog.add(sorted(complete))
        due = self.waiting.next_due()
        settled_some = due is not None and due <= mono  # a prompt's settle time is up
        if not self.backlog and (rescan or mono >= self.next_rescan or settled_some):
            self.rescan(full=rescan or mono >= self.next_rescan)
        elif rescan:
            self.next_rescan = 0.0  # after the backlog is claimed
        return self._claim_batch(woken)

    def _claim_batch(self, woken: Callable[[], bool] | None = None) -> list[JobRecord]:
        """Claim at most CLAIM_BATCH prompts (or CLAIM_BUDGET seconds' worth, or until
        ``woken`` says so) from the backlog, pinging as we go; a prompt dropped during
        a flood comes in the next batch."""
        deadline = self.clock.monotonic() + CLAIM_BUDGET
        claimed: list[JobRecord] = []
        for path in self.backlog.batch(CLAIM_BATCH):
            self.guard.step(
                f"claim:{path}",
                lambda path=path: self._take(path, claimed),  # type: ignore[misc]
                what=f"cannot claim {path} (retried at the next rescan)",
            )
            self.keepalive()
            if self.clock.monotonic() >= deadline or (woken is not None and woken()):
                break
        return claimed

    def rescan(self, *, full: bool) -> None:
        """Claim what is complete: the whole inbox, or (``full=False``) just the
        prompts written in place whose settle time is up, looked up one by one
        rather than walked."""
        mono = self.clock.monotonic()
        if full:
            self.next_rescan = mono + self.config.rescan_interval
            candidates = list(scan(self.layout.inbox))
            found = {c.path for c in candidates}
            self.skipped &= found  # forget the ones that went away
            self.waiting.keep_only(found)
        else:
            due = self.waiting.due(mono)
            candidates = [c for p in due if (c := candidate(p)) is not None]
            self.waiting.forget(set(due) - {c.path for c in candidates})  # gone
        self.waiting.forget(c.path for c in candidates if c.path in self.skipped)
        fresh = [c for c in candidates if c.path not in self.skipped and c.path not in self.backlog]
        now = self.clock.time()
        still = [c for c in fresh if self.waiting.look(c.path, (c.size, c.mtime), now, mono)]
        writers = self._writers(still)
        settled: list[Path] = []
        for cand in still:
            if writers is not None and cand.path in writers:
                self.waiting.held(cand.path, mono)  # open for writing: never complete
            else:  # nobody writes it, or /proc cannot tell: still for `settle` decides
                self.waiting.forget([cand.path])
                settled.append(cand.path)
        self.backlog.add(settled)

    @staticmethod
    def _writers(still: list[Candidate]) -> set[Path] | None:
        # Every still candidate, not only young ones: a writer may pause longer than `settle`.
        return open_for_writing({c.path for c in still}) if still else set()

    def _take(self, path: Path, claimed: list[JobRecord]) -> None:
        try:
            # Its files written behind its start's begin (or as the turn's starts end):
            # watcher.py runs Starts.start_queued right after the claims, every turn.
            record = self.intake.take(path, behind=True)
        except ClaimFailed as exc:
            self._skip(path, str(exc))
            return
        if record is not None:
            claimed.append(record)

    def _skip(self, path: Path, why: str) -> None:
        if path not in self.skipped:
            self.skipped.add(path)
            log.error("skipping %s: %s", path, why)
