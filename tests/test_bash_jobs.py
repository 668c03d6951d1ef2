"""Bash jobs end to end through a real watcher process: states, logs, abort, timeout."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

from conftest import bash, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout


def only_job(layout: Layout) -> Path:
    dirs = [d for d in layout.runs.iterdir() if not d.name.startswith(".")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def job_dirs(layout: Layout) -> list[Path]:
    return sorted(d for d in layout.runs.iterdir() if not d.name.startswith("."))


def state_of(run_dir: Path) -> JobState | None:
    try:
        return read_record(run_dir).state
    except FileNotFoundError:
        return None


def test_success_failure_and_files(layout: Layout, hopper) -> None:
    drop(layout, "ok", bash("echo out; echo err >&2"), sub="team/a")
    drop(layout, "bad", bash("exit 7"))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    records = {read_record(d).name: read_record(d) for d in job_dirs(layout)}
    ok, bad = records["ok"], records["bad"]
    assert (ok.state, ok.reason, ok.exit_code) == (JobState.SUCCEEDED, Reason.COMPLETED, 0)
    assert (bad.state, bad.reason, bad.exit_code) == (JobState.FAILED, Reason.EXIT_NONZERO, 7)
    run_dir = layout.run_dir(ok.id)
    assert (run_dir / "job.log").read_text() == "out\nerr\n"
    assert ok.inbox_path == "inbox/team/a/ok.prompt.md"
    assert ok.processed_path == f"processed/team/a/ok.{ok.id}.prompt.md"
    assert (layout.root / ok.processed_path).is_file()
    assert not (run_dir / "prompt.md").exists()
    assert list(layout.inbox.rglob("*.prompt.md")) == []
    assert ok.pid and ok.pid_start_time and ok.started_at and ok.finished_at
    assert ok.duration_seconds is not None and ok.duration_seconds >= 0
    names = [e["event"] for e in read_events(run_dir)]
    assert names == ["claimed", "queued", "started", "exited", "finalized"]


def test_bash_block_is_the_script(layout: Layout, hopper) -> None:
    drop(
        layout,
        "fenced",
        bash("Some prose that is not a command.\n\n```bash\necho fenced\n```\nmore prose"),
    )
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    assert (run_dir / "job.log").read_text() == "fenced\n"
    assert read_record(run_dir).state is JobState.SUCCEEDED


def test_log_is_live(layout: Layout, watchers) -> None:
    """A tail -f sees lines as they are printed, not when the job ends."""
    gate = layout.root / "gate"
    drop(layout, "live", bash(f"echo first\nwhile [ ! -e {gate} ]; do sleep 0.05; done\necho last"))
    watchers.start()
    wait_for(
        lambda: (
            layout.runs.exists()
            and any(
                (d / "job.log").exists() and (d / "job.log").read_text() == "first\n"
                for d in job_dirs(layout)
            )
        ),
        what="the first line in job.log",
    )
    run_dir = only_job(layout)
    assert read_record(run_dir).state is JobState.RUNNING
    gate.touch()
    wait_for(lambda: state_of(run_dir) is JobState.SUCCEEDED, what="the job to finish")
    assert (run_dir / "job.log").read_text() == "first\nlast\n"


def test_abort_kills_whole_tree_including_setsid_escapee(layout: Layout, watchers) -> None:
    pids = layout.root / "pids"
    script = f"""
