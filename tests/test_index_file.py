"""The status index is opened only if it is a regular file hopper made (issue 27).

Any job reaches ``.hopper/index.sqlite`` through ``$HOPPER_RUN_DIR/../..``. A link
(or a hard link) planted there must never lead ``hopper status``, ``doctor`` or
``web`` to open the file elsewhere, drop its tables or write rows into it; a
dangling link must not create its target. The planted name is moved aside with one
log line and the index rebuilt beside it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.index import INDEX_FILE, JobIndex
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout

Hopper = Callable[..., subprocess.CompletedProcess[str]]
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def make(layout: Layout, name: str) -> None:
    record = JobRecord(
        id=f"20261122-120000-000-{name}-0001",
        name=name,
        state=JobState.SUCCEEDED,
        reason=Reason.COMPLETED,
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=NOW,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)


def someone_elses_db(path: Path) -> bytes:
    """A database of another program with tables hopper's index also names."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE jobs (title TEXT)")
        conn.execute("CREATE TABLE meta (k TEXT, v TEXT)")
        conn.execute("INSERT INTO jobs VALUES ('my own row')")
        conn.execute("PRAGMA user_version = 42")
    conn.close()
    return path.read_bytes()


def run_status(layout: Layout, hopper: Hopper) -> str:
    out = hopper("status", "--json")
    assert out.returncode == 0, out.stderr
    assert sorted(j["name"] for j in json.loads(out.stdout)) == ["a", "b"]
    return out.stderr


def run_doctor(layout: Layout, hopper: Hopper) -> str:
    out = hopper("doctor", "--json")
    assert "Traceback" not in out.stderr
    return out.stderr


def run_web(layout: Layout, hopper: Hopper) -> str:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from hopper.web.app import create_app

    token = "t" * 43
    with TestClient(create_app(layout, token), base_url="http://127.0.0.1:8642") as client:
        r = client.get("/api/jobs", headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 200
        assert sorted(j["name"] for j in r.json()) == ["a", "b"]
    return ""


COMMANDS = {"status": run_status, "doctor": run_doctor, "web": run_web}


@pytest.fixture
def two_jobs(layout: Layout) -> Layout:
    make(layout, "a")
    make(layout, "b")
    return layout


def assert_rebuilt(layout: Layout) -> None:
    """A fresh regular index of hopper's own sits at the name, the planted one aside."""
    index = layout.state_dir / INDEX_FILE
    assert not index.is_symlink() and index.stat().st_nlink == 1
    conn = sqlite3.connect(index)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (2,)
    conn.close()
    aside = [p.name for p in layout.state_dir.iterdir() if ".displaced." in p.name]
    assert len(aside) == 1 and aside[0].startswith(f".{INDEX_FILE}.displaced.")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_symlinked_index_is_never_written_through(
    two_jobs: Layout, hopper, tmp_path: Path, command: str
) -> None:
    layout = two_jobs
    target = tmp_path / "places.sqlite"
    before = someone_elses_db(target)
    (layout.state_dir / INDEX_FILE).symlink_to(target)
    stderr = COMMANDS[command](layout, hopper)
    assert target.read_bytes() == before  # byte for byte: no table dropped, no row
    assert_rebuilt(layout)
    if command != "web":  # the web's log goes to its logger, not a subprocess's stderr
        lines = [line for line in stderr.splitlines() if INDEX_FILE in line]
        assert len(lines) == 1, stderr
        assert f"is a symbolic link (to {target})" in lines[0] and "moved aside" in lines[0]


def test_a_dangling_index_link_creates_nothing(two_jobs: Layout, hopper, tmp_path: Path) -> None:
    target = tmp_path / "nowhere" / "made.sqlite"
    target.parent.mkdir()
    (two_jobs.state_dir / INDEX_FILE).symlink_to(target)
    run_status(two_jobs, hopper)
    run_status(two_jobs, hopper)  # the second run uses the rebuilt index quietly
    assert not os.path.lexists(target)
    assert_rebuilt(two_jobs)


def test_a_hard_linked_index_is_moved_aside_untouched(
    two_jobs: Layout, hopper, tmp_path: Path
) -> None:
    """Same user, same filesystem: a hard link is a regular file, but not one hopper made."""
    target = tmp_path / "places.sqlite"
    before = someone_elses_db(target)
    os.link(target, two_jobs.state_dir / INDEX_FILE)
    stderr = run_status(two_jobs, hopper)
    assert target.read_bytes() == before
    assert "has 2 hard links" in stderr
    assert_rebuilt(two_jobs)


def test_a_symlinked_journal_is_never_written_through(
    two_jobs: Layout, hopper, tmp_path: Path
) -> None:
    target = tmp_path / "victim"
    target.write_bytes(b"keep me\n" * 100)
    run_status(two_jobs, hopper)  # a good index first
    (two_jobs.state_dir / f"{INDEX_FILE}-journal").symlink_to(target)
    make(two_jobs, "c")  # something to write
    out = hopper("status", "--json")
    assert out.returncode == 0
    assert target.read_bytes() == b"keep me\n" * 100


def test_a_linked_state_folder_keeps_the_index_in_memory(
    two_jobs: Layout, hopper, tmp_path: Path
) -> None:
    """``.hopper`` itself swapped for a link: nothing is made or written in its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for entry in two_jobs.state_dir.iterdir():
        entry.unlink()
    two_jobs.state_dir.rmdir()
    two_jobs.state_dir.symlink_to(outside)
    stderr = run_status(two_jobs, hopper)
    assert os.listdir(outside) == []
    assert "is a symbolic link" in stderr and "kept in memory" in stderr


def test_an_index_of_our_own_is_kept_and_reused(two_jobs: Layout) -> None:
    with JobIndex.open(two_jobs) as index:
        index.refresh()
    ino = (two_jobs.state_dir / INDEX_FILE).stat().st_ino
    with JobIndex.open(two_jobs) as index:
        assert index.refresh().read == 0  # warm: nothing re-read
        assert index.path == two_jobs.state_dir / INDEX_FILE
    assert (two_jobs.state_dir / INDEX_FILE).stat().st_ino == ino
    assert not [p for p in two_jobs.state_dir.iterdir() if ".displaced." in p.name]


def test_a_root_path_with_uri_characters_still_opens_its_file(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "a?b#c%d e")
    layout.ensure()
    make(layout, "a")
    with JobIndex.open(layout) as index:
        index.refresh()
        assert index.path == layout.state_dir / INDEX_FILE
        assert [j.name for j in index.jobs()] == ["a"]
    assert (layout.state_dir / INDEX_FILE).stat().st_size > 0
