"""SIGKILL the watcher at every named step of claim, start and finalize; restart it.

Each case checks the invariants: the prompt is in exactly one place, the job
ran exactly once, and it reached exactly one terminal state.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from conftest import drop, hopper_cmd
from faults.helpers import check_invariants, ledger_script
from hopper.core.states import JobState
from hopper.faults import CRASH_POINTS
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


def run_watcher(layout: Layout, config: Path, env: dict[str, str] | None = None) -> int:
    import os

    proc = subprocess.run(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config), "--until-idle"),
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_each_step(point: str, layout: Layout, config_file: Path) -> None:
    ledger = layout.root / "ledger"
    drop(layout, "job", ledger_script(ledger, "job"), sub="team")
    code = run_watcher(layout, config_file, {"HOPPER_CRASH_AT": point})
    assert code == -signal.SIGKILL, f"the watcher did not reach {point}"
    assert run_watcher(layout, config_file) == 0
    check_invariants(layout, ledger, ["job"])
    (record,) = [read_record(d) for d in layout.runs.iterdir() if (d / "job.json").exists()]
    assert record.state is JobState.SUCCEEDED
    assert record.processed_path == f"processed/team/job.{record.id}.prompt.md"


def test_crash_while_job_runs_then_job_finishes_while_down(
    layout: Layout, config_file: Path, watchers
) -> None:
    """Watcher SIGKILLed mid-job: the job keeps running and logging; restart finalizes it."""
    from conftest import wait_for

    gate = layout.root / "gate"
    drop(
        layout,
        "long",
        f'+++\nagent = "bash"\n+++\necho before\n'
        f"while [ ! -e {gate} ]; do sleep 0.05; done\necho after\n",
    )
    proc = watchers.start()
    wait_for(
        lambda: any(
            (d / "job.log").exists() and "before" in (d / "job.log").read_text()
            for d in layout.runs.iterdir()
        ),
        what="job running",
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gate.touch()
    (run_dir,) = list(layout.runs.iterdir())
    wait_for(lambda: (run_dir / "exit.json").exists(), what="supervisor records the exit")
    assert (run_dir / "job.log").read_text() == "before\nafter\n", "logging survived the watcher"
    assert read_record(run_dir).state is JobState.RUNNING
    assert run_watcher(layout, config_file) == 0
    assert read_record(run_dir).state is JobState.SUCCEEDED


def test_restart_adopts_a_live_job(layout: Layout, config_file: Path, watchers) -> None:
    from conftest import wait_for
    from hopper.store.jobfile import read_events

    gate = layout.root / "gate"
    drop(
        layout,
        "adopt",
        f'+++\nagent = "bash"\n+++\necho up\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n',
    )
    first = watchers.start()
    # Wait for the job's own output: "running" is recorded just *before* the
    # job is released, and a kill in between (rightly) requeues instead.
    wait_for(
        lambda: any(
            (d / "job.log").exists() and (d / "job.log").read_text() == "up\n"
            for d in layout.runs.iterdir()
        ),
        what="the job's first line",
    )
    (run_dir,) = list(layout.runs.iterdir())
    pid = read_record(run_dir).pid
    first.send_signal(signal.SIGKILL)
    first.wait()
    watchers.start()
    wait_for(lambda: any(e["event"] == "adopted" for e in read_events(run_dir)), what="adopted")
    assert read_record(run_dir).pid == pid, "the same process, not a second run"
    gate.touch()
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="finished")


def test_supervisor_killed_too_is_lost_and_orphans_end(
    layout: Layout, config_file: Path, watchers
) -> None:
    import os

    import psutil

    from conftest import wait_for

    # Released, not only recorded `running`: a watcher killed between its running
    # commit and its `go` leaves a job that never ran, which recovery requeues.
    released = layout.root / "released"
    drop(layout, "orphan", f'+++\nagent = "bash"\n+++\ntouch {released}\nsleep 300\n')
    first = watchers.start()
    wait_for(released.exists, what="the job released")
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert record.state is JobState.RUNNING
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert record.supervisor_pid
    os.kill(record.supervisor_pid, signal.SIGKILL)
    assert run_watcher(layout, config_file) == 0
    final = read_record(run_dir)
    assert (final.state, final.reason) == (JobState.FAILED, "lost")
    assert record.pid
    wait_for(
        lambda: (
            not psutil.pid_exists(record.pid)
            or psutil.Process(record.pid).status() == psutil.STATUS_ZOMBIE
        ),
        what="orphaned job killed",
    )
