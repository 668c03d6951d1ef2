"""store/record_spares.py: a finished job's spare record file becomes the next job's
first record (a rename, not a new inode), never while anyone still reads it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop
from hopper.core.lifecycle import Step
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store import ledger, record_spares, standby
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.record_spares import SPARES_DIR, RecordSpares

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def record(job: str, state: JobState = JobState.QUEUED, **kw: object) -> JobRecord:
    return JobRecord(
        id=f"20261126-090000-000-{job}-0001",
        name=job,
        state=state,
        agent="bash",
        host="h1",
        inbox_path=f"inbox/{job}.prompt.md",
        created_at=NOW,
        **kw,
    )


def ended(job: str) -> JobRecord:
    return record(job, JobState.FAILED, reason=Reason.LOST, finished_at=NOW)


def commit(run: Path, rec: JobRecord) -> int:
    ledger.commit(run, Step(rec, ()))
    return (run / "job.json").stat().st_ino


@pytest.fixture
def spares(tmp_path: Path) -> Iterator[RecordSpares]:
    made = RecordSpares(tmp_path / "state", "h1", 42)
    before = ledger.use_spares(made)
    try:
        yield made
    finally:
        ledger.use_spares(before)
        made.close()


def run_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "runs" / name
    path.mkdir(parents=True)
    return path


def finished(tmp_path: Path, name: str) -> tuple[Path, set[int]]:
    """A job's three records (queued, running, ended); its run dir and both inodes."""
    run = run_dir(tmp_path, name)
    inodes = {commit(run, record(name)), commit(run, record(name, JobState.RUNNING))}
    commit(run, ended(name))
    return run, inodes


def test_a_finished_jobs_spare_is_the_next_jobs_first_record(
    tmp_path: Path, spares: RecordSpares
) -> None:
    old, inodes = finished(tmp_path, "a")
    assert not (old / standby.STANDBY).exists()  # a finished job keeps no standby
    assert read_record(old) == ended("a")
    assert len(spares) == 1
    new = run_dir(tmp_path, "b")
    assert commit(new, record("b")) in inodes  # no new file for the first record
    assert read_record(new) == record("b")  # padded to the old one's length, reads back equal
    assert len(spares) == 0
    assert os.listdir(spares.folder) == []


def test_without_spares_a_finished_jobs_standby_is_freed(tmp_path: Path) -> None:
    old, _ = finished(tmp_path, "a")
    assert not (old / standby.STANDBY).exists()
    assert read_record(old) == ended("a")
    assert not (tmp_path / "state").exists()


def test_a_spare_someone_still_reads_is_never_rewritten(
    tmp_path: Path, spares: RecordSpares
) -> None:
    finished(tmp_path, "a")
    (name,) = os.listdir(spares.folder)
    with open(spares.folder / name, "rb") as reader:  # the finished job's running record
        held = os.fstat(reader.fileno()).st_ino
        new = run_dir(tmp_path, "b")
        assert commit(new, record("b")) != held  # the lease was refused: a new file
        assert read_record(new) == record("b")
        assert b'"state": "running"' in reader.read()
    assert not (new / standby.STANDBY).exists()  # the refused spare was cleared away
    assert len(spares) == 0


def test_spares_beyond_the_limit_are_freed(
    tmp_path: Path, spares: RecordSpares, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_spares, "KEEP", 1)
    finished(tmp_path, "a")
    second, _ = finished(tmp_path, "b")
    assert len(spares) == 1 and len(os.listdir(spares.folder)) == 1
    assert not (second / standby.STANDBY).exists()


def test_a_spare_removed_by_hand_means_a_new_file(tmp_path: Path, spares: RecordSpares) -> None:
    finished(tmp_path, "a")
    for name in os.listdir(spares.folder):
        os.unlink(spares.folder / name)
    new = run_dir(tmp_path, "b")
    commit(new, record("b"))
    assert read_record(new) == record("b")
    assert len(spares) == 0


def test_close_removes_the_folder_and_a_crashed_watchers_folder_is_cleared(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    left = state / SPARES_DIR / "h1--7"
    left.mkdir(parents=True)
    (left / "3").write_bytes(b"{}")  # what a crashed watcher with this host and pid left
    spares = RecordSpares(state, "h1", 7)
    assert os.listdir(left) == []
    spares.close()
    assert not left.exists()
    spares.close()  # twice is harmless


def test_a_watcher_recycles_records_and_leaves_no_spares_when_it_stops(
    layout: Layout, hopper
) -> None:
    for i in range(6):
        drop(layout, f"j{i}", bash("true"))
    assert hopper("run", "--until-idle").returncode == 0
    runs = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert len(runs) == 6
    for run in runs:
        assert read_record(run).state is JobState.SUCCEEDED
        assert not (run / standby.STANDBY).exists()
    assert (layout.state_dir / SPARES_DIR).is_dir()  # the watcher kept spares while it ran
    assert list((layout.state_dir / SPARES_DIR).iterdir()) == []  # and removed them at its stop
