"""``hopper status`` over the derived index: filters, staleness, rebuild, exact --json."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime, timedelta

from hopper.core.record import JobRecord
from hopper.core.selection import JobFilter
from hopper.core.states import JobState, Reason
from hopper.core.summary import group_of, summarize
from hopper.store.index import INDEX_FILE, JobIndex
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def make(
    layout: Layout,
    name: str,
    state: JobState = JobState.SUCCEEDED,
    *,
    agent: str = "bash",
    group: str = "",
    age: timedelta = timedelta(hours=1),
) -> JobRecord:
    created = NOW - age
    terminal = state not in (JobState.QUEUED, JobState.RUNNING)
    record = JobRecord(
        id=f"{created:%Y%m%d-%H%M%S}-000-{name}-0001",
        name=name,
        state=state,
        reason=Reason.COMPLETED if state is JobState.SUCCEEDED else None,
        agent=agent,
        host="h",
        inbox_path="/".join(p for p in ("inbox", group, f"{name}.prompt.md") if p),
        created_at=created,
        started_at=created,
        finished_at=created + timedelta(seconds=3) if terminal else None,
        duration_seconds=3.0 if terminal else None,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, record, durable=False)
    return record


def names(out: str) -> list[str]:
    return sorted(r["name"] for r in json.loads(out))


def test_group_is_first_folder_under_inbox() -> None:
    assert group_of("inbox/team/a/x.prompt.md") == "team"
    assert group_of("inbox/x.prompt.md") == ""


def test_filter_since_keeps_active_and_recent(layout: Layout) -> None:
    old = summarize(make(layout, "old", age=timedelta(days=3)))
    new = summarize(make(layout, "new", age=timedelta(hours=2)))
    stuck = summarize(make(layout, "stuck", JobState.RUNNING, age=timedelta(days=3)))
    since = JobFilter(since=(NOW - timedelta(hours=12)).timestamp())
    assert [since.matches(j) for j in (old, new, stuck)] == [False, True, True]
    assert JobFilter(names=("ne*",)).matches(new) and not JobFilter(names=("ne*",)).matches(old)


def test_filters_and_exact_json(layout: Layout, hopper) -> None:
    make(layout, "nightly-a", agent="bash", group="nightly")
    make(layout, "nightly-b", JobState.FAILED, agent="claude", group="nightly")
    make(layout, "adhoc", agent="claude", age=timedelta(days=30))
    out = hopper("status", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    for rec in listed:
        on_disk = json.loads((layout.run_dir(rec["id"]) / "job.json").read_text())
        assert rec == on_disk
    assert names(hopper("status", "--json", "--group", "nightly").stdout) == [
        "nightly-a",
        "nightly-b",
    ]
    assert names(hopper("status", "--json", "--agent", "claude").stdout) == ["adhoc", "nightly-b"]
    assert names(hopper("status", "--json", "--state", "failed").stdout) == ["nightly-b"]
    assert names(hopper("status", "--json", "nightly-*").stdout) == ["nightly-a", "nightly-b"]
    assert names(hopper("status", "--json", "--name", "ad*").stdout) == ["adhoc"]
    # `adhoc` is 30 days old in this fake world; anything within 10 years keeps everything
    assert len(json.loads(hopper("status", "--json", "--since", "3650d").stdout)) == 3
    assert json.loads(hopper("status", "--json", "--since", "1s").stdout) == []
    table = hopper("status").stdout
    assert "nightly-b" in table and "ATTEMPT" in table.splitlines()[0]


def test_usage_errors_and_missing(layout: Layout, hopper) -> None:
    make(layout, "one")
    bad = hopper("status", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr
    missing = hopper("status", "no-such-job")
    assert missing.returncode == 1 and "no-such-job" in missing.stderr


def test_index_sees_a_change_behind_its_back(layout: Layout) -> None:
    record = make(layout, "flip", JobState.RUNNING)
    with JobIndex.open(layout) as index:
        assert index.refresh().read == 1
        assert index.jobs()[0].state is JobState.RUNNING
        assert index.refresh().read == 0  # nothing changed: nothing re-read
    # Same size, same mtime would be a coincidence; the atomic replace also changes the inode.
    done = record.model_copy(update={"state": JobState.FAILED, "reason": Reason.LOST})
    write_record(layout.run_dir(record.id), done, durable=False)
    with JobIndex.open(layout) as index:
        result = index.refresh()
        assert (result.read, result.listed) == (1, 1)
        assert index.jobs()[0].state is JobState.FAILED


def test_index_drops_removed_and_adds_new(layout: Layout) -> None:
    a = make(layout, "a")
    with JobIndex.open(layout) as index:
        index.refresh()
    for f in layout.run_dir(a.id).iterdir():
        f.unlink()
    layout.run_dir(a.id).rmdir()
    make(layout, "b")
    with JobIndex.open(layout) as index:
        result = index.refresh()
        assert (result.read, result.removed) == (1, 1)
        assert [j.name for j in index.jobs()] == ["b"]


def test_index_rebuilt_when_deleted_or_corrupt(layout: Layout, hopper) -> None:
    make(layout, "x")
    make(layout, "y", JobState.FAILED)
    assert names(hopper("status", "--json").stdout) == ["x", "y"]
    path = layout.state_dir / INDEX_FILE
    assert path.exists()
    path.unlink()
    assert names(hopper("status", "--json").stdout) == ["x", "y"]
    path.write_bytes(b"this is not a database" * 100)
    out = hopper("status", "--json")
    assert out.returncode == 0, out.stderr
    assert names(out.stdout) == ["x", "y"]
    assert sqlite3.connect(path).execute("SELECT count(*) FROM jobs").fetchone() == (2,)


def test_index_with_a_damaged_table_is_rebuilt(layout: Layout) -> None:
    make(layout, "x")
    with JobIndex.open(layout) as index:
        index.refresh()
        index.conn.execute("DROP TABLE jobs")  # same version, schema gone
        index.conn.commit()
    with JobIndex.open(layout) as index:
        index.refresh()
        assert [j.name for j in index.jobs()] == ["x"]


def test_corrupt_job_json_is_named_and_skipped(layout: Layout, hopper) -> None:
    make(layout, "good")
    broken = layout.runs / "20261122-000000-000-broken-0001"
    broken.mkdir()
    (broken / "job.json").write_text("{not json")
    out = hopper("status", "--json")
    assert out.returncode == 0
    assert names(out.stdout) == ["good"]
    assert "broken" in out.stderr and "job.json" in out.stderr


def test_read_only_root_uses_memory(layout: Layout) -> None:
    make(layout, "ro")
    os.chmod(layout.state_dir, 0o500)
    try:
        with JobIndex.open(layout) as index:
            index.refresh()
            assert [j.name for j in index.jobs()] == ["ro"]
    finally:
        os.chmod(layout.state_dir, 0o700)


def test_group_of_reads_paths_as_pure_posix_path_does() -> None:
    from pathlib import PurePosixPath

    for path in (
        "inbox/team/a/x.prompt.md",
        "inbox//team/./x.prompt.md",
        "./inbox/team/x.prompt.md",
        "inbox/x.prompt.md",
        "inbox/../x/y.prompt.md",
        "team/x.prompt.md",
        "x.prompt.md",
        "inbox/team/",
        "",
        ".",
        "/inbox/team/x",
        "//inbox/team/x",
    ):
        parts = PurePosixPath(path).parts
        if parts[:1] == ("inbox",):
            parts = parts[1:]
        assert group_of(path) == (parts[0] if len(parts) > 1 else ""), path
