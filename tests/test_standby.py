"""store/standby.py: job.json revised through a standby file, no new inode per revision,
and never rewritten while anyone holds it open."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from hopper.core.lifecycle import Step
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store import ledger, standby
from hopper.store.jobfile import read_record
from waiting import poll_until

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def record(state: JobState = JobState.QUEUED, name: str = "job", **kw: object) -> JobRecord:
    return JobRecord(
        id="20261126-090000-000-job-0001",
        name=name,
        state=state,
        agent="bash",
        host="h1",
        inbox_path="inbox/job.prompt.md",
        created_at=NOW,
        **kw,
    )


def commit(run: Path, rec: JobRecord) -> int:
    ledger.commit(run, Step(rec, ()))
    return (run / "job.json").stat().st_ino


def test_revisions_after_the_second_make_no_new_inode(tmp_path: Path) -> None:
    inodes = {commit(tmp_path, record(priority=p)) for p in range(6)}
    assert len(inodes) == 2  # the first record and the first standby, exchanged since
    assert read_record(tmp_path).priority == 5
    assert (tmp_path / standby.STANDBY).stat().st_ino in inodes
    assert read_record(tmp_path) == record(priority=5)


def test_a_shorter_record_is_padded_and_reads_back_equal(tmp_path: Path) -> None:
    commit(tmp_path, record(name="x" * 300))
    commit(tmp_path, record(name="y" * 300))
    commit(tmp_path, record(name="short"))  # into the 300-character record's file
    text = (tmp_path / "job.json").read_bytes()
    assert text.endswith(b" \n") and text.rstrip().endswith(b"}")
    assert read_record(tmp_path) == record(name="short")


def test_a_terminal_record_leaves_no_standby(tmp_path: Path) -> None:
    commit(tmp_path, record())
    commit(tmp_path, record(priority=1))
    assert (tmp_path / standby.STANDBY).exists()
    commit(tmp_path, record(JobState.FAILED, reason=Reason.LOST, finished_at=NOW))
    assert not (tmp_path / standby.STANDBY).exists()
    assert read_record(tmp_path).state is JobState.FAILED


def test_a_record_someone_holds_open_is_never_rewritten(tmp_path: Path) -> None:
    """A reader that opened job.json keeps reading that record whole: the revision
    after next cannot reuse its file (the write lease is refused) and takes a new one."""
    commit(tmp_path, record(priority=1))
    with open(tmp_path / "job.json", "rb") as reader:  # priority 1's file
        commit(tmp_path, record(priority=2))  # exchanged: priority 1's file is the standby
        commit(tmp_path, record(priority=3))  # would reuse it: held open, so a new file
        assert read_record(tmp_path).priority == 3
        assert b'"priority": 1' in reader.read()


def test_an_open_during_the_rewrite_waits_for_it_and_the_watcher_lives(tmp_path: Path) -> None:
    """Another process opening the standby while its lease is held waits until the
    rewrite is complete; the lease break signal (SIGURG, ignored) does not end us."""
    commit(tmp_path, record(priority=1))
    commit(tmp_path, record(priority=2))
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = standby.open_standby(dir_fd)
        assert found is not None
        fd, size = found
        reader = subprocess.Popen(["cat", str(tmp_path / standby.STANDBY)], stdout=subprocess.PIPE)
        try:
            poll_until(  # blocked in open(2), waiting for the lease
                lambda: "break_lease" in Path(f"/proc/{reader.pid}/wchan").read_text(),
                20,
                "cat to block on the lease",
            )
            os.write(fd, standby.padded(b'{"whole": true}\n', size))
            standby.release(fd)
            out, _ = reader.communicate(timeout=30)
        finally:
            reader.kill()
            reader.wait()
            os.close(fd)
        assert out.startswith(b'{"whole": true}')  # the whole new text, never a mix
    finally:
        os.close(dir_fd)
