"""store/spend.py: the root's spend ledger, filed once per job, read without trusting it."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hopper.core.lifecycle import ExitFigures
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store import finalize, spend
from hopper.store.finalize import ending, file_terminals
from hopper.store.jobfile import read_record, write_record
from hopper.store.layout import Layout
from hopper.store.spend import SPEND_DIR, SpendLedger, file_spends

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
DAY = NOW - timedelta(hours=12), NOW + timedelta(hours=11)


def record(
    n: int, *, usage: Usage | None, agent: str = "claude", state: JobState = JobState.SUCCEEDED
) -> JobRecord:
    return JobRecord(
        id=f"20261126-110000-000-job-{n:04d}",
        name=f"job{n}",
        state=state,
        reason=Reason.COMPLETED if state is JobState.SUCCEEDED else None,
        agent=agent,
        host="h1",
        inbox_path=f"inbox/app/job{n}.prompt.md",
        group="app",
        session="s1" if n % 2 else None,
        created_at=NOW - timedelta(minutes=5),
        finished_at=NOW if state is JobState.SUCCEEDED else None,
        usage=usage,
    )


def dollars(cost: float | None, tokens: int = 100) -> Usage:
    return Usage(
        input_tokens=tokens, output_tokens=tokens // 2, cache_read_tokens=10_000, cost_usd=cost
    )


def test_a_job_is_counted_once_however_often_its_end_is_filed(layout: Layout) -> None:
    job = record(1, usage=dollars(0.25))
    assert file_spends(layout, [job]) == 1
    assert file_spends(layout, [job]) == 0  # recovery files it again after a crash
    (only,) = SpendLedger(layout).spends(*DAY)
    assert (only.job_id, only.cost_usd, only.tokens) == (job.id, 0.25, 10_150)  # core/prices.py
    assert (only.agent, only.group, only.session) == ("claude", "app", "s1")
    names = os.listdir(layout.state_dir / SPEND_DIR / "2026-11-26")
    assert names == [f"{job.id}.json"]  # no temporary file left behind


def test_only_finished_jobs_that_reported_usage_are_filed(layout: Layout) -> None:
    assert (
        file_spends(
            layout, [record(1, usage=None), record(2, usage=dollars(1.0), state=JobState.RUNNING)]
        )
        == 0
    )
    assert SpendLedger(layout).spends(*DAY) == []


def test_a_reader_sees_what_another_watcher_files_and_keeps_what_it_parsed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = SpendLedger(layout)
    assert reader.spends(*DAY) == []
    file_spends(layout, [record(1, usage=dollars(1.0))])
    assert [s.cost_usd for s in reader.spends(*DAY)] == [1.0]
    reads: list[object] = []
    real = spend.read_bytes
    monkeypatch.setattr(spend, "read_bytes", lambda *a, **k: reads.append(a) or real(*a, **k))
    file_spends(layout, [record(2, usage=dollars(2.0))])
    assert sorted(s.cost_usd or 0 for s in reader.spends(*DAY)) == [1.0, 2.0]
    assert len(reads) == 1  # only the new entry was read
    reader.spends(*DAY)
    assert len(reads) == 1  # nothing new: nothing read again


def test_spend_outside_the_window_is_left_out(layout: Layout) -> None:
    file_spends(layout, [record(1, usage=dollars(1.0))])
    later = NOW + timedelta(days=1)
    assert SpendLedger(layout).spends(later, later + timedelta(hours=1)) == []
    assert SpendLedger(layout).spends(NOW - timedelta(days=3), NOW) != []


def test_planted_and_damaged_entries_are_ignored_with_a_warning(
    layout: Layout, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = record(1, usage=dollars(1.0))
    file_spends(layout, [good])
    day = layout.state_dir / SPEND_DIR / "2026-11-26"
    (day / "junk.json").write_text("{not json")
    os.mkfifo(day / "fifo.json")  # a reader must not block on it
    secret = tmp_path / "secret.json"
    secret.write_text((day / f"{good.id}.json").read_text().replace(good.id, "x"))
    (day / "link.json").symlink_to(secret)
    moved = (day / f"{good.id}.json").read_text().replace(good.id, "20261126-000000-000-other")
    (day / "misplaced.json").write_text(moved)  # an entry under another job's name
    (day / "huge.json").write_bytes(b" " * (spend.ENTRY_LIMIT + 1))
    spends = SpendLedger(layout).spends(*DAY)
    assert [s.job_id for s in spends] == [good.id]
    text = caplog.text
    for name in ("junk.json", "fifo.json", "link.json", "misplaced.json", "huge.json"):
        assert name in text


def test_a_link_in_place_of_a_day_folder_is_not_followed(layout: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    file_spends(layout, [record(1, usage=dollars(1.0))])
    day = layout.state_dir / SPEND_DIR / "2026-11-26"
    day.rename(elsewhere / "2026-11-26")
    day.symlink_to(elsewhere / "2026-11-26")
    assert SpendLedger(layout).spends(*DAY) == []
    with pytest.raises(OSError):
        file_spends(layout, [record(2, usage=dollars(1.0))])


def running(layout: Layout, n: int, usage: Usage | None) -> tuple[Path, JobRecord]:
    rec = record(n, usage=usage, state=JobState.RUNNING).model_copy(update={"started_at": NOW})
    run_dir = layout.run_dir(rec.id)
    run_dir.mkdir(parents=True)
    (run_dir / "prompt.md").write_text("hi\n")
    write_record(run_dir, rec, durable=False)
    return run_dir, rec


def test_finalizing_files_the_spend_before_the_prompt_moves(layout: Layout) -> None:
    jobs = [running(layout, n, dollars(0.5) if n != 2 else None) for n in range(1, 4)]
    ends = [
        (d, r, ending(layout, r, Reason.COMPLETED, "ok", NOW, 1.0, ExitFigures(0, None)))
        for d, r in jobs
    ]
    filed = file_terminals(layout, ends, NOW)
    assert all(isinstance(f, JobRecord) for f in filed)
    assert sorted(s.job_id for s in SpendLedger(layout).spends(*DAY)) == [
        jobs[0][1].id,
        jobs[2][1].id,
    ]
    assert spend.rebuild(layout) == sorted(
        (e for e in (spend.entry_of(read_record(d)) for d, _ in jobs) if e), key=lambda e: e.job_id
    )
    assert spend.missing(layout, spend.rebuild(layout)) == []


def test_a_refused_spend_write_keeps_the_prompt_for_recovery(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, rec = running(layout, 1, dollars(0.5))

    def full(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(finalize.spend, "file_spends", full)
    (result,) = file_terminals(
        layout, [(run_dir, rec, ending(layout, rec, Reason.COMPLETED, "ok", NOW))], NOW
    )
    assert isinstance(result, OSError)
    assert read_record(run_dir).state is JobState.SUCCEEDED  # terminal, prompt unmoved:
    assert (run_dir / "prompt.md").exists()  # recovery completes the finalize, spend first
