"""A job that tampers with what it can reach cannot make hopper write outside
the root, lose count of its output, or finalize it more than once.

Every case is a real job under a real watcher, doing what a careless or
hostile script would: swap files for symlinks, rename its log, tidy its
working directory, delete its own run directory.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from conftest import bash, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

M = 1 << 20


def only_job(layout: Layout) -> Path:
    (run_dir,) = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    return run_dir


def state_of(layout: Layout, name: str) -> JobState | None:
    """The state of the job called ``name``; None while it has no readable record."""
    for run_dir in layout.runs.iterdir():
        try:
            record = read_record(run_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if record.name == name:
            return record.state
    return None


def event_counts(run_dir: Path) -> Counter[str]:
    return Counter(e["event"] for e in read_events(run_dir))


def test_job_log_swapped_for_a_symlink_is_not_truncated_through(
    layout: Layout, tmp_path: Path, hopper
) -> None:
    """output_max trips after the swap: the cut goes through the supervisor's fd."""
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"keep me\n" * 1000)
    script = f"""
ln -sf {outside} "$HOPPER_RUN_DIR/job.log.new"
mv -f "$HOPPER_RUN_DIR/job.log.new" "$HOPPER_RUN_DIR/job.log"
head -c 3M /dev/zero
sleep 30
"""
    drop(layout, "swap", bash(script, output_max="1M"))
    assert hopper("run", "--until-idle").returncode == 0
    assert outside.read_bytes() == b"keep me\n" * 1000, "a file outside the root changed"
    record = read_record(only_job(layout))
    assert record.reason is Reason.OUTPUT_LIMIT
    assert record.resources is not None and record.resources.output_bytes > M


def test_output_max_counts_through_the_supervisors_fd_after_rename_and_unlink(
    layout: Layout, hopper
) -> None:
    """Renaming job.log away (or deleting it) does not hide output from output_max."""
    script = """
mv "$HOPPER_RUN_DIR/job.log" "$HOPPER_RUN_DIR/rotated.log"
head -c 1M /dev/zero
rm -f "$HOPPER_RUN_DIR/rotated.log"
head -c 3M /dev/zero
sleep 30
"""
    drop(layout, "rotate", bash(script, output_max="1M"))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert record.reason is Reason.OUTPUT_LIMIT, (record.reason, record.detail)
    exceeded = [e for e in read_events(run_dir) if e["event"] == "limit_exceeded"]
    assert exceeded and exceeded[0]["output_bytes"] > M


def test_events_symlink_does_not_make_the_watcher_append_outside(
    layout: Layout, tmp_path: Path, hopper
) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    script = f"""
ln -s {outside} "$HOPPER_RUN_DIR/events.new"
mv -f "$HOPPER_RUN_DIR/events.new" "$HOPPER_RUN_DIR/events.jsonl"
"""
    drop(layout, "events", bash(script))
    assert hopper("run", "--until-idle").returncode == 0
    assert outside.read_text() == "", "the watcher appended to a file outside the root"
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert record.state is JobState.SUCCEEDED
    names = [e["event"] for e in read_events(run_dir)]
    assert names[-2:] == ["exited", "finalized"]
    assert list(run_dir.glob(".events.jsonl.displaced.*")), "the planted link is moved aside"


