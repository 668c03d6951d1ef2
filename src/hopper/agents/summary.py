"""The driver's ``agent.json`` -> the job record's agent fields.

agent.json lives in the run directory, which the job can write to; so it is
read like any untrusted file (store/saferead.py) and validated field by field.
A file that is not a regular file, too big, not JSON or of the wrong shape
is ignored: the job keeps the verdict its exit status gives, and an
``agent_summary_ignored`` event and a warning say why.
"""

from __future__ import annotations

import logging
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hopper.agents.drive import RESULT_FILE, SUMMARY_FILE
from hopper.agents.livestate import STATE_FILE
from hopper.core.record import AgentState, Usage
from hopper.store import ledger
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, parse_model, read_bytes

log = logging.getLogger(__name__)

Count = Annotated[int, Field(ge=0)]


class AgentUsage(BaseModel):
    """``usage`` as the driver writes it: token counts and a cost, all optional."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cache_read_tokens: Count | None = None
    cache_write_tokens: Count | None = None
    cost_usd: Annotated[float, Field(ge=0)] | None = None
    tokens: Count | None = None
    cost_known: bool | None = None
    cost_note: Annotated[str, Field(max_length=500)] | None = None
    model: Annotated[str, Field(max_length=200)] | None = None

    @field_validator("cost_usd")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class AgentSummary(BaseModel):
    """``runs/<id>/agent.json``, as ``hopper.agents.drive`` writes it."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    outcome: Annotated[str, Field(max_length=40)] | None = None
    detail: str | None = None
    error_kind: Annotated[str, Field(max_length=40)] | None = None
    session_id: Annotated[str, Field(max_length=200)] | None = None
    turns: Count | None = None
    usage: AgentUsage | None = None
    permission_denials: Annotated[list[str], Field(max_length=10_000)] = Field(default_factory=list)
    nudges: Count | None = None
    check_exit_code: int | None = None
    result_path: str | None = None
    agent_state: AgentState | None = None
    session_paused: Annotated[str, Field(max_length=200)] | None = None

    @field_validator("result_path")
    @classmethod
    def _result(cls, value: str | None) -> str | None:
        if value is not None and value != RESULT_FILE:
            raise ValueError(f"must be {RESULT_FILE!r}, the driver's only result file")
        return value


def read_agent_summary(run_dir: Path, now: datetime | None = None) -> dict[str, Any] | None:
    """What the agent driver recorded, validated; None if absent or ignored.

    An agent.json that cannot be trusted is ignored with a warning and, when
    ``now`` is given, an ``agent_summary_ignored`` event naming what is wrong.
    """
    path = run_dir / SUMMARY_FILE
    try:
        summary = parse_model(AgentSummary, read_bytes(path, SMALL_LIMIT), path)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.warning("%s ignored: %s", path, exc.message)
        if now is not None:
            try:
                ledger.note(run_dir, "agent_summary_ignored", now, detail=exc.message)
            except OSError as err:
                log.error("%s: cannot record that agent.json was ignored: %s", run_dir, err)
        return None
    return summary.model_dump()


def read_job_summary(run_dir: Path, now: datetime, *, driven: bool) -> dict[str, Any] | None:
    """The driver's agent.json for a job a driver ran; a bash job's is never read.

    A bash script can write any file into its run directory: an agent.json it
    left must not turn its exit 3 into a success. One it left is noted with an
    ``agent_summary_ignored`` event and otherwise not opened.
    """
    if driven:
        return read_agent_summary(run_dir, now)
    try:
        os.lstat(run_dir / SUMMARY_FILE)
    except OSError:
        return None
    why = "agent.json ignored: a bash job wrote it; only an agent's driver records one"
    log.warning("%s: %s", run_dir, why)
    try:
        ledger.note(run_dir, "agent_summary_ignored", now, detail=why)
    except OSError as err:
        log.error("%s: cannot record that agent.json was ignored: %s", run_dir, err)
    return None


def record_fields(agent: dict[str, Any]) -> dict[str, Any]:
    """The JobRecord fields (session_id, usage, turns …) from a validated agent summary."""
    raw = agent.get("usage") or {}
    usage = Usage(**{k: raw.get(k) for k in Usage.model_fields if raw.get(k) is not None})
    return {
        "session_id": agent.get("session_id"),
        "result_path": agent.get("result_path"),
        "usage": usage if usage.model_dump(exclude_none=True) else None,
        "turns": agent.get("turns"),
        "error_kind": agent.get("error_kind"),
        "permission_denials": list(agent.get("permission_denials") or []),
        "nudges": agent.get("nudges"),
        "agent_state": agent.get("agent_state"),
        "session_paused": bool(agent.get("session_paused")),
    }


class AgentLive(BaseModel):
    """``runs/<id>/agent.state.json``, as ``hopper.agents.livestate`` writes it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    agent_state: AgentState
    error_kind: Annotated[str, Field(max_length=40)] | None = None
    detail: Annotated[str, Field(max_length=2000)] | None = None
    last_activity_at: datetime | None = None


LIVE_LIMIT = 16 * 1024


def read_live_state(run_dir: Path) -> dict[str, Any]:
    """The JobRecord fields of the agent's live state; {} when there is none (or it is bad).

    Read on every heartbeat: a file that is missing, torn, too big or not what
    the driver writes is skipped silently (the next heartbeat tries again).
    """
    path = run_dir / STATE_FILE
    try:
        live = parse_model(AgentLive, read_bytes(path, LIVE_LIMIT), path)
    except (FileNotFoundError, UnreadableFile):
        return {}
    fields: dict[str, Any] = {
        "agent_state": live.agent_state,
        "agent_detail": live.detail,
        "last_activity_at": live.last_activity_at,
    }
    if live.agent_state in ("api_error", "retrying"):
        fields["error_kind"] = live.error_kind
    return fields
