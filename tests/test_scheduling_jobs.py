"""Scheduling end to end through real watcher processes: priorities, slots, PAUSE,
``hopper wait``, ``hopper priority``, dependencies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import bash, drop, hopper_cmd, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import iter_run_dirs, read_events, read_record
from hopper.store.layout import Layout


def records(layout: Layout) -> dict[str, JobRecord]:
    out = {}
    for d in iter_run_dirs(layout.runs):
        if (d / "job.json").exists():
            rec = read_record(d)
            out[rec.name] = rec
    return out


def timed(log: Path, name: str, seconds: float = 0.4) -> str:
    """A job that appends its start and end times (and its name) to ``log``."""
    return (
        f'echo "start $(date +%s.%N) {name}" >> {log}\n'
        f"sleep {seconds}\n"
        f'echo "end $(date +%s.%N) {name}" >> {log}\n'
    )


def max_overlap(log: Path, only: set[str] | None = None) -> int:
    marks = []
    for line in log.read_text().splitlines():
        kind, ts, name = line.split()
        if only is None or name in only:
            marks.append((float(ts), 1 if kind == "start" else -1))
    best = now = 0
    for _, delta in sorted(marks, key=lambda m: (m[0], m[1])):
        now += delta
        best = max(best, now)
    return best


def starts(log: Path) -> list[str]:
    return [line.split()[2] for line in log.read_text().splitlines() if line.startswith("start")]


def test_priority_orders_and_hopper_priority_reorders(layout: Layout, config_file: Path, hopper):
    config_file.write_text(config_file.read_text() + "max_parallel = 1\n")
    log = layout.root / "order"
    (layout.root / "PAUSE").touch()
    for name, prio in (("low", 1), ("high", 5), ("mid", 3), ("later", 0)):
        drop(
            layout,
            name,
            bash(timed(log, name, 0), priority=str(prio)).replace(f'"{prio}"', str(prio)),
        )
    assert hopper("run", "--until-idle").returncode == 0  # claims, holds everything: paused
    assert {r.state for r in records(layout).values()} == {JobState.QUEUED}
    result = hopper("priority", "later", "9")
    assert result.returncode == 0, result.stderr
    assert hopper("resume").returncode == 0
    assert hopper("run", "--until-idle").returncode == 0
    assert starts(log) == ["later", "high", "mid", "low"]
    later = records(layout)["later"]
    assert later.priority == 9
    changed = [e for e in read_events(layout.run_dir(later.id)) if e["event"] == "priority_changed"]
    assert changed and changed[0]["old"] == 0 and changed[0]["new"] == 9
    assert hopper("priority", "later", "1").returncode == 1  # finished: nothing to reorder


def test_agent_and_group_limits(layout: Layout, config_file: Path, hopper) -> None:
    config_file.write_text(
        config_file.read_text()
        + "max_parallel = 8\n[limits.agents]\nbash = 2\n[limits.groups]\nnight = 1\n"
    )
    log = layout.root / "times"
    for i in range(4):
        drop(layout, f"day{i}", bash(timed(log, f"day{i}")), sub="day")
        drop(layout, f"night{i}", bash(timed(log, f"night{i}")), sub="night")
    assert hopper("run", "--until-idle").returncode == 0
    assert all(r.state is JobState.SUCCEEDED for r in records(layout).values())
    assert max_overlap(log) == 2, log.read_text()  # bash = 2 overall, and really parallel
    assert max_overlap(log, {f"night{i}" for i in range(4)}) == 1
    assert records(layout)["night0"].group == "night"


def test_pause_group_drains_and_resume(layout: Layout, watchers, hopper) -> None:
    assert hopper("pause", "slow").returncode == 0
    assert (layout.inbox / "slow" / "PAUSE").exists()
    drop(layout, "held", bash("echo held"), sub="slow")
    drop(layout, "free", bash("echo free"), sub="fast")
    watchers.start()
    wait_for(
        lambda: (
            records(layout).get("free", None) is not None
            and records(layout)["free"].state is JobState.SUCCEEDED
        ),
        what="free done",
    )
    wait_for(lambda: "held" in records(layout), what="held claimed")
    assert records(layout)["held"].state is JobState.QUEUED
    assert hopper("resume", "slow").returncode == 0
    result = hopper("wait", "held", "--timeout", "30")
    assert result.returncode == 0, result.stdout + result.stderr
    assert records(layout)["held"].state is JobState.SUCCEEDED


def test_pause_all_keeps_running_jobs_running(layout: Layout, watchers, hopper) -> None:
    gate = layout.root / "gate"
    drop(layout, "first", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    watchers.start()
    wait_for(
        lambda: "first" in records(layout) and records(layout)["first"].state is JobState.RUNNING,
        what="first running",
    )
    assert hopper("pause").returncode == 0
    drop(layout, "second", bash("echo second"))
    wait_for(lambda: "second" in records(layout), what="second claimed")
    gate.touch()
    wait_for(lambda: records(layout)["first"].state is JobState.SUCCEEDED, what="first done")
    assert records(layout)["second"].state is JobState.QUEUED
    assert hopper("resume").returncode == 0
    assert hopper("wait", "--all", "--timeout", "30").returncode == 0


def test_wait_exit_codes(layout: Layout, watchers, hopper) -> None:
    gate = layout.root / "gate"
    hold = f"while [ ! -e {gate} ]; do sleep 0.05; done\n"
    drop(layout, "good", bash(hold + "true"))
    drop(layout, "bad", bash(hold + "exit 3"))
    watchers.start()
    wait_for(lambda: len(records(layout)) == 2, what="both claimed")
    assert hopper("wait", "--all", "--timeout", "0.5").returncode == 3  # timed out
    waiter = subprocess.Popen(
        hopper_cmd("wait", "--all", "--timeout", "30", "--root", str(layout.root)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiter.stderr is not None
    assert "waiting for 2 active job(s)" in waiter.stderr.readline()
    gate.touch()  # --all judges every job it saw active
    out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 1, out
    assert "exit_nonzero" in out and "completed" in out
    assert hopper("wait", "good").returncode == 0
    assert hopper("wait", "bad").returncode == 1
    assert hopper("wait").returncode == 2


def test_dependency_chain_runs_in_order(layout: Layout, hopper) -> None:
    log = layout.root / "order"
    drop(layout, "c", bash(timed(log, "c", 0), after='["b"]').replace('"["b"]"', '["b"]'))
    drop(layout, "b", bash(timed(log, "b", 0)).replace("+++\n", '+++\nafter = ["a"]\n', 1))
    drop(layout, "a", bash(timed(log, "a", 0.2)))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    assert starts(log) == ["a", "b", "c"]
    assert all(r.state is JobState.SUCCEEDED for r in records(layout).values())


def with_after(script: str, *after: str) -> str:
    refs = ", ".join(f'"{a}"' for a in after)
    return bash(script).replace("+++\n", f"+++\nafter = [{refs}]\n", 1)


def test_dependency_failure_propagates(layout: Layout, hopper) -> None:
    drop(layout, "a", bash("exit 1"))
    drop(layout, "b", with_after("echo b", "a"))
    drop(layout, "c", with_after("echo c", "b"))
    assert hopper("run", "--until-idle").returncode == 0
    recs = records(layout)
    assert recs["a"].reason is Reason.EXIT_NONZERO
    assert (recs["b"].state, recs["b"].reason) == (JobState.FAILED, Reason.DEPENDENCY_FAILED)
    assert "a (" in (recs["b"].detail or "") and recs["a"].id in (recs["b"].detail or "")
    assert recs["c"].reason is Reason.DEPENDENCY_FAILED and "b (" in (recs["c"].detail or "")
    assert not (layout.run_dir(recs["b"].id) / "job.log").exists()  # never ran
    assert (layout.root / (recs["c"].processed_path or "x")).is_file()


def test_dependency_cycle_and_unknown(layout: Layout, config_file: Path, hopper) -> None:
    config_file.write_text(config_file.read_text() + 'dependency_timeout = "1s"\n')
    drop(layout, "x", with_after("echo x", "y"))
    drop(layout, "y", with_after("echo y", "x"))
    drop(layout, "lonely", with_after("echo lonely", "ghost"))
    assert hopper("run", "--until-idle").returncode == 0
    recs = records(layout)
    assert recs["x"].reason is Reason.DEPENDENCY_CYCLE and recs["y"].id in (recs["x"].detail or "")
    assert recs["y"].reason is Reason.DEPENDENCY_CYCLE
    assert recs["lonely"].reason is Reason.DEPENDENCY_UNKNOWN
    assert "ghost" in (recs["lonely"].detail or "")


def test_submit_after_and_priority(layout: Layout, hopper) -> None:
    result = hopper(
        "submit",
        "-",
        "--json",
        "--agent",
        "bash",
        "--name",
        "second",
        "--after",
        "first",
        "--priority",
        "3",
        input="echo second\n",
    )
    assert result.returncode == 0, result.stderr
    text = Path(json.loads(result.stdout)["path"]).read_text()
    assert 'after = ["first"]' in text and "priority = 3" in text
    hopper("submit", "-", "--agent", "bash", "--name", "first", input="echo first\n")
    assert hopper("run", "--until-idle").returncode == 0
    recs = records(layout)
    assert recs["second"].started_at and recs["first"].finished_at
    assert recs["second"].started_at >= recs["first"].finished_at
    assert recs["second"].after == ["first"] and recs["second"].priority == 3
