"""What a job's claim wrote or read, not read again: prompt.md read through the
descriptor that made it 0600, and admission.json's spec taken from memory by the
first start of the watcher that wrote it (store/claim.py, store/admission.py)."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.admission import StartSpec
from hopper.core.prompt import parse
from hopper.core.states import JobState
from hopper.store import admission
from hopper.store.admission import (
    ADMISSION_FILE,
    AdmissionUnusable,
    Written,
    read_admission,
    write_admission,
)
from hopper.store.claim import claim
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.withhold import make_private, private_read
from inprocess import in_process, submit
from opens import opened_by_name

NOW = datetime(2026, 11, 27, 5, 0, tzinfo=UTC)


def spec(job_id: str, body: str) -> StartSpec:
    return StartSpec.of(job_id, parse(f"+++\n+++\n{body}\n".encode()))


def test_the_first_read_after_the_write_is_the_spec_written_and_later_reads_the_file(
    tmp_path: Path,
) -> None:
    written = spec("j1", "admitted")
    write_admission(tmp_path, written)
    (tmp_path / ADMISSION_FILE).write_text("{not json")  # changed after the write
    assert read_admission(tmp_path, "j1", 1 << 20) == written  # as written, not the change
    with pytest.raises(AdmissionUnusable):  # taken once: a start tried again reads the file
        read_admission(tmp_path, "j1", 1 << 20)
    write_admission(tmp_path, written)
    os.unlink(tmp_path / ADMISSION_FILE)
    assert read_admission(tmp_path, "j1", 1 << 20) == written
    assert read_admission(tmp_path, "j1", 1 << 20) is None


def test_a_kept_spec_of_another_job_is_not_given_and_the_file_is_read(tmp_path: Path) -> None:
    write_admission(tmp_path, spec("j1", "one"))
    with pytest.raises(AdmissionUnusable, match="it is job j1's, not j2's"):
        read_admission(tmp_path, "j2", 1 << 20)


def test_a_write_that_fails_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_admission(tmp_path, spec("j1", "old"))

    def no_space(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(admission.os, "write", no_space)
    with pytest.raises(OSError, match="No space"):
        write_admission(tmp_path, spec("j1", "new"))  # recovery's atomic replace
    monkeypatch.undo()
    assert read_admission(tmp_path, "j1", 1 << 20) == spec("j1", "old")  # the file's


def test_the_kept_specs_stay_within_their_budget_the_oldest_dropped(tmp_path: Path) -> None:
    kept = Written(budget=1000)
    dirs = [tmp_path / str(n) for n in range(5)]
    for n, run_dir in enumerate(dirs):
        kept.keep(run_dir, spec(f"j{n}", "x"), 300)
    assert len(kept) == 3
    assert kept.take(dirs[0]) is None and kept.take(dirs[1]) is None
    assert kept.take(dirs[4]) == spec("j4", "x")
    kept.keep(tmp_path / "big", spec("big", "x"), 1001)  # bigger than the budget: not kept
    assert kept.take(tmp_path / "big") is None
    kept.drop(dirs[2])
    kept.drop(dirs[3])
    assert len(kept) == 0
    for n, run_dir in enumerate(dirs):  # the budget's count went back with each
        kept.keep(run_dir, spec(f"j{n}", "x"), 300)
    assert len(kept) == 3


def test_private_read_reads_a_regular_file_within_the_limit_and_makes_it_0600(
    tmp_path: Path,
) -> None:
    path = tmp_path / "prompt.md"
    path.write_bytes(b"echo hi\n")
    path.chmod(0o644)
    assert private_read(path, 8) == (True, b"echo hi\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    assert private_read(path, 7) == (True, None)  # too big: read by saferead, which says so
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # made private all the same
    path.chmod(0o644)
    assert private_read(path, None) == (True, None)
    assert make_private(path) is True  # the same rule, its one home
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_private_read_never_follows_a_link_nor_blocks_on_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    target.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert private_read(link, 100) == (False, None)
    assert make_private(link) is False
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert private_read(fifo, 100) == (False, None)
    assert private_read(tmp_path / "missing", 100) == (False, None)


def test_a_claim_hands_on_the_prompt_it_made_private(layout: Layout) -> None:
    prompt = layout.inbox / "job.prompt.md"
    prompt.write_text("echo hi\n")
    claimed = claim(layout, prompt, NOW, "h1", "h1:42:1.5", limit=1 << 20)
    assert claimed is not None and claimed.dir_fd is not None
    os.close(claimed.dir_fd)
    assert claimed.data == b"echo hi\n"
    assert stat.S_IMODE((claimed.run_dir / "prompt.md").stat().st_mode) == 0o600


def test_a_job_is_claimed_and_started_with_one_open_of_its_prompt_and_none_of_its_admission(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prompt.md opened once (made 0600 and read), admission.json never opened by the
    watcher that wrote it, and the job runs what was admitted."""
    watcher, executor, clock = in_process(layout)
    submit(layout, clock, "job", '+++\nagent = "bash"\n+++\necho hi\n')
    opened = opened_by_name(monkeypatch)
    for _ in range(3):
        watcher.turn()
        if executor.started:
            break
    monkeypatch.undo()
    (job_id,) = executor.started
    run_dir = layout.run_dir(job_id)
    assert read_record(run_dir).state is JobState.RUNNING
    assert opened.count(str(run_dir / "prompt.md")) == 1
    assert opened.count(str(run_dir / ADMISSION_FILE)) == 0
    assert executor.launches[job_id].prep.argv[-1].endswith("script.sh")
