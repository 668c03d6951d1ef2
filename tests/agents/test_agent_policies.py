"""Agent policies end to end: on_error (fail, pause), on_dead (resume, fail), the idle stop
of a custom agent's whole process group."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from agentjobs import Hopper, agent_config, jobs, prompt

from conftest import drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from modelserver import ModelServer, error, text


def test_on_error_fail_does_not_rerun_a_rate_limit(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([error(429), text("never")])
    drop(layout, "limited", prompt("claude", "hi", on_error="fail"))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason, record.error_kind) == (
        JobState.FAILED,
        Reason.AGENT_ERROR,
        "rate_limit",
    )
    assert "agent_retry" not in [e["event"] for e in read_events(run_dir)]
    assert len(srv.model_requests()) == 1


def test_on_error_pause_holds_the_sessions_next_prompt_and_status_says_why(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([error(401), text("Second answer.")])
    drop(layout, "a-first", prompt("claude", "First", session="s", on_error="pause"))
    drop(layout, "b-second", prompt("claude", "Second", session="s"))
    assert hopper("run", "--until-idle").returncode == 0  # drains: the held job does not block
    first_dir, second_dir = jobs(layout)
    first, second = read_record(first_dir), read_record(second_dir)
    assert (first.state, first.reason, first.error_kind) == (
        JobState.FAILED,
        Reason.AGENT_ERROR,
        "auth",
    )
    assert first.session_paused is True  # a completion hook can notify on it
    assert second.state is JobState.QUEUED
    marker = layout.root / "sessions" / "s.paused"
    assert marker.exists()
    status = hopper("status")
    assert status.returncode == 0
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith("session s paused:"))
    assert first.id in line and "auth" in line and f"rm {marker}" in line
    assert len(srv.model_requests()) == 1
    # a person looked; removing the marker lets the session go on
    marker.unlink()
    assert hopper("run", "--until-idle").returncode == 0
    second = read_record(second_dir)
    assert second.state is JobState.SUCCEEDED, second.detail
    assert "session s paused" not in hopper("status").stdout


DYING_AGENT = textwrap.dedent(
    """\
    import json, sys
    session_id, message = sys.argv[1], open(sys.argv[2]).read()
    if not session_id:  # the first run: says who it is, then dies without a result
        print(json.dumps({"type": "system", "subtype": "init", "session_id": "conv-1"}))
        sys.exit(3)
    print(json.dumps({"type": "system", "subtype": "init", "session_id": session_id}))
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "session_id": session_id, "num_turns": 1,
                      "result": "resumed after: " + message.splitlines()[0]}))
    """
)


@pytest.mark.parametrize("on_dead", ["resume", "fail"])
def test_on_dead(
    on_dead: str, layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path
) -> None:
    script = tmp_path / "dying_agent.py"
    script.write_text(DYING_AGENT)
    argv = [sys.executable, str(script), "{session_id}", "{prompt_file}"]
    fake = {"argv": argv, "format": "claude-jsonl"}
    agent_config(config_file, tmp_path, "http://127.0.0.1:9", fake=fake)
    drop(layout, "dies", prompt("fake", "Do it", on_dead=on_dead, max_nudges=1))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    if on_dead == "fail":
        assert (record.state, record.reason) == (JobState.FAILED, Reason.AGENT_ERROR)
        assert "without reporting a result" in (record.detail or "")
        return
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert record.nudges == 1 and record.session_id == "conv-1"
    (nudge,) = [e for e in read_events(run_dir) if e["event"] == "nudge"]
    assert nudge["why"] == "dead" and nudge["exit_code"] == 3
    assert (run_dir / "result.md").read_text().startswith("resumed after: Your previous run ended")


CHILD_HOLDS_STDOUT = textwrap.dedent(
    """\
    import signal, subprocess, sys
    child = subprocess.Popen(["sleep", "300"])  # inherits stdout: the pipe stays open
    with open(sys.argv[1], "w") as f:
        f.write(str(child.pid))
    print("working on it", flush=True)
    signal.pause()  # silent until the idle stop's signal ends it
    """
)


def test_idle_stop_ends_the_custom_agents_whole_group(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path
) -> None:
    """A child holding stdout kept a custom-agent job alive 26 s past the idle stop."""
    script, pidfile = tmp_path / "agent.py", tmp_path / "child.pid"
    script.write_text(CHILD_HOLDS_STDOUT)
    argv = [sys.executable, str(script), str(pidfile)]
    agent_config(config_file, tmp_path, "http://127.0.0.1:9", fake={"argv": argv})
    drop(layout, "quiet", prompt("fake", "x", idle_timeout="2s"))
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    took = time.monotonic() - started
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.IDLE_TIMEOUT), record.detail
    assert took < 15, f"the job outlived its idle stop: {took:.1f}s"
    child = int(pidfile.read_text())
    wait_for(lambda: not _alive(child), timeout=5, what="the child to be gone")
    stop = [e for e in read_events(run_dir) if e["event"] == "idle_timeout"]
    assert len(stop) == 1


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
