"""store/finalize.py's terminal path: one group commit for many endings, then each move."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.lifecycle import ExitFigures
from hopper.core.record import JobRecord
from hopper.core.states import IllegalTransition, JobState, Reason
from hopper.store import finalize, ledger
from hopper.store.finalize import ending, file_terminal, file_terminals
from hopper.store.jobfile import read_events, read_record, write_record
from hopper.store.layout import Layout
from opens import opened_by_name

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def running_job(layout: Layout, n: int) -> tuple[Path, JobRecord]:
    job_id = f"20261123-120000-000-job-000{n}"
    record = JobRecord(
        id=job_id,
        name=f"job{n}",
        state=JobState.RUNNING,
        agent="bash",
        host="h1",
        inbox_path=f"inbox/team/job{n}.prompt.md",
        created_at=NOW,
        started_at=NOW,
    )
    run_dir = layout.run_dir(job_id)
    run_dir.mkdir(parents=True)
    (run_dir / "prompt.md").write_text(f"echo {n}\n")
    write_record(run_dir, record, durable=False)
    return run_dir, record


def test_many_endings_are_committed_together_then_filed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [running_job(layout, n) for n in range(3)]
    order: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        order.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    monkeypatch.setattr(ledger.os, "fsync", fsync)
    monkeypatch.setattr(finalize, "crash_point", order.append)
    endings = [
        (
            run_dir,
            rec,
            ending(layout, rec, Reason.COMPLETED, "exit 0", NOW, 1.0, ExitFigures(0, None)),
        )
        for run_dir, rec in jobs
    ]
    results = file_terminals(layout, endings, NOW)
    # one batch: every file, then every directory, then the moves
    assert order == ["fsync-file"] * 3 + ["fsync-dir"] * 3 + ["finalize.after_move"] * 3
    for (run_dir, rec), filed in zip(jobs, results, strict=True):
        assert isinstance(filed, JobRecord)
        assert (filed.state, filed.exit_code, filed.duration_seconds) == (
            JobState.SUCCEEDED,
            0,
            1.0,
        )
        assert filed.processed_path == f"processed/team/{rec.name}.{rec.id}.prompt.md"
        assert read_record(run_dir) == filed
        assert (layout.root / filed.processed_path).read_text().startswith("echo")
        assert [e["event"] for e in read_events(run_dir)] == ["finalized"]


def test_one_ending_that_fails_leaves_the_others_filed(layout: Layout) -> None:
    (ok_dir, ok), (bad_dir, bad) = running_job(layout, 1), running_job(layout, 2)
    target = layout.root / "elsewhere"
    target.mkdir()
    bad_dir.rename(layout.root / "moved")
    bad_dir.symlink_to(target)  # its run directory swapped for a link
    endings = [
        (d, r, ending(layout, r, Reason.LOST, "gone", NOW))
        for d, r in ((bad_dir, bad), (ok_dir, ok))
    ]
    failed, filed = file_terminals(layout, endings, NOW)
    assert isinstance(failed, OSError)
    assert os.listdir(target) == []
    assert isinstance(filed, JobRecord) and filed.state is JobState.FAILED
    assert not (ok_dir / "prompt.md").exists()


def test_file_terminal_raises_what_stopped_it_and_refuses_an_illegal_ending(
    layout: Layout,
) -> None:
    run_dir, rec = running_job(layout, 1)
    done = file_terminal(layout, run_dir, rec, Reason.ABORTED, "aborted", NOW)
    assert (done.state, done.finished_at) == (JobState.ABORTED, NOW)
    with pytest.raises(IllegalTransition, match="aborted -> failed"):
        file_terminal(layout, run_dir, done, Reason.LOST, "again", NOW)
    other_dir, other = running_job(layout, 2)
    for name in os.listdir(other_dir):
        os.unlink(other_dir / name)
    other_dir.rmdir()
    with pytest.raises(FileNotFoundError):
        file_terminal(layout, other_dir, other, Reason.LOST, "gone", NOW)


def test_a_prompt_is_filed_into_existing_folders_without_making_them_again(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """processed/<sub>/ is made by the first job filed there; the next ones open it
    (no mkdir per job), and a link planted in its place is still refused."""
    made: list[str] = []
    real_mkdir = os.mkdir

    def mkdir(path: str, *args: object, **kw: object) -> None:
        made.append(os.fsdecode(path))
        real_mkdir(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "mkdir", mkdir)
    first, second = running_job(layout, 1), running_job(layout, 2)
    made.clear()
    filed = file_terminal(layout, *first, Reason.LOST, "gone", NOW)
    assert made == ["team"]  # processed/ is there (layout.ensure); team/ was not
    assert filed.processed_path == f"processed/team/job1.{filed.id}.prompt.md"
    filed = file_terminal(layout, *second, Reason.LOST, "gone", NOW)
    assert made == ["team"]
    assert (layout.root / str(filed.processed_path)).is_file()
    monkeypatch.undo()
    third = running_job(layout, 3)
    target = layout.root / "elsewhere"
    target.mkdir()
    (layout.processed / "team").rename(layout.root / "team-moved")
    (layout.processed / "team").symlink_to(target)
    filed = file_terminal(layout, *third, Reason.LOST, "gone", NOW)
    assert os.listdir(target) == []
    assert filed.processed_path == f"processed/job3.{filed.id}.prompt.md"


def test_a_job_admitted_without_env_is_filed_without_reading_its_files_again(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``env_free`` (the ids Intake admitted with no env values): neither admission.json
    nor prompt.md is read again, the prompt is only made 0600; a job not named there
    has both read as before (its prompt's own front matter may hold values)."""
    from hopper.store import withhold

    (free_dir, free), (other_dir, other) = running_job(layout, 1), running_job(layout, 2)
    read: list[str] = []
    real_read = withhold.read_bytes

    def spy(path: Path, limit: int, **kw: object) -> bytes:
        read.append(f"{path.parent.name}/{path.name}")
        return real_read(path, limit)

    monkeypatch.setattr(withhold, "read_bytes", spy)
    endings = [
        (d, r, ending(layout, r, Reason.COMPLETED, "exit 0", NOW, 1.0, ExitFigures(0, None)))
        for d, r in ((free_dir, free), (other_dir, other))
    ]
    filed = file_terminals(layout, endings, NOW, {free.id})
    assert [r.state for r in filed if isinstance(r, JobRecord)] == [JobState.SUCCEEDED] * 2
    assert read == [f"{other.id}/admission.json", f"{other.id}/prompt.md"]
    for record in filed:
        assert isinstance(record, JobRecord) and record.processed_path
        mode = (layout.root / record.processed_path).stat().st_mode
        assert stat.S_IMODE(mode) == 0o600


