"""The status index's cold build: fast reads, the model's road, forked workers.

A cold build (thousands of job.json files) reads each file in a few system
calls (``store/jobread.read_job_file``), validates it with the model and splits
the work over forked workers (``store/index_pool.py``). None of that may change
a row: a cold build equals a warm, one-file-at-a-time build row for row, and a
hostile file is reported with its reason while the build goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import hopper.store.index as index_module
import hopper.store.index_ahead as ahead
import hopper.store.index_pool as pool
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.index import JobIndex
from hopper.store.jobfile import write_record
from hopper.store.jobread import read_job_file
from hopper.store.layout import Layout
from hopper.store.saferead import RECORD_LIMIT, UnreadableFile, read_stat

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
GROUPS = ("", "team", "team/sub", "nightly")


def record(i: int, state: JobState, **changes: Any) -> JobRecord:
    created = NOW - timedelta(minutes=i)
    terminal = state not in (JobState.QUEUED, JobState.RUNNING)
    name = f"Job-{i}"
    fields: dict[str, Any] = {
        "id": f"{created:%Y%m%d-%H%M%S}-000-job-{i}-0001",
        "name": name,
        "state": state,
        "reason": Reason.EXIT_NONZERO if state is JobState.FAILED else None,
        "agent": ("bash", "claude", "codex")[i % 3],
        "host": "h",
        "inbox_path": "/".join(p for p in ("inbox", GROUPS[i % 4], f"{name}.prompt.md") if p),
        "processed_path": f"processed/{name}.prompt.md" if terminal else None,
        "created_at": created,
        "started_at": created + timedelta(seconds=1),
        "finished_at": created + timedelta(seconds=4) if terminal else None,
        "heartbeat_at": created + timedelta(seconds=3),
        "duration_seconds": 3.0 if terminal else None,
        "attempt": 1 + i % 2,
        "usage": Usage(input_tokens=i, output_tokens=2, cost_usd=0.5) if i % 3 else None,
    }
    fields.update(changes)
    return JobRecord(**fields)


def put(layout: Layout, rec: JobRecord, *, filed: bool = True) -> Path:
    run_dir = layout.run_dir(rec.id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, rec, durable=False)
    if rec.processed_path and filed:
        (layout.root / rec.processed_path).write_text("prompt")
    else:
        (run_dir / "prompt.md").write_text("prompt")
    return run_dir


def odd(layout: Layout, i: int, edit: Any) -> Path:
    """A run directory whose job.json is a valid record changed by ``edit(doc)``."""
    rec = record(i, JobState.SUCCEEDED)
    run_dir = put(layout, rec)
    doc = json.loads((run_dir / "job.json").read_text())
    edit(doc)
    (run_dir / "job.json").write_text(json.dumps(doc))
    return run_dir


@pytest.fixture
def varied(layout: Layout) -> Layout:
    """Every kind of row: states, groups, usage, unfiled, the model's road, and bad files."""
    for i in range(40):
        state = (JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING, JobState.QUEUED)[i % 4]
        put(layout, record(i, state), filed=i % 10 != 1)
    odd(layout, 50, lambda d: d.update(attempt="3"))  # lax: only the model reads it
    odd(layout, 51, lambda d: d.update(created_at="2026-11-22 10:00:00Z"))
    odd(layout, 52, lambda d: d.update(id="20261122-000000-000-elsewhere-0001"))  # not its dir
    odd(layout, 53, lambda d: d.update(state="exploded"))  # the model refuses it
    odd(layout, 54, lambda d: d.update(usage={"input_tokens": "x"}))  # refused too
    (odd(layout, 55, lambda d: None) / "job.json").write_bytes(b"{")  # not JSON
    (odd(layout, 56, lambda d: None) / "job.json").write_bytes(b'{"id": "\xff"}')  # not UTF-8
    (odd(layout, 57, lambda d: None) / "job.json").write_bytes(b"[" * 100_000)  # deep
    (layout.runs / "20261122-000000-000-claiming-0001").mkdir()  # no job.json yet
    hostile(layout)
    return layout


def hostile(layout: Layout) -> None:
    """job.json as a FIFO, a link to a valid record, a directory, a huge sparse file."""
    target = put(layout, record(60, JobState.SUCCEEDED)) / "job.json"
    for n, make in enumerate(
        (
            lambda p: os.mkfifo(p),
            lambda p: p.symlink_to(target),
            lambda p: p.mkdir(),
            huge,
        )
    ):
        run_dir = layout.runs / f"20261122-000000-000-hostile{n}-0001"
        run_dir.mkdir()
        make(run_dir / "job.json")


def huge(path: Path) -> None:
    with path.open("wb") as out:
        out.truncate(RECORD_LIMIT + 1)  # sparse: costs nothing until read


