"""The status index trusts what cannot change, and sees everything that can.

A final job (terminal, prompt filed in processed/) is neither stat'ed nor read
again; runs/ is listed only when its mtime moved; every other job.json is
stat'ed on each refresh, so a change behind the index always shows.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hopper.core.record import JobRecord
from hopper.core.selection import JobFilter
from hopper.core.states import JobState, Reason
from hopper.store.index import JobIndex
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OLD = time.time() - 3600  # an mtime well before any refresh: not "racy"


class CountingStat:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str) -> os.stat_result:
        self.paths.append(path)
        return os.stat(path)

    def job_files(self) -> int:
        return sum(p.endswith("/job.json") for p in self.paths)


def make(
    layout: Layout,
    i: int,
    state: JobState = JobState.SUCCEEDED,
    *,
    filed: bool = True,
    agent: str = "bash",
    group: str = "",
) -> JobRecord:
    created = NOW - timedelta(hours=i)
    terminal = state not in (JobState.QUEUED, JobState.RUNNING)
    name = f"job{i}"
    rec = JobRecord(
        id=f"{created:%Y%m%d-%H%M%S}-000-{name}-0001",
        name=name,
        state=state,
        reason=(Reason.COMPLETED if state is JobState.SUCCEEDED else Reason.EXIT_NONZERO)
        if terminal
        else None,
        agent=agent,
        host="h",
        inbox_path="/".join(p for p in ("inbox", group, f"{name}.prompt.md") if p),
        processed_path=f"processed/{name}.prompt.md" if terminal else None,
        created_at=created,
        started_at=created,
        finished_at=created + timedelta(seconds=3) if terminal else None,
        duration_seconds=3.0 if terminal else None,
    )
    run_dir = layout.run_dir(rec.id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, rec, durable=False)
    if terminal and filed:
        (layout.root / rec.processed_path).write_text("prompt")  # type: ignore[operator]
    else:
        (run_dir / "prompt.md").write_text("prompt")
    return rec


def settle(layout: Layout) -> None:
    """Age runs/'s mtime, as if the last run directory was made an hour ago."""
    os.utime(layout.runs, (OLD, OLD))


def refresh(layout: Layout) -> tuple[CountingStat, list[str]]:
    stat = CountingStat()
    with JobIndex.open(layout) as index:
        result = index.refresh(stat=stat)
        states = [f"{j.name}:{j.state.value}" for j in index.jobs()]
    assert not result.corrupt, result.corrupt
    return stat, states


@pytest.fixture
def jobs(layout: Layout) -> list[JobRecord]:
    made = [make(layout, i) for i in range(20)]
    made.append(make(layout, 20, JobState.RUNNING))
    made.append(make(layout, 21, JobState.FAILED, filed=False))  # not finalized yet
    settle(layout)
    return made


def test_final_jobs_cost_nothing_on_a_warm_refresh(layout: Layout, jobs: list[JobRecord]) -> None:
    _, states = refresh(layout)
    assert len(states) == 22
    again, _ = refresh(layout)
    assert again.job_files() == 2  # the running job and the unfiled failed one
    assert str(layout.runs) in again.paths  # runs/ itself: unchanged, so not listed
    with JobIndex.open(layout) as index:
        result = index.refresh()
    assert (result.listed, result.read, result.stated) == (0, 0, 2)


def test_a_change_behind_the_index_shows(layout: Layout, jobs: list[JobRecord]) -> None:
    refresh(layout)
    running = jobs[20]
    done = running.model_copy(
        update={"state": JobState.FAILED, "reason": Reason.LOST, "finished_at": NOW}
    )
    write_record(layout.run_dir(running.id), done, durable=False)
    settle(layout)
    _, states = refresh(layout)
    assert "job20:failed" in states


