"""Retry policy: which endings are worth another attempt, and when. Pure.

A job retries when it failed on its own (non-zero exit, a signal, a timeout,
or lost in a crash) and attempts remain. Nothing a person asked for is
retried (abort, shutdown), nor input that will fail the same way again
(bad prompt, unknown agent, spawn failure).
"""

from __future__ import annotations

from hopper.core.states import Reason

RETRYABLE = frozenset({Reason.EXIT_NONZERO, Reason.SIGNALED, Reason.TIMEOUT, Reason.LOST})
MAX_BACKOFF = 3600.0


def should_retry(reason: Reason, attempt: int, retries: int) -> bool:
    """``attempt`` is the 1-based attempt that just ended; ``retries`` the extra tries allowed."""
    return reason in RETRYABLE and attempt <= retries


def backoff(attempt: int, base: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: base, 2×base, 4×base … capped."""
    return min(MAX_BACKOFF, base * float(2 ** max(0, attempt - 1)))