def build(layout: Layout) -> dict[str, Any]:
    """Everything a cold build leaves: rows, raw texts, stamps, finality, pending, problems."""
    (layout.state_dir / "index.sqlite").unlink(missing_ok=True)
    with JobIndex.open(layout) as index:
        result = index.refresh()
        jobs = index.jobs()
        return {
            "jobs": jobs,
            "raw": list(index.raw(j.id for j in jobs)),
            "stamps": index.stamps(),
            "table": index.conn.execute("SELECT * FROM jobs ORDER BY id").fetchall(),
            "pending": index.conn.execute("SELECT * FROM pending ORDER BY id").fetchall(),
            "corrupt": sorted(result.corrupt),
            "read": result.read,
        }


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every refresh reads in bulk over three processes; yields the pids that read."""
    readers: list[int] = []
    real = pool._read

    def read(*args: Any) -> pool.Slice:
        readers.append(os.getpid())  # a worker's append stays in the worker
        return real(*args)

    monkeypatch.setattr(index_module, "BULK_READ", 1)
    monkeypatch.setattr(pool, "workers", lambda files: 3)
    monkeypatch.setattr(pool, "_read", read)
    yield readers


def test_a_cold_build_equals_a_warm_one_row_for_row(varied: Layout, forked: list[int]) -> None:
    cold = build(varied)
    assert forked == [os.getpid()]  # the other two slices were read by workers
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index_module, "BULK_READ", 10**9)  # one file at a time, standard library
        mp.setattr(pool, "workers", lambda files: 1)
        warm = build(varied)
    assert cold == warm
    assert cold["read"] == 40 + 4  # the 40, the lax pair, the misnamed one, the link's target
    finals = [row[0] for row in cold["table"] if row[5]]
    assert len(finals) == 20 - 2 + 4  # terminal of the 40 but 2 unfiled; 50-52, the target


def test_hostile_files_are_reported_with_their_reason_and_the_build_goes_on(
    varied: Layout, forked: list[int]
) -> None:
    cold = build(varied)
    problems = "\n".join(cold["corrupt"])
    for n, words in enumerate(("a FIFO", "symbolic link", "a directory", "over the limit")):
        assert f"hostile{n}-0001/job.json" in problems and words in problems
    for i, words in ((53, "not a valid job record"), (55, "not a valid job record")):
        assert f"job-{i}-0001/job.json: {words}" in problems
    assert "records id '20261122-000000-000-elsewhere-0001', not its directory's name" in problems
    assert len(cold["corrupt"]) == 4 + 5 + 1  # hostile, refused (53-57), misnamed
    pending = {row[0] for row in cold["pending"]}
    assert len(pending) == 4 + 5 + 1  # hostile, refused, the claim in progress
    assert len(cold["jobs"]) == 44


def test_a_worker_that_dies_has_its_slice_read_again(
    varied: Layout, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = build(varied)
    parent = os.getpid()
    real = pool._read

    def dying(*args: Any) -> pool.Slice:
        if os.getpid() != parent:
            os._exit(3)
        return real(*args)

    monkeypatch.setattr(pool, "_read", dying)
    assert build(varied) == expected


def test_a_worker_does_not_run_the_parents_signal_handlers(
    varied: Layout, forked: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    expected = build(varied)
    parent = os.getpid()
    ran = tmp_path / "handler-ran"
    real = pool._read

    def terminated(*args: Any) -> pool.Slice:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)  # as a `kill` of the process group would
        return real(*args)

    def handler(signum: int, frame: object) -> None:
        ran.write_text(str(os.getpid()))

    monkeypatch.setattr(pool, "_read", terminated)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        assert build(varied) == expected  # the workers died; their slices read again
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not ran.exists()


def test_workers_are_not_forked_for_a_few_files_or_from_a_threaded_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "_threaded", lambda: False)
    assert pool.workers(pool.MIN_SHARE - 1) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    assert pool.workers(100_000) == pool.MAX_WORKERS
    monkeypatch.setattr(pool, "_threaded", lambda: True)
    assert pool.workers(100_000) == 1


@pytest.mark.parametrize("n", [0, 1, 2, 7, 100, 12345])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_the_slices_cover_every_name_once_in_order(n: int, k: int) -> None:
    names = [f"{i:06d}" for i in range(n)]
    slices = pool._split(names, k)
    assert len(slices) == k and [x for s in slices for x in s] == names
    if n >= 100 and k > 1:
        assert len(slices[0]) < len(slices[1])  # this process also writes the rows


# -- read_job_file: saferead's answers, in fewer calls ----------------------------


def test_read_job_file_gives_what_the_careful_reader_gives(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_bytes(b'{"a": 1}\n')
    data, st = read_job_file(str(path))
    careful, st2 = read_stat(path, RECORD_LIMIT)
    assert data == careful and (st.st_ino, st.st_size) == (st2.st_ino, st2.st_size)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert read_job_file(str(empty))[0] == b""


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (lambda p: p.symlink_to(p.with_name("real")), "symbolic link"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: huge(p), "over the limit"),
        (lambda p: p.write_bytes(b"{}") or p.chmod(0), "permission denied"),
    ],
    ids=["fifo", "link", "dir", "huge", "denied"],
)
def test_read_job_file_refuses_what_saferead_refuses(tmp_path: Path, make: Any, words: str) -> None:
    (tmp_path / "real").write_text("{}")
    path = tmp_path / "job.json"
    make(path)
    if words == "permission denied" and os.geteuid() == 0:
        pytest.skip("root reads a mode-0 file")
    with pytest.raises(UnreadableFile) as info:
        read_job_file(str(path))
    assert words in info.value.render() and str(path) in info.value.render()
    with pytest.raises(FileNotFoundError):
        read_job_file(str(tmp_path / "missing.json"))


def test_read_job_file_never_opens_a_device(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    with pytest.raises(UnreadableFile, match="device file"):
        read_job_file(str(path))


def test_read_job_file_reads_a_file_that_grew_after_its_fstat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "job.json"
    path.write_bytes(b"{}")
    real = os.fstat
    grew: list[int] = []

    def stale(fd: int) -> os.stat_result:  # a writer appends between fstat and read
        st = real(fd)
        if not grew:
            grew.append(fd)
            with path.open("ab") as out:
                out.write(b"  ")
        return st

    monkeypatch.setattr(os, "fstat", stale)
    assert read_job_file(str(path))[0] == b"{}  "


# -- a final job's text is not kept: read when asked for --------------------------


def test_a_final_jobs_text_is_read_from_its_file_when_asked_for(layout: Layout) -> None:
    done = [put(layout, record(i, JobState.SUCCEEDED)) for i in range(3)]
    live = put(layout, record(3, JobState.RUNNING))
    ids = sorted(d.name for d in (*done, live))
    with JobIndex.open(layout) as index:
        index.refresh()
        kept = dict(index.conn.execute("SELECT id, raw FROM jobs").fetchall())
        assert [i for i in ids if kept[i] is None] == sorted(d.name for d in done)
        assert kept[live.name] == (live / "job.json").read_text()
        texts = {d.name: (d / "job.json").read_text() for d in (*done, live)}
        assert list(index.raw(ids)) == [texts[i] for i in ids]
        assert index.raw_of(ids) == texts
        # behind the index's back (it does not look at final jobs again):
        shutil.rmtree(done[0])  # gone: left out
        (done[1] / "job.json").write_text('{"id": 1}')  # no longer a record: left out
        edited = record(2, JobState.FAILED)  # still a record: its text now
        write_record(done[2], edited, durable=False)
        now = (done[2] / "job.json").read_text()
        assert list(index.raw(ids)) == [texts[live.name], now]  # id order: live is oldest
        assert index.raw_of(ids) == {done[2].name: now, live.name: texts[live.name]}


def test_a_job_finalized_after_it_was_read_drops_its_kept_text(layout: Layout) -> None:
    rec = record(1, JobState.FAILED)
    run_dir = put(layout, rec, filed=False)
    with JobIndex.open(layout) as index:
        index.refresh()
        os.rename(run_dir / "prompt.md", layout.root / str(rec.processed_path))
        index.refresh()
        row = index.conn.execute("SELECT final, raw FROM jobs").fetchone()
        assert row == (1, None)
        assert list(index.raw([rec.id])) == [(run_dir / "job.json").read_text()]


# -- reading ahead when the disk is slow ------------------------------------------


def test_reading_ahead_changes_no_row(
    varied: Layout, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = build(varied)
    started: list[int] = []
    real = ahead.ReadAhead.__init__

    def start(self: ahead.ReadAhead, *args: Any) -> None:
        started.append(os.getpid())
        real(self, *args)

    monkeypatch.setattr(ahead, "SLOW", -1.0)  # every reader judges its disk slow
    monkeypatch.setattr(ahead, "SAMPLE", 2)
    monkeypatch.setattr(ahead.ReadAhead, "__init__", start)
    assert build(varied) == expected  # FIFO, link, huge file: nothing blocks, nothing changes
    assert started == [os.getpid()]  # and in each worker, whose list is its own


def test_a_warm_disk_starts_no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ahead.Watch()
    assert not watch.slow()  # no time has passed
    monkeypatch.setattr(ahead, "SLOW", -1.0)
    assert watch.slow()


def test_read_ahead_touches_every_later_file_once_then_stops(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"run-{i:03d}" for i in range(50)]
    touched: list[str] = []
    monkeypatch.setattr(ahead, "warm", lambda root, run_dir: touched.append(run_dir))
    reader = ahead.ReadAhead(str(layout.root), str(layout.runs), names, 10)
    reader.close()
    assert sorted(touched) == [f"{layout.runs}/{n}" for n in names[10:]]


def test_warming_follows_no_link_and_opens_no_fifo(varied: Layout) -> None:
    for run_dir in sorted(varied.runs.iterdir()):
        ahead.warm(str(varied.root), str(run_dir))  # returns: a FIFO would block here
    outside = varied.root.parent / "outside"
    outside.mkdir()
    os.mkfifo(outside / "fifo")
    run_dir = varied.runs / "20261122-000000-000-points-out-0001"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"processed_path": str(outside / "fifo")}))
    ahead.warm(str(varied.root), str(run_dir))  # an lstat of what it names, never an open
