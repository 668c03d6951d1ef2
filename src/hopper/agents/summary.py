"""The driver's ``agent.json`` -> the job record's agent fields."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hopper.agents.drive import SUMMARY_FILE
from hopper.core.record import Usage

log = logging.getLogger(__name__)


def read_agent_summary(run_dir: Path) -> dict[str, Any] | None:
    """What the agent driver recorded, or None (not an agent job, or it never got there)."""
    try:
        data = json.loads((run_dir / SUMMARY_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable agent summary: %s", run_dir / SUMMARY_FILE, exc)
        return None
    return data if isinstance(data, dict) else None


def record_fields(agent: dict[str, Any]) -> dict[str, Any]:
    """The JobRecord fields (session_id, usage, turns …) from an agent summary."""
    raw = agent.get("usage") or {}
    usage = Usage(
        **{k: raw.get(k) for k in Usage.model_fields if isinstance(raw.get(k), int | float)}
    )
    denials = agent.get("permission_denials") or []
    return {
        "session_id": agent.get("session_id"),
        "result_path": agent.get("result_path"),
        "usage": usage if usage.model_dump(exclude_none=True) else None,
        "turns": agent.get("turns"),
        "error_kind": agent.get("error_kind"),
        "permission_denials": [str(d) for d in denials],
        "nudges": agent.get("nudges"),
    }
