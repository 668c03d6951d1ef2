"""``hopper prune`` end to end on a real root with a month of runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store import prune as store
from hopper.store.index import JobIndex
from hopper.store.jobfile import PROMPT_FILE, write_record
from hopper.store.layout import Layout

REASONS = {
    JobState.SUCCEEDED: Reason.COMPLETED,
    JobState.FAILED: Reason.EXIT_NONZERO,
    JobState.ABORTED: Reason.ABORTED,
}


def make_job(
    layout: Layout,
    name: str,
    state: JobState,
    days_ago: float,
    *,
    after: list[str] | None = None,
    filed: bool | None = None,
    processed_path: str | None = None,
) -> JobRecord:
    """A run directory as hopper leaves it: job.json, job.log, events.jsonl; a finished
    job's prompt filed in processed/, an active one's prompt.md still in the run dir."""
    ended = datetime.now(UTC) - timedelta(days=days_ago)
    job_id = f"{ended:%Y%m%d-%H%M%S}-{ended.microsecond // 1000:03d}-{name}-0001"
    terminal = state in REASONS
    filed = terminal if filed is None else filed
    processed = processed_path or f"processed/{name}.{job_id}.prompt.md"
    record = JobRecord(
        id=job_id,
        name=name,
        state=state,
        reason=REASONS.get(state),
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        processed_path=processed if filed else None,
        created_at=ended - timedelta(minutes=5),
        finished_at=ended if terminal else None,
        after=after or [],
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    (run_dir / "job.log").write_text(f"output of {name}\n" * 20)
    (run_dir / "events.jsonl").write_text('{"event": "claimed"}\n')
    if filed:
        target = layout.root / processed
        if target.parent == layout.processed:  # never through a link a test planted
            target.write_text(f"echo {name}\n")
    else:
        (run_dir / PROMPT_FILE).write_text(f"echo {name}\n")
    return record


def month(layout: Layout) -> dict[str, JobRecord]:
    """Thirty days of finished jobs, one a day, plus the ones prune must never take."""
    jobs: dict[str, JobRecord] = {}
    states = (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED)
    for day in range(1, 31):
        name = f"day{day:02d}"
        jobs[name] = make_job(layout, name, states[day % 3], day + 0.5)
    jobs["running"] = make_job(layout, "running", JobState.RUNNING, 25)
    jobs["queued"] = make_job(layout, "queued", JobState.QUEUED, 25, after=["day29"])
    jobs["finalizing"] = make_job(layout, "finalizing", JobState.FAILED, 25, filed=False)
    return jobs


def snapshot(root: Path) -> list[tuple[str, int]]:
    out = []
    for top, dirs, files in os.walk(root):
        for name in sorted(files + dirs):
            path = Path(top) / name
            out.append((str(path.relative_to(root)), path.lstat().st_size))
    return sorted(out)


def run_dirs(layout: Layout) -> set[str]:
    return {p.name for p in layout.runs.iterdir()}


def test_dry_run_lists_a_month_of_runs_and_removes_nothing(layout: Layout, hopper) -> None:
    jobs = month(layout)
    before = snapshot(layout.root)
    result = hopper("prune", "--older-than", "7d", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert snapshot(layout.root) == before
    lines = result.stdout.splitlines()
    listed = [line.split()[2] for line in lines if line.startswith("would remove ")]
    # days 8..30 ended more than 7 days ago; day 29 is kept (the queued job's `after`)
    expected = {jobs[f"day{d:02d}"].id for d in range(7, 31) if d != 29}
    assert set(listed) == expected
    summary = lines[-1]
    assert summary.startswith(f"would free {len(expected)} jobs: {4 * len(expected)} files, ")
    assert "1 waited on by a queued job" in summary
    assert "2 queued or running" in summary and "1 being finalized" in summary

    report = json.loads(hopper("prune", "--older-than", "7d", "--dry-run", "--json").stdout)
    assert report["dry_run"] is True
    assert {j["id"] for j in report["pruned"]} == expected
    assert report["freed"]["jobs"] == len(expected) and report["freed"]["bytes"] > 0
    kept = {k["id"]: k["why"] for k in report["kept"]}
    assert kept[jobs["running"].id] == "active" and kept[jobs["queued"].id] == "active"
    assert kept[jobs["finalizing"].id] == "finalizing" and kept[jobs["day29"].id] == "dependency"
    assert snapshot(layout.root) == before


def test_prune_removes_records_logs_prompts_and_index_rows(layout: Layout, hopper) -> None:
    jobs = month(layout)
    assert hopper("status").returncode == 0  # the index now holds every job
    result = hopper("prune", "--older-than", "20d", "--state", "failed", "--state", "aborted")
    assert result.returncode == 0, result.stderr
    gone = {
        r.id
        for n, r in jobs.items()
        if n.startswith("day")
        and int(n[3:]) >= 20
        and r.state is not JobState.SUCCEEDED
        and n != "day29"  # aborted, but the queued job's `after` names it: kept
    }
    assert gone and run_dirs(layout) == {r.id for r in jobs.values()} - gone
    for record in jobs.values():
        prompt = layout.root / (record.processed_path or "processed/none")
        assert prompt.exists() == (record.processed_path is not None and record.id not in gone)
    assert result.stdout.splitlines()[-1].startswith(f"freed {len(gone)} jobs: ")
    with JobIndex.open(layout) as index:  # the rows went with the prune, no refresh here
        indexed = {s.id for s in index.jobs()}
    assert indexed == {r.id for r in jobs.values()} - gone
    status = json.loads(hopper("status", "--json").stdout)
    assert {j["id"] for j in status} == {r.id for r in jobs.values()} - gone
    # nothing left to do: a second prune frees nothing
    again = hopper("prune", "--older-than", "20d", "--state", "failed", "--state", "aborted")
    assert again.stdout.splitlines()[-1].startswith("freed 0 jobs: 0 files, 0B")


def test_links_planted_in_a_run_dir_are_removed_not_followed(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    record = make_job(layout, "old", JobState.FAILED, 40)
    run_dir = layout.run_dir(record.id)
    (run_dir / "to-dir").symlink_to(outside)
    (run_dir / "to-file").symlink_to(outside / "keep.txt")
    (run_dir / "work").mkdir()
    (run_dir / "work" / "deep").symlink_to(outside)
    result = hopper("prune", "--older-than", "30d")
    assert result.returncode == 0, result.stderr
    assert not run_dir.exists()
    assert (outside / "keep.txt").read_text() == "mine\n"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]


def test_a_processed_path_out_of_processed_or_through_a_link_is_left(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.prompt.md").write_text("not hopper's\n")
    (layout.processed / "team").symlink_to(outside)
    (layout.inbox / "x.prompt.md").write_text("a prompt waiting\n")
    through_link = make_job(
        layout, "linked", JobState.FAILED, 40, processed_path="processed/team/x.prompt.md"
    )
    into_inbox = make_job(layout, "inbox", JobState.FAILED, 40, processed_path="inbox/x.prompt.md")
    climbing = make_job(
        layout, "climb", JobState.FAILED, 40, processed_path="processed/../inbox/x.prompt.md"
    )
    result = hopper("prune", "--older-than", "1d", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {j["id"] for j in report["pruned"]} == {through_link.id, into_inbox.id, climbing.id}
    assert run_dirs(layout) == set()
    assert (outside / "x.prompt.md").read_text() == "not hopper's\n"
    assert (layout.inbox / "x.prompt.md").read_text() == "a prompt waiting\n"


def test_a_corrupt_record_or_a_claim_in_progress_is_kept(layout: Layout, hopper) -> None:
    corrupt = layout.runs / "20261001-000000-000-broken-0001"
    corrupt.mkdir()
    (corrupt / "job.json").write_text("{not json")
    claiming = layout.runs / "20261001-000000-000-claiming-0001"
    claiming.mkdir()
    (claiming / PROMPT_FILE).write_text("echo hi\n")
    report = json.loads(hopper("prune", "--older-than", "0", "--json").stdout)
    assert report["pruned"] == []
    kept = {k["id"]: k for k in report["kept"]}
    assert kept[corrupt.name]["why"] == "unreadable" and "job.json" in kept[corrupt.name]["detail"]
    assert kept[claiming.name]["why"] == "unreadable"
    assert run_dirs(layout) == {corrupt.name, claiming.name}


def test_a_bad_age_is_a_usage_error_and_nothing_is_removed(layout: Layout, hopper) -> None:
    make_job(layout, "old", JobState.FAILED, 40)
    before = snapshot(layout.root)
    result = hopper("prune", "--older-than", "30days")
    assert result.returncode == 2
    assert "--older-than" in result.stderr and "examples: 90s" in result.stderr
    missing = hopper("prune")
    assert missing.returncode == 2 and "--older-than" in missing.stderr
    bad_state = hopper("prune", "--older-than", "1d", "--state", "running")
    assert bad_state.returncode == 2
    assert snapshot(layout.root) == before


def test_a_prune_that_died_half_way_is_finished_by_the_next(layout: Layout, hopper) -> None:
    record = make_job(layout, "half", JobState.SUCCEEDED, 40)
    assert record.processed_path is not None
    os.rename(layout.run_dir(record.id), layout.runs / f"{store.TRASH_PREFIX}{record.id}")
    kept = make_job(layout, "young", JobState.SUCCEEDED, 1)
    result = hopper("prune", "--older-than", "30d")
    assert result.returncode == 0, result.stderr
    assert run_dirs(layout) == {kept.id}
    assert not (layout.root / record.processed_path).exists()


def test_a_job_whose_prompt_came_back_is_not_removed(layout: Layout) -> None:
    record = make_job(layout, "back", JobState.FAILED, 40)
    (layout.run_dir(record.id) / PROMPT_FILE).write_text("echo again\n")
    with pytest.raises(store.NotPrunable, match=r"prompt\.md is back"):
        store.remove(layout, record)
    assert layout.run_dir(record.id).is_dir()


def test_a_job_active_again_is_not_removed(layout: Layout) -> None:
    record = make_job(layout, "again", JobState.FAILED, 40)
    write_record(
        layout.run_dir(record.id),
        record.model_copy(update={"state": JobState.RUNNING, "reason": None}),
        durable=False,
    )
    with pytest.raises(store.NotPrunable, match="running now"):
        store.remove(layout, record)
    assert layout.run_dir(record.id).is_dir()


def test_a_run_dir_swapped_for_a_link_is_not_removed(layout: Layout, tmp_path: Path) -> None:
    record = make_job(layout, "swap", JobState.FAILED, 40)
    real = tmp_path / "moved"
    shutil.move(layout.run_dir(record.id), real)
    layout.run_dir(record.id).symlink_to(real)
    with pytest.raises(store.NotPrunable, match="not a real folder"):
        store.remove(layout, record)
    assert (real / "job.json").exists()


def test_prune_refuses_where_rmtree_could_follow_links(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil.rmtree, "avoids_symlink_attacks", False)
    with pytest.raises(store.UnsafeRemoval, match="avoids_symlink_attacks"):
        store.check_safe_rmtree()


def test_rmtree_here_avoids_symlink_attacks() -> None:
    assert shutil.rmtree.avoids_symlink_attacks


def _chattr(flag: str, path: Path) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    return subprocess.run([chattr, flag, str(path)], capture_output=True).returncode == 0


def test_a_file_that_cannot_be_removed_is_named_and_finished_later(layout: Layout, hopper) -> None:
    stuck = make_job(layout, "stuck", JobState.FAILED, 40)
    other = make_job(layout, "other", JobState.FAILED, 40)
    pinned = layout.run_dir(stuck.id) / "work"
    pinned.mkdir()
    (pinned / "pinned.bin").write_text("x")
    if not _chattr("+i", pinned / "pinned.bin"):
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs/tmpfs)")
    trash = layout.runs / f"{store.TRASH_PREFIX}{stuck.id}"
    try:
        first = hopper("prune", "--older-than", "30d")
        assert first.returncode == 1
        assert f"{stuck.id} not removed" in first.stderr and "pinned.bin" in first.stderr
        assert "run hopper prune again" in first.stderr
        assert run_dirs(layout) == {trash.name}  # out of every listing; the other one gone
        assert not layout.run_dir(other.id).exists()
        again = hopper("prune", "--older-than", "30d")  # still stuck: said, not a traceback
        assert again.returncode == 1, again.stderr
        assert f"{stuck.id} not removed" in again.stderr and "Traceback" not in again.stderr
    finally:
        _chattr("-i", trash / "work" / "pinned.bin")
    last = hopper("prune", "--older-than", "30d")
    assert last.returncode == 0, last.stderr
    assert run_dirs(layout) == set()
