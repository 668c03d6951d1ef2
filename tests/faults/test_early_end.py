"""A machine crash between a job's exit.json rename and its fsyncs.

The supervisor says ``ended`` once exit.json is in place and before its fsyncs
(proc/supervise.py ``Supervisor.record``); the watcher frees the job's slot then
but files it only after ``done``. A crash in that window may leave exit.json
whole, empty (renamed in, its data never written back) or absent: whole, the
restarted watcher files the job from it; empty or absent, it files the job lost,
as it does after a crash before exit.json was written. Simulated: the job ends
while its watcher is down, then exit.json is made what such a crash would leave.
"""

from __future__ import annotations

import signal

import psutil
import pytest

from conftest import drop, wait_for
from faults.test_crash_points import run_watcher
from hopper.core.states import JobState
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


@pytest.mark.parametrize("left", ["whole", "empty", "absent"])
def test_a_crash_before_exit_json_is_durable_files_the_job_from_it_or_lost(
    layout: Layout, config_file, watchers, left: str
) -> None:
    gate = layout.root / "gate"
    drop(
        layout,
        "early",
        f'+++\nagent = "bash"\n+++\necho before\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n',
    )
    first = watchers.start()
    wait_for(
        lambda: any(
            (d / "job.log").exists() and "before" in (d / "job.log").read_text()
            for d in layout.runs.iterdir()
        ),
        what="job running",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert record.supervisor_pid
    supervisor = psutil.Process(record.supervisor_pid)
    gate.touch()
    supervisor.wait(timeout=30)  # it recorded the exit and, its fork server gone, exited
    exit_json = run_dir / "exit.json"
    assert exit_json.exists()
    if left == "empty":
        exit_json.write_bytes(b"")
    elif left == "absent":
        exit_json.unlink()
    assert read_record(run_dir).state is JobState.RUNNING
    assert run_watcher(layout, config_file) == 0
    final = read_record(run_dir)
    if left == "whole":
        assert final.state is JobState.SUCCEEDED
    else:
        assert (final.state, final.reason) == (JobState.FAILED, "lost")
