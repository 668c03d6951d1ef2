"""store/ledger.py: a batch is written, fsynced (files, then each directory once), then acted on."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.lifecycle import Event, Step
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.store import ledger
from hopper.store.jobfile import read_events, read_record
from hopper.store.ledger import Entry

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
REFUSED = (errno.ELOOP, errno.ENOTDIR)  # O_DIRECTORY | O_NOFOLLOW on a link: Linux says ENOTDIR


def record(job_id: str, priority: int = 0) -> JobRecord:
    return JobRecord(
        id=job_id,
        name=job_id,
        state=JobState.QUEUED,
        agent="bash",
        host="h1",
        inbox_path=f"inbox/{job_id}.prompt.md",
        created_at=NOW,
        priority=priority,
    )


def step(job_id: str, priority: int = 0, *events: str) -> Step:
    return Step(record(job_id, priority), tuple(Event(e, NOW, {"p": priority}) for e in events))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync, rename and event append the ledger makes, in order."""
    seen: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        seen.append((f"fsync-{kind}", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str, **kw: int) -> None:
        seen.append(("rename", dst))
        real_replace(src, dst, **kw)

    def note(run_dir: Path, name: str, at: datetime, **fields: object) -> None:
        seen.append(("event", f"{run_dir.name}:{name}"))
        real_append(run_dir, name, at, **fields)

    def notes(dir_fd: int, lines: Sequence[bytes]) -> None:
        run_dir = os.readlink(f"/proc/self/fd/{dir_fd}")
        seen.extend(("event", f"{Path(run_dir).name}:{json.loads(x)['event']}") for x in lines)
        real_appends(dir_fd, lines)

    real_append, real_appends = ledger.append_event, ledger.append_events
    monkeypatch.setattr(ledger.os, "fsync", fsync)
    monkeypatch.setattr(ledger.os, "replace", replace)
    monkeypatch.setattr(ledger, "append_event", note)
    monkeypatch.setattr(ledger, "append_events", notes)
    return seen


def test_a_batch_fsyncs_each_file_then_each_directory_once_then_appends(
    tmp_path: Path, calls: list[tuple[str, str]]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    failed = ledger.commit_batch(
        [
            Entry(a, step("a", 1, "first")),
            Entry(b, step("b", 2, "other")),
            Entry(a, step("a", 3, "second")),  # the same job twice: the later one wins
        ]
    )
    assert failed == []
    kinds = [kind for kind, _ in calls]
    assert kinds == ["fsync-file"] * 3 + ["rename"] * 3 + ["fsync-dir"] * 2 + ["event"] * 3
    assert sorted(path for kind, path in calls if kind == "fsync-dir") == [str(a), str(b)]
    assert [p for k, p in calls if k == "event"] == ["a:first", "b:other", "a:second"]
    assert read_record(a).priority == 3
    assert read_record(b).priority == 2
    assert [e["event"] for e in read_events(a)] == ["first", "second"]
    assert not [n for n in os.listdir(a) if n.endswith(".tmp")]


def test_a_batch_of_one_is_the_old_durable_write(
    tmp_path: Path, calls: list[tuple[str, str]]
) -> None:
    assert ledger.commit(tmp_path, step("a", 1, "queued")).priority == 1
    assert [k for k, _ in calls] == ["fsync-file", "rename", "fsync-dir", "event"]
    assert read_events(tmp_path)[0] == {"ts": NOW.isoformat(), "event": "queued", "p": 1}


def test_an_entrys_events_are_appended_with_one_open_and_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "events.jsonl").write_text('{"event": "before"}\n')
    writes: list[tuple[str, bytes]] = []
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.endswith("events.jsonl"):
            writes.append((Path(name).parent.name, bytes(data)))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    failed = ledger.commit_batch(
        [Entry(a, step("a", 1, "claimed", "queued", "started")), Entry(b, step("b", 2, "x"))]
    )
    assert failed == []
    assert [d for d, _ in writes] == ["a", "b"]  # one write(2) per entry, not per event
    assert [e["event"] for e in read_events(a)] == ["before", "claimed", "queued", "started"]
    expected = b"".join(
        json.dumps({"ts": NOW.isoformat(), "event": n, "p": 1}).encode() + b"\n"
        for n in ("claimed", "queued", "started")
    )
    assert writes[0][1] == expected  # the lines append_event writes, byte for byte


def test_not_durable_skips_every_fsync(tmp_path: Path, calls: list[tuple[str, str]]) -> None:
    ledger.commit(tmp_path, step("a", 4), durable=False)
    assert [k for k, _ in calls] == ["rename"]
    assert read_record(tmp_path).priority == 4


def test_the_crash_point_sits_after_the_fsyncs_and_before_the_events(
    tmp_path: Path, calls: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "crash_point", lambda name: calls.append(("crash", name)))
    ledger.commit(tmp_path, step("a", 0, "started"), crash="start.after_record")
    assert [k for k, _ in calls] == ["fsync-file", "rename", "fsync-dir", "crash", "event"]


def test_a_failed_entry_changes_nothing_of_its_own_and_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, linked, target = tmp_path / "good", tmp_path / "linked", tmp_path / "elsewhere"
    good.mkdir()
    target.mkdir()
    linked.symlink_to(target)  # a run directory swapped for a link
    crashes: list[str] = []
    monkeypatch.setattr(ledger, "crash_point", crashes.append)
    bad = Entry(linked, step("linked", 1, "never"))
    failed = ledger.commit_batch([bad, Entry(good, step("good", 2, "kept"))], crash="x")
    assert [f.entry for f in failed] == [bad]
    assert failed[0].error.errno in REFUSED
    assert os.listdir(target) == []  # nothing written through the link
    assert read_record(good).priority == 2
    assert [e["event"] for e in read_events(good)] == ["kept"]
    assert crashes == ["x"]
    # alone, the failure is raised, and the crash point is not reached
    with pytest.raises(OSError) as caught:
        ledger.commit(linked, step("linked"), crash="y")
    assert caught.value.errno in REFUSED
    assert crashes == ["x"]


def test_a_failed_file_fsync_leaves_the_old_record_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.commit(tmp_path, step("a", 1))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ledger.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        ledger.commit(tmp_path, step("a", 2, "lost"))
    assert read_record(tmp_path).priority == 1
    assert sorted(os.listdir(tmp_path)) == ["job.json"]  # no events, no .tmp


def test_a_failed_directory_fsync_fails_the_entry_and_appends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.fsync

    def dir_fails(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(ledger.os, "fsync", dir_fails)
    (failed,) = ledger.commit_batch([Entry(tmp_path, step("a", 1, "started"))])
    assert failed.error.errno == errno.EIO
    assert read_events(tmp_path) == []  # not known durable: nothing acted on it


def test_a_directory_planted_at_job_json_is_moved_aside(tmp_path: Path) -> None:
    (tmp_path / "job.json").mkdir()
    ledger.commit(tmp_path, step("a", 5))
    assert read_record(tmp_path).priority == 5
    assert [n for n in os.listdir(tmp_path) if n.startswith(".job.json.displaced.")]


def test_a_link_planted_at_job_json_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / "job.json").symlink_to(victim)
    ledger.commit(run, step("a", 6))
    assert victim.read_text() == "keep"
    assert not (run / "job.json").is_symlink()
    assert read_record(run).priority == 6


def test_note_appends_an_event_without_a_record(tmp_path: Path) -> None:
    ledger.note(tmp_path, "hook_ok", NOW, hook="on_success")
    assert read_events(tmp_path) == [
        {"ts": NOW.isoformat(), "event": "hook_ok", "hook": "on_success"}
    ]
    assert not (tmp_path / "job.json").exists()


def test_a_batch_issues_its_fsyncs_concurrently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of a batch are fsynced at the same time, then its directories:
    the journal folds concurrent fsyncs into one commit (a group commit)."""
    dirs = [tmp_path / n for n in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    files, folders = threading.Barrier(3, timeout=10), threading.Barrier(3, timeout=10)
    real = os.fsync

    def fsync(fd: int) -> None:
        (folders if stat.S_ISDIR(os.fstat(fd).st_mode) else files).wait()  # all 3 at once
        real(fd)

    monkeypatch.setattr(ledger.os, "fsync", fsync)
    entries = [Entry(d, step(d.name, 1, "started")) for d in dirs]
    assert ledger.commit_batch(entries) == []
    assert [read_record(d).priority for d in dirs] == [1, 1, 1]


def test_a_batch_runs_its_first_fsync_on_the_calling_thread_and_keeps_the_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hand-off to the pool fewer per phase; the results still in the items' order,
    and a failure in the first does not leave the others unseen."""
    together = threading.Barrier(3, timeout=10)
    threads: list[str] = []

    def work(n: int) -> int:
        threads.append(threading.current_thread().name)
        together.wait()  # all three at once: still concurrent
        return n * 10

    assert ledger._each(work, [1, 2, 3]) == [10, 20, 30]
    assert threading.current_thread().name in threads
    assert sum(name.startswith("hopper-fsync") for name in threads) == 2

    done: list[int] = []

    def first_fails(n: int) -> int:
        if n == 1:
            raise RuntimeError("first")
        done.append(n)
        return n

    with pytest.raises(RuntimeError, match="first"):
        ledger._each(first_fails, [1, 2, 3])
    assert sorted(done) == [2, 3]  # waited for, not abandoned
