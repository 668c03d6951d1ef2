"""``idle_timeout`` on bash jobs: job.log not growing for that long ends the whole tree.

The supervisor watches job.log's size through its own descriptor; a silent job
gets the stop signal, the grace period, then SIGKILL for everything below it,
and fails ``idle_timeout``. Output keeps a job alive however long it runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil

from conftest import bash, drop
from hopper.store.layout import Layout


def only_record(layout: Layout) -> dict[str, object]:
    (run_dir,) = sorted(layout.runs.iterdir())
    return json.loads((run_dir / "job.json").read_text())


def events(layout: Layout) -> list[dict[str, object]]:
    (run_dir,) = sorted(layout.runs.iterdir())
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def alive_below(tmp_path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cwd"]):
        try:
            if (proc.info["cwd"] or "").startswith(str(tmp_path)) and (
                proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_silent_bash_job_is_ended_idle_timeout(layout: Layout, hopper, tmp_path: Path) -> None:
    # A child that ignores SIGTERM: only the SIGKILL after the grace period ends it.
    script = "echo started\n(trap '' TERM; exec sleep 300) &\nsleep 300\n"
    drop(layout, "silent", bash(script, idle_timeout="1s"))
    began = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    took = time.monotonic() - began
    record = only_record(layout)
    assert (record["state"], record["reason"]) == ("failed", "idle_timeout"), record["detail"]
    assert "wrote nothing to job.log for idle_timeout" in str(record["detail"])
    assert took < 20, f"took {took:.1f}s to end a job idle for 1s"
    names = [e["event"] for e in events(layout)]
    assert "idle_timeout" in names
    signals = [e.get("signal") for e in events(layout) if e["event"] == "signal_sent"]
    assert signals[:1] == ["SIGTERM"]  # the group first, as for a timeout
    # bash died of SIGTERM; the child that ignores it was ended after the grace
    (leftovers,) = [e for e in events(layout) if e["event"] == "leftovers_ended"]
    assert leftovers["processes"] == 1 and leftovers["killed"] == 1
    assert alive_below(tmp_path) == []


def test_output_keeps_a_bash_job_alive(layout: Layout, hopper) -> None:
    script = "for i in $(seq 12); do echo tick$i; sleep 0.25; done\n"  # 3 s, a line every 0.25 s
    drop(layout, "chatty", bash(script, idle_timeout="1s"))
    assert hopper("run", "--until-idle").returncode == 0
    record = only_record(layout)
    assert (record["state"], record["reason"]) == ("succeeded", "completed"), record["detail"]
    assert "idle_timeout" not in [e["event"] for e in events(layout)]


def test_bash_job_without_idle_timeout_may_be_silent(layout: Layout, hopper) -> None:
    drop(layout, "quiet", bash("sleep 1.5\necho done"))
    assert hopper("run", "--until-idle").returncode == 0
    assert only_record(layout)["reason"] == "completed"