def test_the_finalized_event_goes_through_the_descriptor_the_move_used(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run directory is opened by name once per filed job (O_NOFOLLOW): the
    terminal commit, the move and the `finalized` event go through that descriptor,
    which is closed once filed. A job with no prompt left to move is noted by name
    as before."""
    (run_dir, rec), (bare_dir, bare) = running_job(layout, 1), running_job(layout, 2)
    (bare_dir / "prompt.md").unlink()
    before = len(os.listdir("/proc/self/fd"))
    opened = opened_by_name(monkeypatch)
    filed = file_terminal(layout, run_dir, rec, Reason.COMPLETED, "exit 0", NOW)
    monkeypatch.undo()
    assert len(os.listdir("/proc/self/fd")) == before
    assert opened.count(str(run_dir)) == 1
    assert [e["event"] for e in read_events(run_dir)] == ["finalized"]
    assert read_events(run_dir)[0]["processed_path"] == filed.processed_path
    file_terminal(layout, bare_dir, bare, Reason.COMPLETED, "exit 0", NOW)
    assert [e["event"] for e in read_events(bare_dir)][-1] == "finalized"


def test_an_env_free_prompt_already_0600_is_not_opened_and_one_made_0644_is_made_0600(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim left the prompt 0600: filing an env-free job looks at it (lstat) and
    opens it only if it is not 0600 any more (a job replaced or chmodded it)."""
    (kept_dir, kept), (open_dir, opened_job) = running_job(layout, 1), running_job(layout, 2)
    (kept_dir / "prompt.md").chmod(0o600)
    (open_dir / "prompt.md").chmod(0o644)
    endings = [
        (d, r, ending(layout, r, Reason.COMPLETED, "exit 0", NOW, 1.0, ExitFigures(0, None)))
        for d, r in ((kept_dir, kept), (open_dir, opened_job))
    ]
    opened = opened_by_name(monkeypatch)
    filed = file_terminals(layout, endings, NOW, {kept.id, opened_job.id})
    monkeypatch.undo()
    assert str(kept_dir / "prompt.md") not in opened
    assert opened.count(str(open_dir / "prompt.md")) == 1
    for record in filed:
        assert isinstance(record, JobRecord) and record.processed_path
        mode = (layout.root / record.processed_path).stat().st_mode
        assert stat.S_IMODE(mode) == 0o600