def test_processed_symlink_does_not_file_prompts_outside(
    layout: Layout, tmp_path: Path, hopper
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (layout.processed / "team").symlink_to(outside)
    drop(layout, "routed", bash("true"), sub="team")
    assert hopper("run", "--until-idle").returncode == 0
    assert list(outside.iterdir()) == [], "a prompt was filed outside the root"
    record = read_record(only_job(layout))
    assert record.state is JobState.SUCCEEDED
    assert record.processed_path is not None
    filed = layout.root / record.processed_path
    assert filed.is_file() and not filed.is_symlink()
    assert filed.resolve().is_relative_to(layout.processed.resolve())
    assert "unsafe" in (record.detail or "")


def test_directory_planted_at_the_processed_path_files_once_elsewhere(
    layout: Layout, config_file: Path, tmp_path: Path, hopper
) -> None:
    """The job plants a directory where its prompt is to be filed: filed once, beside it."""
    script = 'mkdir -p "$HOPPER_ROOT/processed/planted.$HOPPER_JOB_ID.prompt.md/inside"'
    drop(layout, "planted", bash(script))
    log = tmp_path / "watcher.log"
    result = hopper("run", "--until-idle", timeout=60)
    log.write_text(result.stderr)
    assert result.returncode == 0, result.stderr
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert record.state is JobState.SUCCEEDED
    assert record.processed_path == f"processed/planted.{record.id}.2.prompt.md"
    assert (layout.root / record.processed_path).is_file()
    assert not (run_dir / "prompt.md").exists()
    assert event_counts(run_dir)["finalized"] == 1
    assert "ERROR" not in result.stderr


def test_tidy_job_cannot_remove_prompt_md(layout: Layout, hopper) -> None:
    """The default working directory is runs/<id>/work/, not the run directory."""
    drop(layout, "tidy", bash("pwd\nrm -f *.md *.json\ntouch scratch.md"))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert record.state is JobState.SUCCEEDED
    assert (run_dir / "job.log").read_text() == f"{run_dir / 'work'}\n"
    assert record.workdir == str(run_dir / "work")
    assert (run_dir / "work" / "scratch.md").exists()
    assert record.processed_path and (layout.root / record.processed_path).is_file()


def test_job_that_removes_prompt_md_is_filed_once(layout: Layout, watchers, tmp_path) -> None:
    """Missing prompt.md at finalize: recorded once, no ERROR loop, no state flipping."""
    gate = layout.root / "gate"
    drop(
        layout,
        "rmprompt",
        bash(f'rm -f "$HOPPER_RUN_DIR/prompt.md"\nwhile [ ! -e {gate} ]; do sleep 0.05; done'),
    )
    log = tmp_path / "watcher.log"
    watchers.start(stderr=log)
    wait_for(
        lambda: (
            layout.runs.exists()
            and any(not (d / "prompt.md").exists() for d in layout.runs.iterdir())
            and any((d / "job.json").exists() for d in layout.runs.iterdir())
        ),
        what="the prompt removed",
    )
    gate.touch()
    run_dir = only_job(layout)
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="succeeded")
    drop(layout, "next", bash("true"))
    wait_for(lambda: len(list(layout.runs.iterdir())) == 2, what="the next prompt claimed")
    watchers.stop_all()
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert record.processed_path is None
    assert "prompt.md was gone" in (record.detail or "")
    counts = event_counts(run_dir)
    assert (counts["exited"], counts["finalized"], counts["prompt_missing"]) == (1, 1, 1)
    assert "ERROR" not in log.read_text()


def test_run_directory_deleted_under_a_running_job(layout: Layout, watchers, tmp_path) -> None:
    """rm -rf of its own run dir: filed lost once, slot freed, nothing left running."""
    config = layout.root.parent / "config.toml"
    config.write_text(config.read_text() + "max_parallel = 1\n")
    drop(layout, "vanish", bash('rm -rf "$HOPPER_RUN_DIR"\nsleep 300'))
    log = tmp_path / "watcher.log"
    watchers.start(stderr=log)
    wait_for(lambda: state_of(layout, "vanish") is JobState.FAILED, what="filed", timeout=30)
    drop(layout, "next", bash("true"))  # the slot (max_parallel = 1) is free again
    wait_for(lambda: state_of(layout, "next") is JobState.SUCCEEDED, what="the next job")
    watchers.stop_all()
    run_dir = next(d for d in layout.runs.iterdir() if read_record(d).name == "vanish")
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.LOST)
    assert "run directory was deleted" in (record.detail or "")
    assert event_counts(run_dir)["finalized"] == 1
    # The failed write that revealed it, and the filing: once each, not 4x/s.
    assert log.read_text().count("ERROR") <= 2, log.read_text()