sleep 300 &
echo $! >> {pids}
setsid bash -c 'echo $$ >> {pids}; exec sleep 300' &
( trap '' TERM; sleep 300 ) &
echo $! >> {pids}
echo $$ >> {pids}
wait
"""
    drop(layout, "tree", bash(script))
    watchers.start()
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 4, what="4 pids")
    victims = [int(p) for p in pids.read_text().split()]
    assert all(psutil.pid_exists(p) for p in victims)
    run_dir = only_job(layout)
    (run_dir / "ABORT").touch()
    wait_for(lambda: state_of(run_dir) is JobState.ABORTED, timeout=15, what="aborted")
    record = read_record(run_dir)
    assert record.reason is Reason.ABORTED
    for pid in victims:
        wait_for(lambda p=pid: not _alive(p), timeout=5, what=f"pid {pid} gone")
    assert (run_dir / "ABORT").exists(), "ABORT is left in place"
    events = [e["event"] for e in read_events(run_dir)]
    assert "abort_requested" in events and "signal_sent" in events


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_abort_escalates_to_sigkill(layout: Layout, watchers) -> None:
    ready = layout.root / "ready"
    drop(layout, "stubborn", bash(f"trap '' TERM\ntouch {ready}\nwhile true; do sleep 0.05; done"))
    watchers.start()
    wait_for(ready.exists, what="job to start")
    run_dir = only_job(layout)
    started = time.monotonic()
    (run_dir / "ABORT").touch()
    wait_for(lambda: state_of(run_dir) is JobState.ABORTED, timeout=15, what="aborted")
    assert time.monotonic() - started >= 0.9, "kill_grace (1s) is honoured before SIGKILL"
    signals = [e.get("signal") for e in read_events(run_dir) if e["event"] == "signal_sent"]
    assert signals == ["SIGTERM", "SIGKILL"]
    assert read_record(run_dir).signal == 9


def test_timeout(layout: Layout, hopper) -> None:
    drop(layout, "slow", bash("echo start; sleep 30", timeout="0.5s"))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0
    record = read_record(only_job(layout))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.TIMEOUT)
    assert record.duration_seconds is not None and record.duration_seconds < 10


def test_abort_before_start(layout: Layout, config_file: Path, hopper) -> None:
    config_file.write_text(config_file.read_text() + "max_parallel = 1\n")
    gate = layout.root / "gate"
    drop(layout, "a-first", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    drop(layout, "b-second", bash("echo should never run"))
    from conftest import Watchers

    w = Watchers(layout, config_file)
    w.start()
    try:
        wait_for(lambda: len(job_dirs(layout)) == 2 and all(state_of(d) for d in job_dirs(layout)))
        second = next(d for d in job_dirs(layout) if "b-second" in d.name)
        assert state_of(second) is JobState.QUEUED
        (second / "ABORT").touch()
        wait_for(lambda: state_of(second) is JobState.ABORTED, what="queued job aborted")
        gate.touch()
        first = next(d for d in job_dirs(layout) if "a-first" in d.name)
        wait_for(lambda: state_of(first) is JobState.SUCCEEDED)
    finally:
        w.stop_all()
    assert not (second / "job.log").exists()


def test_heartbeat_refreshes(layout: Layout, watchers) -> None:
    gate = layout.root / "gate"
    drop(layout, "beat", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    watchers.start()
    wait_for(lambda: job_dirs(layout) and state_of(job_dirs(layout)[0]) is JobState.RUNNING)
    run_dir = only_job(layout)
    first = read_record(run_dir).heartbeat_at
    wait_for(lambda: read_record(run_dir).heartbeat_at != first, timeout=10, what="heartbeat")
    gate.touch()
    wait_for(lambda: state_of(run_dir) is JobState.SUCCEEDED)


def test_job_env_and_workdir(layout: Layout, tmp_path: Path, hopper) -> None:
    work = tmp_path / "work"
    work.mkdir()
    drop(layout, "env", bash('pwd; echo "$HOPPER_JOB_ID"; echo "$HOPPER_ROOT"', workdir=str(work)))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir = only_job(layout)
    lines = (run_dir / "job.log").read_text().split("\n")
    assert lines[:3] == [str(work), run_dir.name, str(layout.root)]


def test_user_text_never_reaches_a_shell(layout: Layout, hopper, tmp_path: Path) -> None:
    """Names and options with shell syntax are data: nothing is interpolated."""
    name = "x; touch pwned; $(touch pwned2) `touch pwned3` 'q\""
    drop(layout, name, bash("echo safe"))
    assert hopper("run", "--until-idle").returncode == 0
    assert not [p for p in tmp_path.rglob("pwned*")]
    record = read_record(only_job(layout))
    assert record.state is JobState.SUCCEEDED
    assert record.name == name


def test_status_json_matches_job_json(layout: Layout, hopper) -> None:
    drop(layout, "one", bash("true"))
    hopper("run", "--until-idle")
    out = hopper("status", "--json")
    assert out.returncode == 0
    listed = json.loads(out.stdout)
    on_disk = json.loads((only_job(layout) / "job.json").read_text())
    assert listed == [on_disk]


def test_watcher_sigterm_aborts_running_jobs(layout: Layout, watchers) -> None:
    drop(layout, "long", bash("sleep 300"))
    proc = watchers.start()
    wait_for(lambda: job_dirs(layout) and state_of(job_dirs(layout)[0]) is JobState.RUNNING)
    proc.terminate()
    assert proc.wait(timeout=20) == 0
    record = read_record(only_job(layout))
    assert (record.state, record.reason) == (JobState.ABORTED, Reason.SHUTDOWN)
    assert not _alive(record.pid or 0)


def test_many_jobs_in_parallel(layout: Layout, hopper) -> None:
    for i in range(30):
        drop(layout, f"job-{i:02d}", bash(f"echo {i}"))
    assert hopper("run", "--until-idle").returncode == 0
    records = [read_record(d) for d in job_dirs(layout)]
    assert len(records) == 30
    assert all(r.state is JobState.SUCCEEDED for r in records)
    assert sorted(int((layout.run_dir(r.id) / "job.log").read_text()) for r in records) == list(
        range(30)
    )
    assert os.listdir(layout.inbox) == []
