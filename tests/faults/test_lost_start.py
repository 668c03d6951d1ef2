"""A queued job's own files lost before it starts: its run directory deleted,
its admission.json removed or rewritten. Each is filed with a reason and a
detail that say what was lost, at once, and the queue goes on.

Real watcher processes, black-box through files and commands: the damage is
done by another job (or the job itself), as it would be on a shared root.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout


def record_of(layout: Layout, name: str) -> JobRecord | None:
    """The record of the job called ``name``; None while none has a readable one."""
    for run_dir in layout.runs.iterdir():
        try:
            record = read_record(run_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if record.name == name:
            return record
    return None


def reaches(layout: Layout, name: str, state: JobState, timeout: float = 20.0) -> JobRecord:
    wait_for(
        lambda: (r := record_of(layout, name)) is not None and r.state is state,
        timeout=timeout,
        what=f"{name} {state}",
    )
    record = record_of(layout, name)
    assert record is not None
    return record


def one_slot(layout: Layout) -> None:
    config = layout.root.parent / "config.toml"
    config.write_text(config.read_text() + "max_parallel = 1\n")


def test_a_queued_job_whose_run_directory_another_job_deletes_is_filed_lost_at_once(
    layout: Layout, watchers, tmp_path: Path
) -> None:
    """Was: no state, no event, prompt gone, and the queue stalled ~64 s."""
    one_slot(layout)
    gate = tmp_path / "victim-id"
    script = (
        f'while [ ! -s {gate} ]; do sleep 0.05; done\nrm -rf "$HOPPER_RUN_DIR/../$(cat {gate})"'
    )
    drop(layout, "deleter", bash(script))
    log = tmp_path / "watcher.log"
    watchers.start(stderr=log)
    reaches(layout, "deleter", JobState.RUNNING)
    drop(layout, "victim", bash("echo it ran"))
    victim = reaches(layout, "victim", JobState.QUEUED)  # the one slot is the deleter's
    gate.write_text(victim.id)
    # Filed at once (well before the ~64 s the queue used to stall), and the
    # slot is free for the next job.
    record = reaches(layout, "victim", JobState.FAILED, timeout=15)
    drop(layout, "next", bash("true"))
    reaches(layout, "next", JobState.SUCCEEDED, timeout=15)
    watchers.stop_all()
    assert record.reason is Reason.LOST
    assert "run directory was deleted while it was queued" in (record.detail or "")
    assert "never ran" in (record.detail or "")
    run_dir = layout.run_dir(victim.id)  # a fresh one, with the record and its events
    events = Counter(e["event"] for e in read_events(run_dir))
    assert (events["finalized"], events["started"]) == (1, 0)
    assert not (run_dir / "job.log").exists()
    assert "will retry" not in log.read_text(), log.read_text()


def test_a_job_that_deletes_its_admission_record_and_edits_prompt_md_cannot_choose_its_retry(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    """Was: its retry parsed the edited prompt.md and ran that instead."""
    planted = tmp_path / "planted"
    # The edited prompt.md a retry would parse: a bash script (the default agent here).
    script = f"""rm -f "$HOPPER_RUN_DIR/admission.json"
echo "touch {planted}" > "$HOPPER_RUN_DIR/prompt.md"
exit 1"""
    drop(layout, "chooser", f'+++\nagent = "bash"\nretries = 1\n+++\n{script}\n')
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    assert not planted.exists(), "the retry ran the edited prompt.md"
    record = record_of(layout, "chooser")
    assert record is not None
    assert (record.state, record.reason, record.attempt) == (JobState.FAILED, Reason.LOST, 2)
    detail = record.detail or ""
    assert f"runs/{record.id}/admission.json, the job as admitted at claim, is missing" in detail
    assert "never runs prompt.md in its place" in detail and f"hopper retry {record.id}" in detail
    events = [e["event"] for e in read_events(layout.run_dir(record.id))]
    assert (events.count("started"), events.count("finalized")) == (1, 1)


def test_a_job_whose_supervisor_fork_is_refused_twice_runs_at_the_third_try(
    layout: Layout, watchers, config_file: Path, tmp_path: Path
) -> None:
    """Was: the first refused start filed the job failed/spawn_failed, never tried again."""
    tokens = tmp_path / "tokens"  # each file: one supervisor whose fork of its job is refused
    tokens.mkdir()
    for n in range(2):
        (tokens / str(n)).touch()
    env = {"HOPPER_CRASH_AT": "supervisor.fork", "HOPPER_FAULT_TOKENS": str(tokens)}
    drop(layout, "refused", bash("echo ran"))
    watchers.start(env=env, stderr=tmp_path / "watcher.log")
    record = reaches(layout, "refused", JobState.SUCCEEDED, timeout=60)
    watchers.stop_all()
    assert list(tokens.iterdir()) == []  # both refusals happened
    assert record.attempt == 1  # no retry of the job's own was spent
    events = [e for e in read_events(layout.run_dir(record.id))]
    tries = [e for e in events if e["event"] == "start_failed"]
    assert [e["tries"] for e in tries] == [1, 2]
    assert all("Resource temporarily unavailable" in str(e["why"]) for e in tries), tries
    assert [e["event"] for e in events].count("started") == 1
    assert (layout.run_dir(record.id) / "job.log").read_text() == "ran\n"
