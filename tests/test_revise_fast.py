"""core/lifecycle.revise builds records from the record's ``__dict__`` (issue 16: the
watcher's CPU per job); the record it writes must be byte for byte the one the old
build (``dict(record)``, then the strict validation) wrote, and it must refuse what
the old build refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hopper.core import lifecycle
from hopper.core.record import JobRecord, Resources, Usage
from hopper.core.states import JobState, Reason

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

times = st.none() | st.datetimes(timezones=st.just(UTC)) | st.text(max_size=5)
numbers = (
    st.none() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=3)
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "state": st.sampled_from(JobState) | st.sampled_from(["running", "nope"]),
    "reason": st.none() | st.sampled_from(Reason) | st.just("completed"),
    "detail": st.none() | st.text(max_size=20),
    "attempt": numbers,
    "pid": numbers,
    "pid_start_time": numbers,
    "exit_code": numbers,
    "owner": st.none() | st.text(max_size=10),
    "started_at": times,
    "heartbeat_at": times,
    "finished_at": times,
    "duration_seconds": numbers,
    "resources": st.none()
    | st.builds(
        Resources,
        cpu_seconds=st.floats(0, 1e6),
        peak_rss_bytes=st.integers(0, 2**40),
        rss_bytes=st.none() | st.integers(0, 2**40),
    )
    | st.just({"cpu_seconds": 1.0}),
    "usage": st.none() | st.builds(Usage, input_tokens=st.none() | st.integers(0, 10**9)),
    "permission_denials": st.lists(st.text(max_size=5), max_size=3)
    | st.tuples(st.text(max_size=3)),
    "slurm_resources": st.dictionaries(
        st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3
    ),
    "agent_state": st.none() | st.sampled_from(["working", "idle", "dancing"]),
    "session_paused": st.booleans() | st.just(1),
    "processed_path": st.none() | st.text(max_size=10) | st.integers(),
    "bogus": st.integers(),  # an unknown field: refused by both
}


@st.composite
def updates(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(sorted(FIELDS)), unique=True, max_size=6))
    return {key: draw(FIELDS[key]) for key in keys}


def base(state: JobState) -> JobRecord:
    return JobRecord(
        id="20261123-120000-000-job-0001",
        name="job",
        state=state,
        agent="bash",
        host="vm",
        inbox_path="inbox/job.prompt.md",
        created_at=NOW,
        resources=Resources(cpu_seconds=0.5),
        after=["a", "b"],
    )


def old_revise(record: JobRecord, **update: object) -> JobRecord:
    """The build before issue 16's change, kept here as the reference."""
    data: dict[str, Any] = dict(record)
    data.update(update)
    return JobRecord.model_validate(data, strict=True)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(JobState), updates(), updates())
def test_revise_writes_what_the_old_build_wrote(
    state: JobState, first: dict[str, Any], second: dict[str, Any]
) -> None:
    record = base(state)
    for update in (first, second):  # twice: a revised record revised again
        try:
            expected = old_revise(record, **update)
        except ValidationError as exc:
            try:
                lifecycle.revise(record, **update)
            except ValidationError as new:
                assert new.errors() == exc.errors()
            else:
                raise AssertionError(f"revise accepted what the old build refused: {update}")
            return
        got = lifecycle.revise(record, **update)
        assert got.model_dump_json(indent=2) == expected.model_dump_json(indent=2)
        assert got.model_fields_set == expected.model_fields_set
        assert got == expected
        record = got
