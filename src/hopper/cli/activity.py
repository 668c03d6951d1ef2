"""What a running agent is doing, for ``hopper status`` and ``hopper watch``.

The listings come from the status index, which keeps only a summary per job;
the live agent state is in job.json (the watcher folds the driver's
``agent.state.json`` into it with each heartbeat), so it is read for the
running jobs only: a handful, however long the history.
"""

from __future__ import annotations

from typing import Protocol

from hopper.agents.sessionmap import paused_sessions
from hopper.core.sessions import turn_wait
from hopper.errors import JobFileCorrupt
from hopper.store.jobread import read_view
from hopper.store.layout import Layout


class Activity(Protocol):
    """A JobRecord, or the read path's JobView."""

    @property
    def agent_state(self) -> str | None: ...
    @property
    def error_kind(self) -> str | None: ...


def describe(record: Activity) -> str:
    """``working``, ``api_error:auth``, ``retrying:rate_limit`` …; ``-`` for no agent state."""
    state = record.agent_state
    if state is None:
        return "-"
    if state in ("api_error", "retrying") and record.error_kind:
        return f"{state}:{record.error_kind}"
    return state


def agent_activity(layout: Layout, job_id: str) -> str:
    try:
        return describe(read_view(layout.run_dir(job_id)))
    except (OSError, JobFileCorrupt):
        return "-"


QUEUED_LOOKS = 200  # queued rows whose session is looked up (one job.json read each)


def queued_activity(layout: Layout, job_ids: list[str], running: list[str]) -> dict[str, str]:
    """Queued jobs of a session that wait for an earlier job of it (one running, or
    queued before them: the scheduler's rule) -> ``waiting for session X's turn``;
    jobs a budget holds -> their ``waiting`` (``waiting: group app spent …``).
    Only for the first :data:`QUEUED_LOOKS` queued rows (a flood stays quick)."""
    out: dict[str, str] = {}
    sessions: dict[str, str] = {}
    held: dict[str, str] = {}
    for job_id in sorted(job_ids)[:QUEUED_LOOKS]:
        try:
            view = read_view(layout.run_dir(job_id))
        except (OSError, JobFileCorrupt):
            continue
        if view.waiting:  # held by a budget: job.json says why (docs/budgets.md)
            held[job_id] = view.waiting
        if view.session:
            sessions[job_id] = view.session
    busy = {s for s in sessions.values() if _session_busy(layout, s)}
    if sessions:
        busy |= {s for s in map(lambda j: _session_of(layout, j), running) if s}
    for job_id in sorted(sessions):
        name = sessions[job_id]
        if name in busy:
            out[job_id] = turn_wait(name)
        busy.add(name)  # the later ones wait behind this one
    out.update(held)
    return out


def _session_of(layout: Layout, job_id: str) -> str | None:
    try:
        return read_view(layout.run_dir(job_id)).session
    except (OSError, JobFileCorrupt):
        return None


def _session_busy(layout: Layout, name: str) -> bool:
    """A job of the session runs: its live host has a message in progress."""
    from hopper.sessionhost.contract import read_session

    state = read_session(layout.root / "sessions" / name)
    return state is not None and state.job is not None and state.live


def pause_lines(layout: Layout) -> list[str]:
    """One line per paused session: why its prompts wait, and how to go on."""
    return [
        f"session {name} paused: {why}"
        for name, why in paused_sessions(layout.root / "sessions").items()
    ]
