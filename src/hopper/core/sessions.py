"""Jobs of one session run one at a time, in claim order. Pure.

A session is one agent conversation; two of its jobs running at once would
resume the same conversation twice. The scheduler (core/schedule.py) asks
:func:`session_free` before starting a queued job.
"""

from __future__ import annotations

from collections.abc import Iterable


def busy_sessions(running: Iterable[str | None], earlier_queued: Iterable[str | None]) -> set[str]:
    """Sessions that have a running job, or a job queued ahead (in claim order)."""
    return {s for s in (*running, *earlier_queued) if s}


def session_free(session: str | None, busy: set[str]) -> bool:
    """May a queued job of ``session`` start now? Jobs without a session always may."""
    return session is None or session not in busy
