"""executor = "slurm" end to end: real watcher processes, a real one-node Slurm cluster.

Each test drops a bash prompt, runs ``hopper run`` (with ``SLURM_CONF`` of the
session's private cluster) and checks the filesystem contract: job.json with
``slurm_job_id``, a live job.log, events.jsonl, ABORT, processed/. A job waits
on a "go" file the test creates, so nothing depends on timing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hopper.core.states import JobState, Reason
from hopper.executors.slurm import query
from hopper.executors.slurm_view import StateView
from hopper.faults import SLURM_CRASH_POINTS
from hopper.store.jobfile import read_events, read_record, write_record
from hopper.store.layout import Layout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conftest import Watchers, drop, hopper_cmd, wait_for
from faults.helpers import check_invariants, ledger_script
from slurm_cluster import SlurmCluster

SLURM_CONFIG = """
executor = "slurm"

[slurm]
poll_interval = "0.2s"
"""


@pytest.fixture
def slurm_root(slurm: SlurmCluster, config_file: Path) -> SlurmCluster:
    """The session cluster, with this test's config sending every job to it."""
    config_file.write_text(config_file.read_text() + SLURM_CONFIG)
    return slurm


def prompt(script: str, **keys: str) -> str:
    front = "".join(f'{k} = "{v}"\n' for k, v in keys.items())
    return f'+++\nagent = "bash"\n{front}+++\n{script}\n'


def only_run(layout: Layout) -> Path:
    wait_for(lambda: any(layout.runs.iterdir()), 20, "a run directory")
    return next(layout.runs.iterdir())


def state_of(run_dir: Path) -> JobState | None:
    try:
        return read_record(run_dir).state
    except (FileNotFoundError, ValueError):
        return None


def ended(run_dir: Path) -> bool:
    """Terminal and filed: the prompt is in processed/ and the finalized event written."""
    terminal = state_of(run_dir) in (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED)
    return terminal and any(e["event"] == "finalized" for e in read_events(run_dir))


def slurm_running(run_dir: Path, cluster: SlurmCluster) -> bool:
    sid = read_record(run_dir).slurm_job_id
    if sid is None:
        return False
    job = query([sid], cluster.env)[sid].job
    return job is not None and job.state == "RUNNING"


def log_has(run_dir: Path, text: str) -> bool:
    log = run_dir / "job.log"
    return log.exists() and text in log.read_text()


def waiting_script(go: Path) -> str:
    return f"echo started\nwhile [ ! -e {go} ]; do sleep 0.1; done\necho finished\n"


