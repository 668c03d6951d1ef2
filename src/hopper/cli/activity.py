"""What a running agent is doing, for ``hopper status`` and ``hopper watch``.

The listings come from the status index, which keeps only a summary per job;
the live agent state is in job.json (the watcher folds the driver's
``agent.state.json`` into it with each heartbeat), so it is read for the
running jobs only: a handful, however long the history.
"""

from __future__ import annotations

from typing import Protocol

from hopper.agents.sessionmap import paused_sessions
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


def pause_lines(layout: Layout) -> list[str]:
    """One line per paused session: why its prompts wait, and how to go on."""
    return [
        f"session {name} paused: {why}"
        for name, why in paused_sessions(layout.root / "sessions").items()
    ]
