"""Resource accounting and limits, end to end through a real watcher and supervisor."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from conftest import bash, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

M = 1 << 20
PY = sys.executable
BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.5: pass"


@pytest.fixture(autouse=True)
def _sample_often(config_file: Path) -> None:
    config_file.write_text(config_file.read_text() + 'sample_interval = "0.2s"\n')


def only_job(layout: Layout) -> Path:
    dirs = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_memory_limit_ends_the_tree(layout: Layout, hopper) -> None:
    pids = layout.root / "pids"
    script = (
        f'{PY} -c \'import os; open("{pids}", "w").write(str(os.getpid())); '
        "x = bytearray(300 * 1024 * 1024); import time; time.sleep(30)'"
    )
    drop(layout, "hog", bash(script, memory_max="100M"))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.MEMORY_LIMIT)
    assert record.memory_max_bytes == 100 * M
    assert record.duration_seconds is not None and record.duration_seconds < 10
    assert "memory_max" in (record.detail or "")
    # The sample that fired may catch the 300 MiB allocation half-way: what is
    # certain is that the recorded peak is past the limit that fired.
    assert record.resources is not None and record.resources.peak_rss_bytes > 100 * M
    assert not _alive(int(pids.read_text()))
    exceeded = [e for e in read_events(run_dir) if e["event"] == "limit_exceeded"]
    assert len(exceeded) == 1
    assert exceeded[0]["limit"] == "memory" and exceeded[0]["rss_bytes"] > 100 * M
    assert exceeded[0]["memory_max_bytes"] == 100 * M
    signals = [e.get("signal") for e in read_events(run_dir) if e["event"] == "signal_sent"]
    assert signals[0] == "SIGTERM"


def test_output_limit_ends_the_job_and_caps_the_log(layout: Layout, hopper) -> None:
    drop(
        layout,
        "chatty",
        bash("yes 'all work and no play' | head -c 20M\nsleep 30", output_max="1M"),
    )
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.OUTPUT_LIMIT)
    assert record.duration_seconds is not None and record.duration_seconds < 10
    assert record.resources is not None and record.resources.output_bytes == 20 * M
    log = (run_dir / "job.log").read_bytes()
    assert len(log) < M + 200
    assert log.endswith(b"the job wrote 20971520 bytes\n")
    exceeded = [e for e in read_events(run_dir) if e["event"] == "limit_exceeded"]
    assert [e["limit"] for e in exceeded] == ["output"]
    assert exceeded[0]["output_bytes"] > M and exceeded[0]["output_max_bytes"] == M


def test_cpu_of_exited_children_is_counted(layout: Layout, hopper) -> None:
    """0.5 s in a child the shell waits for, 0.5 s in an orphan the supervisor reaps."""
    script = f"""
{PY} -c '{BURN}'
( {PY} -c '{BURN}' & )
sleep 1.5
"""
    drop(layout, "burn", bash(script))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_job(layout))
    assert record.reason is Reason.COMPLETED, record.detail
    assert record.resources is not None
    assert 0.95 <= record.resources.cpu_seconds < 2.5, record.resources
    assert record.resources.peak_rss_bytes > M
    assert record.resources.rss_bytes is None and record.resources.processes is None


def test_short_peak_is_recorded(layout: Layout, hopper) -> None:
    """A spike shorter than a sample is still caught (the reaped children's maximum)."""
    drop(layout, "spike", bash(f"{PY} -c 'x = bytearray(80 * 1024 * 1024)'\necho done"))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(only_job(layout))
    assert record.state is JobState.SUCCEEDED
    assert record.resources is not None and record.resources.peak_rss_bytes > 80 * M
    assert record.resources.output_bytes == len("done\n")
    assert (record.memory_max_bytes, record.output_max_bytes) == (6 << 30, 100 * M)


def test_live_figures_while_running(layout: Layout, watchers) -> None:
    gate = layout.root / "gate"
    script = (
        "echo hello\n"
        f"{PY} -c 'import os, time; x = bytearray(60 * 1024 * 1024)\n"
        f'while not os.path.exists("{gate}"): time.sleep(0.05)\''
    )
    drop(layout, "live", bash(script))
    watchers.start()
    wait_for(lambda: layout.runs.exists() and any(layout.runs.iterdir()), what="a run dir")
    run_dir = only_job(layout)

    def live_figures() -> bool:
        try:
            rec = read_record(run_dir)
        except (FileNotFoundError, ValueError):
            return False
        res = rec.resources
        return (
            rec.state is JobState.RUNNING
            and res is not None
            and (res.rss_bytes or 0) > 60 * M
            and (res.processes or 0) >= 1
        )

    wait_for(live_figures, timeout=15, what="live resources in job.json")
    live = read_record(run_dir).resources
    assert live is not None and live.output_bytes == len("hello\n")
    gate.touch()
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="the job to end")
    final = read_record(run_dir).resources
    assert final is not None and final.peak_rss_bytes >= live.peak_rss_bytes > 60 * M
    assert final.cpu_seconds >= live.cpu_seconds
    assert final.rss_bytes is None
