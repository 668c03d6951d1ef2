"""The webhook's schedule: each delivery its own next-attempt time, a few threads to send.

:class:`Deliveries` holds deliveries (webhook.py) in one heap ordered by when
each is next due. ``SENDERS`` threads take whatever is due, POST it, record
the attempt in the job's events.jsonl and, on a failure worth retrying, put it
back with its own backoff. A delivery waiting for a retry holds no thread, so
one receiver that is down delays another job's first attempt by at most the
attempts in flight (each bounded by ``timeout``). At most ``MAX_PENDING``
deliveries wait at once; past that a new one is dropped, and says so.

On :meth:`Deliveries.close` (the watcher stopping) what is due or in flight
is sent, retries that come due within the budget are made, and what is left
is recorded as ``webhook_failed`` with ``final``: a delivery is never replayed
by the next watcher (at most once, like the command hooks).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from hopper.clock import Clock
from hopper.store import ledger
from hopper.webhook import Attempt, Delivery, backoff, post, public_url

log = logging.getLogger(__name__)

SENDERS = 2
MAX_PENDING = 256

Poster = Callable[[Delivery, int], Attempt]


class Deliveries:
    """Webhook deliveries waiting or in flight, and the threads that send them."""

    def __init__(
        self,
        clock: Clock,
        *,
        senders: int = SENDERS,
        max_pending: int = MAX_PENDING,
        poster: Poster = post,
    ) -> None:
        self.clock = clock
        self.senders = senders
        self.max_pending = max_pending
        self._post = poster
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Delivery, int]] = []  # due (monotonic), seq, …, attempt
        self._seq = itertools.count()
        self._inflight = 0
        self._stopped = False
        self._threads: list[threading.Thread] = []

    def send(self, delivery: Delivery) -> None:
        """Queue ``delivery``'s first attempt, due now. Never blocks on the network."""
        with self._cond:
            full = len(self._heap) + self._inflight >= self.max_pending
            if not full and not self._stopped:
                heapq.heappush(self._heap, (time.monotonic(), next(self._seq), delivery, 1))
                self._start()
                self._cond.notify()
                return
        why = (
            f"not sent: {self.max_pending} deliveries already waiting (is the receiver down?)"
            if full
            else "not sent: the watcher is stopping"
        )
        self._note(delivery, "webhook_failed", attempt=1, status=None, detail=why, final=True)

    def pending(self) -> int:
        """Deliveries waiting (for their first attempt or a retry) or in flight."""
        with self._cond:
            return len(self._heap) + self._inflight

    def close(self, budget: float) -> None:
        """Send what comes due within ``budget`` seconds, record the rest as given up, stop."""
        deadline = time.monotonic() + budget
        with self._cond:
            while self._heap or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0 or (not self._inflight and self._heap[0][0] > deadline):
                    break
                self._cond.wait(left)
            self._stopped = True
            left_over = [(d, n) for _, _, d, n in self._heap]
            self._heap.clear()
            self._cond.notify_all()
        for delivery, attempt in left_over:
            self._note(
                delivery,
                "webhook_failed",
                attempt=attempt,
                status=None,
                detail="not attempted: the watcher stopped first (never replayed)",
                final=True,
            )
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()) + 1.0)

    def _start(self) -> None:
        while len(self._threads) < self.senders:
            thread = threading.Thread(
                target=self._work, name=f"hopper-webhook-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    if wait is not None and wait <= 0:
                        _, _, delivery, attempt = heapq.heappop(self._heap)
                        self._inflight += 1
                        break
                    self._cond.wait(wait)
            try:
                retry_in = self._attempt(delivery, attempt)
            except Exception:  # a sender must never die: the schedule would stall
                log.exception("job=%s webhook attempt %d failed oddly", delivery.job_id, attempt)
                retry_in = None
            with self._cond:
                self._inflight -= 1
                if retry_in is not None and not self._stopped:
                    due = time.monotonic() + retry_in
                    heapq.heappush(self._heap, (due, next(self._seq), delivery, attempt + 1))
                self._cond.notify_all()

    def _attempt(self, delivery: Delivery, attempt: int) -> float | None:
        """One POST, recorded; the seconds until the next attempt, or None for none."""
        result = self._post(delivery, attempt)
        if result.ok:
            self._note(delivery, "webhook_delivered", attempt=attempt, status=result.status)
            return None
        last = not result.retry or attempt >= delivery.options.attempts
        retry_in = None if last else backoff(delivery.options, attempt)
        more = {"final": True} if retry_in is None else {"retry_in": retry_in}
        self._note(
            delivery,
            "webhook_failed",
            attempt=attempt,
            status=result.status,
            detail=result.detail,
            **more,
        )
        return retry_in

    def _note(self, delivery: Delivery, event: str, **fields: object) -> None:
        url = public_url(delivery.url)
        try:
            ledger.note(
                delivery.run_dir, event, self.clock.now(), url=url, delivery=delivery.id, **fields
            )
        except OSError as exc:
            log.error("job=%s %s: cannot record it: %s", delivery.job_id, event, exc)
        if event == "webhook_failed":
            log.warning(
                "job=%s webhook %s attempt %s failed: %s%s",
                delivery.job_id,
                url,
                fields.get("attempt"),
                fields.get("detail"),
                "" if fields.get("final") else f"; again in {fields.get('retry_in'):g}s",
            )
