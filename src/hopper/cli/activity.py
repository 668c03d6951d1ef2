"""What a running agent is doing, for ``hopper status`` and ``hopper watch``.

The listings come from the status index, which keeps only a summary per job;
the live agent state is in job.json (the watcher folds the driver's
``agent.state.json`` into it with each heartbeat), so it is read for the
running jobs only: a handful, however long the history.
"""

from __future__ import annotations

from hopper.agents.sessionmap import paused_sessions
from hopper.core.record import JobRecord
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


def describe(record: JobRecord) -> str:
    """``working``, ``api_error:auth``, ``retrying:rate_limit`` …; ``-`` for no agent state."""
    state = record.agent_state
    if state is None:
        return "-"
    if state in ("api_error", "retrying") and record.error_kind:
        return f"{state}:{record.error_kind}"
    return state


def agent_activity(layout: Layout, job_id: str) -> str:
    try:
        return describe(read_record(layout.run_dir(job_id)))
    except (OSError, JobFileCorrupt):
        return "-"


def pause_lines(layout: Layout) -> list[str]:
    """One line per paused session: why its prompts wait, and how to go on."""
    return [
        f"session {name} paused: {why}"
        for name, why in paused_sessions(layout.root / "sessions").items()
    ]
