"""job.json as the read commands see it, checked without pydantic.

Theory of operation: ``hopper status``, ``events`` and ``logs`` start a fresh
interpreter each time, and importing pydantic and building :class:`JobRecord`
costs ten times the rest of the command. So they read job.json with the
standard library, through :func:`view_of`: it accepts only a record in the
shape hopper writes (``JobRecord.model_dump_json``: the model's fields and no
other, the required ones present, each value of its exact JSON type,
datetimes in the one ISO form pydantic emits, no surrogate escapes, no NaN)
and returns
``None`` for anything else. A ``None`` sends the caller down the old road
(validate with the model), so any record the fast check cannot vouch for
gets exactly today's treatment, error messages included.

The check is conservative by construction: every value it accepts, the
model accepts too and reads as the same value. ``tests/test_jobview.py``
checks the field table against ``JobRecord.model_fields`` (a field added to
the model without a line here fails it) and compares both roads on odd
records.

Pure: a parsed JSON value in, a :class:`JobView` or ``None`` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hopper.core.states import JobState, Reason
from hopper.core.summary import JobSummary, UsageFigures, group_of, summarize

if TYPE_CHECKING:
    from hopper.core.record import JobRecord

_STATES = {s.value: s for s in JobState}
_REASONS = {r.value: r for r in Reason}
AGENT_STATES = frozenset(
    ("starting", "working", "waiting_for_input", "retrying", "api_error", "idle")
)
WORKSPACES = frozenset(("none", "folder", "worktree"))
EXECUTORS = frozenset(("local", "slurm", "container"))
_INT_BOUND = 1 << 63
# What pydantic writes for a datetime; fromisoformat reads it to the same instant.
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)?")

# Each JobRecord field and the JSON shape hopper writes for it, in model order.
# "?" = may be null. Checked against JobRecord.model_fields by tests/test_jobview.py.
FIELDS: dict[str, str] = {
    "schema_version": "version",
    "id": "str",
    "name": "str",
    "state": "state",
    "reason": "reason?",
    "detail": "str?",
    "exit_code": "int?",
    "signal": "int?",
    "agent": "str",
    "attempt": "int",
    "retries": "int",
    "not_before": "time?",
    "pid": "int?",
    "pid_start_time": "float?",
    "supervisor_pid": "int?",
    "supervisor_start_time": "float?",
    "host": "str",
    "owner": "str?",
    "inbox_path": "str",
    "processed_path": "str?",
    "workdir": "str?",
    "timeout_seconds": "float?",
    "memory_max_bytes": "int?",
    "output_max_bytes": "int?",
    "stop_requested": "reason?",
    "created_at": "time",
    "started_at": "time?",
    "finished_at": "time?",
    "heartbeat_at": "time?",
    "duration_seconds": "float?",
    "session": "str?",
    "session_id": "str?",
    "result_path": "str?",
    "usage": "usage?",
    "resources": "resources?",
    "turns": "int?",
    "error_kind": "str?",
    "agent_state": "agent_state?",
    "agent_detail": "str?",
    "last_activity_at": "time?",
    "session_paused": "bool",
    "permission_denials": "strlist",
    "nudges": "int?",
    "priority": "int",
    "group": "str?",
    "after": "strlist",
    "workspace": "workspace",
    "repo": "str?",
    "ref": "str?",
    "branch": "str?",
    "workspace_path": "str?",
    "executor": "executor",
    "slurm_job_id": "str?",
    "slurm_resources": "slurm",
    "container": "container?",
    "hooks": "hooks?",
    "retry_of": "str?",
}
# The fields without a default: a record without one of them is refused. A field
# left out takes the model's default (None; ``attempt``: 1), as pydantic reads it:
# job.json written by an older hopper, before a field was added, stays fast.
REQUIRED = frozenset(("id", "name", "state", "agent", "host", "inbox_path", "created_at"))
USAGE_FIELDS: dict[str, str] = {
    "input_tokens": "int?",
    "output_tokens": "int?",
    "cache_read_tokens": "int?",
    "cache_write_tokens": "int?",
    "cost_usd": "float?",
}
RESOURCE_FIELDS: dict[str, str] = {
    "cpu_seconds": "float",
    "peak_rss_bytes": "int",
    "output_bytes": "int",
    "rss_bytes": "int?",
    "processes": "int?",
}
CONTAINER_FIELDS: dict[str, str] = {
    "name": "str",
    "image": "str",
    "mounts": "strlist",
    "network": "str?",
    "cpus": "int?",
}
CONTAINER_REQUIRED = frozenset(("name", "image"))
HOOK_FIELDS = ("on_success", "on_failure", "on_finish")


@dataclass(frozen=True)
class JobView:
    """The fields of job.json the read commands use, as the model would read them."""

    summary: JobSummary
    detail: str | None
    processed_path: str | None
    agent_state: str | None
    error_kind: str | None
    reason: Reason | None

    @property
    def id(self) -> str:
        return self.summary.id

    @property
    def name(self) -> str:
        return self.summary.name

    @property
    def state(self) -> JobState:
        return self.summary.state

    @property
    def started_at(self) -> float | None:
        return self.summary.started_at


class NotCanonical(Exception):
    """The value is not in the shape hopper writes (internal: becomes ``None``)."""


def view_of(doc: object) -> JobView | None:
    """``doc`` (a parsed job.json) as a :class:`JobView`, or None if it is not in
    the exact shape hopper writes; then validate it with the model instead."""
    if not isinstance(doc, dict) or not doc.keys() >= REQUIRED:
        return None
    try:
        for key, value in doc.items():
            kind = FIELDS.get(key)
            if kind is None:
                return None
            _check(kind, value)
    except NotCanonical:
        return None
    usage = doc.get("usage")
    reason_text = doc.get("reason")
    reason = _REASONS[reason_text] if reason_text is not None else None
    summary = JobSummary(
        id=doc["id"],
        name=doc["name"],
        agent=doc["agent"],
        state=_STATES[doc["state"]],
        reason=reason.value if reason else None,
        group=group_of(doc["inbox_path"]),
        attempt=doc.get("attempt", 1),  # the model's default
        created_at=datetime.fromisoformat(doc["created_at"]).timestamp(),
        started_at=_epoch(doc.get("started_at")),
        finished_at=_epoch(doc.get("finished_at")),
        heartbeat_at=_epoch(doc.get("heartbeat_at")),
        duration_seconds=_float(doc.get("duration_seconds")),
        usage=None
        if usage is None
        else UsageFigures(
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cache_read_tokens=usage.get("cache_read_tokens"),
            cache_write_tokens=usage.get("cache_write_tokens"),
            cost_usd=_float(usage.get("cost_usd")),
        ),
    )
    return JobView(
        summary=summary,
        detail=doc.get("detail"),
        processed_path=doc.get("processed_path"),
        agent_state=doc.get("agent_state"),
        error_kind=doc.get("error_kind"),
        reason=reason,
    )


def view_of_record(record: JobRecord) -> JobView:
    """The same view of a record the model validated (the road for odd files)."""
    return JobView(
        summary=summarize(record),
        detail=record.detail,
        processed_path=record.processed_path,
        agent_state=record.agent_state,
        error_kind=record.error_kind,
        reason=record.reason,
    )


def _epoch(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def _float(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def _check(kind: str, value: Any) -> None:
    if kind.endswith("?"):
        if value is None:
            return
        kind = kind[:-1]
    if kind == "str":
        ok = type(value) is str
    elif kind == "int":
        ok = type(value) is int and -_INT_BOUND < value < _INT_BOUND
    elif kind == "float":
        ok = (type(value) is int and -_INT_BOUND < value < _INT_BOUND) or (
            type(value) is float and value - value == 0.0  # finite: no NaN, no inf
        )
    elif kind == "bool":
        ok = type(value) is bool
    elif kind == "time":
        ok = type(value) is str and _TIME.fullmatch(value) is not None and _parses(value)
    elif kind == "state":
        ok = type(value) is str and value in _STATES
    elif kind == "reason":
        ok = type(value) is str and value in _REASONS
    elif kind == "agent_state":
        ok = type(value) is str and value in AGENT_STATES
    elif kind == "workspace":
        ok = type(value) is str and value in WORKSPACES
    elif kind == "executor":
        ok = type(value) is str and value in EXECUTORS
    elif kind == "version":
        ok = type(value) is int and value == 1
    elif kind == "strlist":
        ok = type(value) is list and all(type(v) is str for v in value)
    elif kind == "slurm":
        ok = type(value) is dict and all(
            type(v) is str or (type(v) is int and -_INT_BOUND < v < _INT_BOUND)
            for v in value.values()
        )
    elif kind == "usage":
        ok = _check_object(value, USAGE_FIELDS)
    elif kind == "resources":
        ok = _check_object(value, RESOURCE_FIELDS)
    elif kind == "container":
        ok = _check_object(value, CONTAINER_FIELDS) and value.keys() >= CONTAINER_REQUIRED
    elif kind == "hooks":
        ok = type(value) is dict and all(k in HOOK_FIELDS for k in value)
        for v in value.values() if ok else ():
            _check("strlist?", v)
    else:  # pragma: no cover - FIELDS names only the kinds above
        raise AssertionError(kind)
    if not ok:
        raise NotCanonical(kind)


def _check_object(value: Any, fields: dict[str, str]) -> bool:
    """A nested model: known keys only (missing ones take the model's defaults)."""
    if type(value) is not dict:
        return False
    for key, item in value.items():
        kind = fields.get(key)
        if kind is None:
            return False
        _check(kind, item)
    return True


def _parses(text: str) -> bool:
    try:
        datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return False
    return True
