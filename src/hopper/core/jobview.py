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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hopper.core.states import JobState, Reason
from hopper.core.summary import JobSummary, UsageFigures, job_group, summarize

if TYPE_CHECKING:
    from hopper.core.record import JobRecord

_STATES = {s.value: s for s in JobState}
_REASONS = {r.value: r for r in Reason}
AGENT_STATES = frozenset(
    ("starting", "working", "waiting_for_input", "retrying", "api_error", "idle")
)
WORKSPACES = frozenset(("none", "folder", "worktree"))
EXECUTORS = frozenset(("local", "slurm", "container", "session"))
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
    "waiting": "str?",
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
    "max_cost_usd": "float?",
    "max_tokens": "int?",
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
    "tokens": "int?",
    "cost_known": "bool?",
    "cost_note": "str?",
    "model": "str?",
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
    session: str | None = None
    waiting: str | None = None  # a queued job hopper holds back: why (a budget reached)

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


def view_of(doc: object) -> JobView | None:
    """``doc`` (a parsed job.json) as a :class:`JobView`, or None if it is not in
    the exact shape hopper writes; then validate it with the model instead."""
    if not isinstance(doc, dict) or not doc.keys() >= REQUIRED:
        return None
    for key, value in doc.items():
        if value is None:
            if key in _NULLABLE:
                continue
            return None
        check = _CHECKS.get(key)
        if check is None or not check(value):
            return None
    usage = doc.get("usage")
    reason_text = doc.get("reason")
    reason = _REASONS[reason_text] if reason_text is not None else None
    try:
        summary = JobSummary(
            id=doc["id"],
            name=doc["name"],
            agent=doc["agent"],
            state=_STATES[doc["state"]],
            reason=reason.value if reason else None,
            group=job_group(doc.get("group"), doc["inbox_path"]),
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
    except (ValueError, OverflowError, OSError):  # not an instant: the model decides
        return None
    return JobView(
        summary=summary,
        detail=doc.get("detail"),
        processed_path=doc.get("processed_path"),
        agent_state=doc.get("agent_state"),
        error_kind=doc.get("error_kind"),
        reason=reason,
        session=doc.get("session"),
        waiting=doc.get("waiting"),
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
        session=record.session,
        waiting=record.waiting,
    )


def _epoch(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def _float(value: int | float | None) -> float | None:
    return None if value is None else float(value)


Check = Callable[[Any], bool]


def _int(v: Any) -> bool:
    return type(v) is int and -_INT_BOUND < v < _INT_BOUND


def _number(v: Any) -> bool:
    return _int(v) or (type(v) is float and v - v == 0.0)  # finite: no NaN, no inf


def _time_form(v: Any) -> bool:
    """The form only: view_of parses the summary's times itself (a bad date fails there)."""
    return type(v) is str and _TIME.fullmatch(v) is not None


def _time(v: Any) -> bool:
    if type(v) is not str or _TIME.fullmatch(v) is None:
        return False
    try:
        datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


def _one_of(values: Iterable[str]) -> Check:
    allowed = frozenset(values)
    return lambda v: type(v) is str and v in allowed


def _strlist(v: Any) -> bool:
    return type(v) is list and all(type(i) is str for i in v)


def _object(fields: dict[str, str], required: frozenset[str] = frozenset()) -> Check:
    """A nested model: known keys only (left-out ones take the model's defaults)."""
    checks = {k: _checker(kind) for k, kind in fields.items()}

    def check(v: Any) -> bool:
        if type(v) is not dict or not v.keys() >= required:
            return False
        for key, item in v.items():
            one = checks.get(key)
            if one is None or not one(item):
                return False
        return True

    return check


def _slurm(v: Any) -> bool:
    return type(v) is dict and all(type(i) is str or _int(i) for i in v.values())


_SIMPLE: dict[str, Check] = {
    "str": lambda v: type(v) is str,
    "int": _int,
    "float": _number,
    "bool": lambda v: type(v) is bool,
    "time": _time,
    "version": lambda v: type(v) is int and v == 1,
    "strlist": _strlist,
    "slurm": _slurm,
    "state": _one_of(_STATES),
    "reason": _one_of(_REASONS),
    "agent_state": _one_of(AGENT_STATES),
    "workspace": _one_of(WORKSPACES),
    "executor": _one_of(EXECUTORS),
}


def _checker(kind: str) -> Check:
    if kind.endswith("?"):
        inner = _checker(kind[:-1])
        return lambda v: v is None or inner(v)
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "usage":
        return _object(USAGE_FIELDS)
    if kind == "resources":
        return _object(RESOURCE_FIELDS)
    if kind == "container":
        return _object(CONTAINER_FIELDS, CONTAINER_REQUIRED)
    if kind == "hooks":
        return _object(dict.fromkeys(HOOK_FIELDS, "strlist?"))
    raise AssertionError(kind)  # pragma: no cover - FIELDS names only the kinds above


# Built once: one call per field of a record, None skipped where the model allows it.
_CHECKS: dict[str, Check] = {k: _checker(kind) for k, kind in FIELDS.items()}
_CHECKS["created_at"] = _time_form
for _key in ("started_at", "finished_at", "heartbeat_at"):
    _CHECKS[_key] = _time_form  # None is let through before the check
_NULLABLE = frozenset(k for k, kind in FIELDS.items() if kind.endswith("?"))
