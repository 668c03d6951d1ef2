"""The read path's job.json check (core/jobview.py) agrees with the model on every record.

Either road may read a record, so the two must give the same answer: the
stdlib check accepts only what the model accepts, reads it as the same
values, and hands anything else to the model, whose error message is kept.
"""

from __future__ import annotations

import json
import os
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hopper.core.jobview import (
    CONTAINER_FIELDS,
    CONTAINER_REQUIRED,
    FIELDS,
    HOOK_FIELDS,
    REQUIRED,
    RESOURCE_FIELDS,
    USAGE_FIELDS,
    view_of,
    view_of_record,
)
from hopper.core.record import ContainerJob, JobHooks, JobRecord, Resources, Usage
from hopper.core.states import JobState, Reason
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import read_record, write_record
from hopper.store.jobread import parse_view, read_view

T0 = datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)


def _kind(annotation: Any) -> str:
    """The FIELDS kind a model annotation calls for."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and type(None) in args:
            return _kind(inner[0]) + "?"
    if typing.get_origin(annotation) is typing.Literal:
        values = set(args)
        named = {
            frozenset({1}): "version",
            frozenset({"none", "folder", "worktree"}): "workspace",
            frozenset({"local", "slurm", "container", "session"}): "executor",
            frozenset(
                {"starting", "working", "waiting_for_input", "retrying", "api_error", "idle"}
            ): "agent_state",
        }
        return named[frozenset(values)]
    simple = {
        str: "str",
        int: "int",
        float: "float",
        bool: "bool",
        datetime: "time",
        JobState: "state",
        Reason: "reason",
        Usage: "usage",
        Resources: "resources",
        JobHooks: "hooks",
        ContainerJob: "container",
        list[str]: "strlist",
        dict[str, int | str]: "slurm",
    }
    return simple[annotation]


def test_the_field_table_is_the_models() -> None:
    assert list(FIELDS) == list(JobRecord.model_fields)
    assert {k: _kind(f.annotation) for k, f in JobRecord.model_fields.items()} == FIELDS
    assert {k: _kind(f.annotation) for k, f in Usage.model_fields.items()} == USAGE_FIELDS
    assert {k: _kind(f.annotation) for k, f in Resources.model_fields.items()} == RESOURCE_FIELDS
    assert tuple(JobHooks.model_fields) == HOOK_FIELDS
    assert {k: _kind(f.annotation) for k, f in ContainerJob.model_fields.items()} == (
        CONTAINER_FIELDS
    )
    assert {k for k, f in JobRecord.model_fields.items() if f.is_required()} == REQUIRED
    required = {k for k, f in ContainerJob.model_fields.items() if f.is_required()}
    assert required == CONTAINER_REQUIRED
    for model in (Usage, Resources, JobHooks):  # nested: every field may be left out
        assert not [k for k, f in model.model_fields.items() if f.is_required()]


def record(**update: Any) -> JobRecord:
    base = JobRecord(
        id="20261122-120000-000-a-0001",
        name="a",
        state=JobState.SUCCEEDED,
        reason=Reason.COMPLETED,
        agent="claude",
        host="h",
        inbox_path="inbox/team/a.prompt.md",
        created_at=T0,
        started_at=T0 + timedelta(seconds=1),
        finished_at=T0 + timedelta(seconds=5),
        duration_seconds=4,
    )
    return base.model_copy(update=update)


RECORDS = [
    record(),
    record(state=JobState.RUNNING, reason=None, finished_at=None, agent_state="retrying"),
    record(error_kind="rate_limit", agent_state="api_error", detail="né 中 \x01"),
    record(usage=Usage(input_tokens=5, cost_usd=0.25), turns=3, priority=-2),
    record(resources=Resources(cpu_seconds=1.5, peak_rss_bytes=10, rss_bytes=3)),
    record(hooks=JobHooks(on_success=["a", "b"]), after=["x"], permission_denials=["Bash"]),
    record(slurm_resources={"cpus": 2, "mem": "4G"}, executor="slurm", workspace="worktree"),
    record(executor="container", container=ContainerJob(name="hopper-x", image="debian:12")),
    record(created_at=datetime(2026, 1, 2, 3, 4, 5)),  # naive: local time on both roads
    record(created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5)))),
    record(name="\U0001f600 emoji", not_before=T0, last_activity_at=T0, session_paused=True),
]


@pytest.mark.parametrize("rec", RECORDS, ids=range(len(RECORDS)))
def test_what_hopper_writes_reads_the_same_on_both_roads(rec: JobRecord) -> None:
    data = rec.model_dump_json(indent=2).encode() + b"\n"
    fast = parse_view(data)
    assert fast is not None, "hopper's own shape must take the fast road"
    assert fast == view_of_record(JobRecord.model_validate_json(data))


def test_left_out_fields_take_the_models_defaults_on_the_fast_road() -> None:
    full = json.loads(record(attempt=4, detail="x", agent_state="idle").model_dump_json())
    minimal = {k: v for k, v in full.items() if k in REQUIRED}
    data = json.dumps(minimal).encode()  # an older hopper's job.json: fewer fields
    fast = parse_view(data)
    assert fast is not None
    assert fast == view_of_record(JobRecord.model_validate_json(data))
    assert fast.summary.attempt == 1 and fast.detail is None


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(record().model_dump_json())
    for key, value in changes.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    return doc


ODD: list[bytes] = [
    json.dumps(_doc(usage=KeyError)).encode(),  # a field left out: the model's default
    json.dumps(_doc(extra=1)).encode(),  # unknown field: the model refuses it
    json.dumps(_doc(host=KeyError)).encode(),  # a required field missing: refused
    json.dumps(_doc(attempt="2")).encode(),  # lax int from a string: the model takes it
    json.dumps(_doc(attempt=True)).encode(),
    json.dumps(_doc(attempt=2.0)).encode(),
    json.dumps(_doc(duration_seconds=float("nan"))).encode(),
    json.dumps(_doc(created_at=1763812800)).encode(),  # epoch seconds: the model takes it
    json.dumps(_doc(created_at="2026-11-22 12:00:00")).encode(),
    json.dumps(_doc(created_at="2026-11-22T12:00:60Z")).encode(),
    json.dumps(_doc(state="lost")).encode(),
    json.dumps(_doc(schema_version=2)).encode(),
    json.dumps(_doc(usage={"input_tokens": 1, "foo": 2})).encode(),
    json.dumps(_doc(resources={"cpu_seconds": None})).encode(),
    json.dumps(_doc(hooks={"on_success": "x"})).encode(),
    json.dumps(_doc(slurm_resources={"cpus": 1.5})).encode(),
    json.dumps(_doc(container={"name": "x"})).encode(),  # image missing: refused
    json.dumps(_doc(container={"name": "x", "image": "i", "cpus": "2"})).encode(),
    json.dumps(_doc(exit_code=1 << 70)).encode(),
    json.dumps(_doc(name="\ud800")).encode(),  # a lone surrogate escape
    json.dumps(_doc(name="x\udc80y"), ensure_ascii=True).encode(),
    b"\xef\xbb\xbf" + json.dumps(_doc()).encode(),  # a byte-order mark
    json.dumps(_doc()).encode("utf-16"),
    json.dumps(_doc(name="caf\xe9")).encode().replace(b"caf\\u00e9", b"caf\xe9"),  # Latin-1
    json.dumps(_doc(), indent=2).encode()[:-30],  # cut short
    b"[" * 100_000,
    b"",
    json.dumps(_doc(name="b")).encode()[:-1] + b', "name": "c"}',  # a key given twice
    json.dumps([_doc()]).encode(),
]


@pytest.mark.parametrize("data", ODD, ids=range(len(ODD)))
def test_an_odd_record_gets_the_models_answer(data: bytes, tmp_path: Path) -> None:
    try:
        model: JobRecord | None = JobRecord.model_validate_json(data)
    except Exception:
        model = None
    fast = parse_view(data)
    if fast is not None:
        assert model is not None and fast == view_of_record(model)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "job.json").write_bytes(data)
    try:
        expected: object = view_of_record(read_record(run_dir))
    except JobFileCorrupt as exc:
        expected = str(exc)
    try:
        got: object = read_view(run_dir)
    except JobFileCorrupt as exc:
        got = str(exc)
    assert repr(got) == repr(expected)  # repr: a NaN duration equals itself


def test_the_view_of_a_missing_or_special_job_json_fails_as_the_record_does(
    tmp_path: Path,
) -> None:
    with pytest.raises(FileNotFoundError):
        read_view(tmp_path)
    os.mkfifo(tmp_path / "job.json")
    with pytest.raises(JobFileCorrupt) as fifo:
        read_view(tmp_path)
    with pytest.raises(JobFileCorrupt) as old:
        read_record(tmp_path)
    assert str(fifo.value) == str(old.value) and "FIFO" in str(fifo.value)


def test_view_of_refuses_what_is_not_an_object() -> None:
    assert view_of([]) is None and view_of("x") is None and view_of({}) is None


def test_a_written_record_reads_back_through_the_fast_road(tmp_path: Path) -> None:
    rec = record(agent_state="working")
    write_record(tmp_path, rec, durable=False)
    assert read_view(tmp_path) == view_of_record(rec)