def test_a_job_finalized_after_it_was_read_becomes_final(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    refresh(layout)
    unfiled = jobs[21]
    run_dir = layout.run_dir(unfiled.id)
    os.rename(run_dir / "prompt.md", layout.root / unfiled.processed_path)  # type: ignore[operator]
    settle(layout)
    with JobIndex.open(layout) as index:
        assert (index.refresh().read, index.refresh().stated) == (0, 1)


def test_new_and_removed_run_directories_show(layout: Layout, jobs: list[JobRecord]) -> None:
    refresh(layout)
    shutil.rmtree(layout.run_dir(jobs[0].id))
    make(layout, 30)
    _, states = refresh(layout)  # runs/'s mtime moved: listed again
    assert "job0:succeeded" not in states and "job30:succeeded" in states


def test_a_run_directory_replaced_under_the_same_name_is_read_again(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    refresh(layout)
    old = jobs[3]
    staged = layout.runs / ".staged"  # made while the old one exists: another inode
    staged.mkdir()
    write_record(staged, old.model_copy(update={"name": "renamed"}), durable=False)
    shutil.rmtree(layout.run_dir(old.id))
    os.rename(staged, layout.run_dir(old.id))
    os.utime(layout.runs, (OLD + 1, OLD + 1))
    _, states = refresh(layout)
    assert "renamed:succeeded" in states


def test_a_claim_in_progress_is_picked_up_when_its_job_json_appears(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    half = layout.runs / "20261122-130000-000-half-0001"
    half.mkdir()
    settle(layout)
    refresh(layout)
    rec = jobs[0].model_copy(update={"id": half.name, "name": "half"})
    write_record(half, rec, durable=False)  # runs/ does not change: the pending row says look
    _, states = refresh(layout)
    assert "half:succeeded" in states


def test_a_listing_too_recent_to_trust_is_made_again(layout: Layout, jobs: list[JobRecord]) -> None:
    now = time.time()
    os.utime(layout.runs, (now, now))  # same coarse tick as the listing: a new dir may hide
    refresh(layout)
    with JobIndex.open(layout) as index:
        assert index.refresh().listed == 22


def test_a_corrupt_job_json_is_reported_on_every_refresh_until_fixed(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    bad = layout.runs / "20261122-140000-000-bad-0001"
    bad.mkdir()
    (bad / "job.json").write_text("{")
    settle(layout)
    for _ in range(2):
        with JobIndex.open(layout) as index:
            assert any("bad" in p for p in index.refresh().corrupt)
    write_record(bad, jobs[1].model_copy(update={"id": bad.name, "name": "bad"}), durable=False)
    _, states = refresh(layout)
    assert "bad:succeeded" in states


def test_a_run_directory_whose_name_is_not_utf8_is_reported_not_fatal(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    os.mkdir(os.fsencode(layout.runs) + b"/bad\xff")
    with JobIndex.open(layout) as index:
        result = index.refresh()
        assert len(index.jobs()) == 22
    assert any("not UTF-8" in p for p in result.corrupt)


FILTERS: list[Callable[[float], JobFilter]] = [
    lambda now: JobFilter(),
    lambda now: JobFilter(states=frozenset({JobState.FAILED, JobState.RUNNING})),
    lambda now: JobFilter(agents=frozenset({"claude"})),
    lambda now: JobFilter(groups=frozenset({"team"})),
    lambda now: JobFilter(groups=frozenset({""}), agents=frozenset({"bash", "codex"})),
    lambda now: JobFilter(since=now - 5 * 3600),
    lambda now: JobFilter(since=now - 5 * 3600, states=frozenset({JobState.SUCCEEDED})),
    lambda now: JobFilter(names=("JOB1*",)),
    lambda now: JobFilter(names=("job2", "*-job3-*"), agents=frozenset({"bash"})),
]


@pytest.mark.parametrize("make_filter", FILTERS, ids=range(len(FILTERS)))
def test_sql_filters_select_what_the_python_filter_does(
    layout: Layout, make_filter: Callable[[float], JobFilter]
) -> None:
    agents, groups = ("bash", "claude", "codex"), ("", "team", "nightly")
    states = (JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING, JobState.QUEUED)
    for i in range(24):
        make(layout, i, states[i % 4], agent=agents[i % 3], group=groups[i % 5 % 3])
    wanted = make_filter(NOW.timestamp())
    with JobIndex.open(layout) as index:
        index.refresh()
        everything = index.jobs()
        assert index.jobs(wanted) == [j for j in everything if wanted.matches(j)]


def test_a_bulk_read_gives_the_rows_the_fast_road_gives(
    layout: Layout, jobs: list[JobRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hopper.store.index as index_module

    with JobIndex.open(layout) as index:
        assert index.refresh().read == 22
        fast = (index.jobs(), list(index.raw(j.id for j in jobs)), index.stamps())
    (layout.state_dir / "index.sqlite").unlink()
    monkeypatch.setattr(index_module, "BULK_READ", 1)  # every read through the model
    with JobIndex.open(layout) as index:
        assert index.refresh().read == 22
        assert (index.jobs(), list(index.raw(j.id for j in jobs)), index.stamps()) == fast


def test_a_reference_is_looked_up_as_resolve_would_pick_it_from_every_row(
    layout: Layout, jobs: list[JobRecord]
) -> None:
    from hopper.cli.status import resolve

    odd = make(layout, 40).model_copy(update={"name": "Straße"})
    write_record(layout.run_dir(odd.id), odd, durable=False)
    refs = [jobs[3].id, jobs[3].id.upper(), jobs[3].id[:15], "2026", "JOB7", "job2", "STRASSE"]
    refs += ["straße", "nothing", "", "20261122-1", "\U0010ffff", "job\ud7ff"]
    with JobIndex.open(layout) as index:
        index.refresh()
        every = index.jobs()
        for ref in refs:
            assert index.named(ref) == resolve(every, ref), ref
    assert len(resolve(every, "STRASSE")) == 1 and len(resolve(every, "2026")) == 23


def test_status_of_one_job_loads_no_other_row(
    layout: Layout, jobs: list[JobRecord], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from hopper.cli.main import main

    def every_row(self: JobIndex, wanted: JobFilter | None = None) -> list[Any]:
        raise AssertionError("every row loaded for one id")

    monkeypatch.setattr(JobIndex, "jobs", every_row)
    assert main(["status", "--root", str(layout.root), "JOB5"]) == 0
    out = capsys.readouterr().out
    assert jobs[5].id in out and jobs[6].id not in out
    assert main(["status", "--root", str(layout.root), jobs[7].id[:17], "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [jobs[7].id]