def test_succeeds_with_live_log(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    drop(layout, "hello", prompt(waiting_script(go)))
    watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    # live: the output is in job.log while Slurm still runs the job
    wait_for(lambda: log_has(run_dir, "started"), 30, "live output")
    record = read_record(run_dir)
    assert record.state is JobState.RUNNING
    assert record.executor == "slurm" and record.slurm_job_id
    assert record.pid is None
    assert slurm_running(run_dir, slurm_root)
    go.touch()
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.state is JobState.SUCCEEDED, final.detail
    assert final.reason is Reason.COMPLETED and final.exit_code == 0
    assert final.slurm_job_id == record.slurm_job_id
    assert "started\nfinished\n" in (run_dir / "job.log").read_text()
    assert final.processed_path and (layout.root / final.processed_path).exists()
    events = {e["event"]: e for e in read_events(run_dir)}
    assert events["started"]["slurm_job_id"] == record.slurm_job_id
    assert events["exited"]["slurm_state"] == "COMPLETED"
    assert "finalized" in events


def test_exit_3_fails_with_its_code(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers
) -> None:
    drop(layout, "three", prompt("echo failing; exit 3"))
    watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.state is JobState.FAILED
    assert final.reason is Reason.EXIT_NONZERO and final.exit_code == 3, final.detail
    assert log_has(run_dir, "failing")


def test_abort_cancels_the_slurm_job(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers
) -> None:
    drop(layout, "long", prompt("echo started; sleep 120"))
    watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    wait_for(lambda: log_has(run_dir, "started"), 30, "the job to run")
    sid = read_record(run_dir).slurm_job_id
    assert sid is not None
    (run_dir / "ABORT").touch()
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.state is JobState.ABORTED and final.reason is Reason.ABORTED, final.detail
    job = query([sid], slurm_root.env)[sid].job
    assert job is not None and job.state == "CANCELLED"
    assert any(e["event"] == "abort_requested" for e in read_events(run_dir))


def test_bad_resources_and_local_resources_are_bad_prompts(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers
) -> None:
    drop(layout, "badmem", prompt("true", mem="lots"))
    drop(layout, "localcpus", '+++\nagent = "bash"\nexecutor = "local"\ncpus = 2\n+++\ntrue\n')
    watchers.start(env=slurm_root.env)
    wait_for(lambda: len(list(layout.runs.iterdir())) == 2, 20, "two runs")
    for run_dir in layout.runs.iterdir():
        wait_for(lambda d=run_dir: ended(d), 20, "the job to end")  # type: ignore[misc]
        final = read_record(run_dir)
        assert final.reason is Reason.BAD_PROMPT
        assert final.slurm_job_id is None
    details = sorted(read_record(d).detail or "" for d in layout.runs.iterdir())
    assert any("mem must be" in d for d in details), details
    assert any("only apply to Slurm jobs" in d for d in details), details


def test_restarted_watcher_reattaches_and_finalizes(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    drop(layout, "survivor", prompt(waiting_script(go)))
    first = watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    wait_for(lambda: log_has(run_dir, "started"), 30, "the job to run")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert read_record(run_dir).state is JobState.RUNNING
    watchers.start(env=slurm_root.env)
    wait_for(
        lambda: any(e["event"] == "adopted" for e in read_events(run_dir)), 30, "re-attachment"
    )
    go.touch()
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.state is JobState.SUCCEEDED, final.detail
    assert log_has(run_dir, "finished")


def test_job_that_ended_while_the_watcher_was_down(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    drop(layout, "quiet", prompt(waiting_script(go) + "exit 4\n"))
    first = watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    wait_for(lambda: log_has(run_dir, "started"), 30, "the job to run")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    go.touch()
    wait_for(lambda: (run_dir / "slurm-exit.json").exists(), 30, "the wrapper's exit record")
    watchers.start(env=slurm_root.env)
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.reason is Reason.EXIT_NONZERO and final.exit_code == 4, final.detail


def test_job_slurm_does_not_know_is_lost(
    slurm_root: SlurmCluster, layout: Layout, watchers: Watchers
) -> None:
    drop(layout, "forgotten", prompt("echo started; sleep 120"))
    first = watchers.start(env=slurm_root.env)
    run_dir = only_run(layout)
    wait_for(lambda: log_has(run_dir, "started"), 30, "the job to run")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    # Slurm forgets the job: the record now names an id the controller never had
    record = read_record(run_dir)
    real = record.slurm_job_id
    assert real is not None
    write_record(run_dir, record.model_copy(update={"slurm_job_id": "999999"}))
    slurm_root.run("scancel", real)
    wait_for(
        lambda: query([real], slurm_root.env)[real].terminal, 30, "the real job to be cancelled"
    )
    watchers.start(env=slurm_root.env)
    wait_for(lambda: ended(run_dir), 30, "the job to end")
    final = read_record(run_dir)
    assert final.state is JobState.FAILED and final.reason is Reason.LOST, final.detail
    assert "999999" in (final.detail or "")


def run_until_idle(layout: Layout, config: Path, env: dict[str, str]) -> int:
    return subprocess.run(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config), "--until-idle"),
        env=env,
        capture_output=True,
        timeout=60,
    ).returncode


@pytest.mark.parametrize("point", SLURM_CRASH_POINTS)
def test_crash_between_submit_and_release(
    point: str, slurm_root: SlurmCluster, layout: Layout, config_file: Path
) -> None:
    """Killed after sbatch --hold (no record yet) or after the record (not yet released):
    the restarted watcher cancels the unrecorded job or releases the recorded one; the job
    runs exactly once."""
    ledger = layout.root / "ledger"
    drop(layout, "once", ledger_script(ledger, "once"))
    crashing = {**slurm_root.env, "HOPPER_CRASH_AT": point}
    assert run_until_idle(layout, config_file, crashing) == -signal.SIGKILL
    assert run_until_idle(layout, config_file, slurm_root.env) == 0
    check_invariants(layout, ledger, ["once"])
    (run_dir,) = list(layout.runs.iterdir())
    final = read_record(run_dir)
    assert final.state is JobState.SUCCEEDED, final.detail
    named = StateView(slurm_root.env).named(final.id)  # what recovery asks
    assert named is not None
    states = sorted(j.state for j in named)
    if point == "slurm.after_submit":
        assert states == ["CANCELLED", "COMPLETED"], states
        assert any(e["event"] == "slurm_stray_cancelled" for e in read_events(run_dir))
    else:
        assert states == ["COMPLETED"], states
        assert any(e["event"] == "released" for e in read_events(run_dir))
