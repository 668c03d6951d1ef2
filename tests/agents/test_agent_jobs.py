"""Claude and Codex jobs end to end: a real watcher, the real CLIs, the scripted server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest
from agentjobs import MATRIX, Hopper, agent_config, jobs, prompt, versioned

from conftest import Watchers, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from modelserver import ModelServer, error, last_user_text, text, tool


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def events(run_dir: Path) -> list[str]:
    return [e["event"] for e in read_events(run_dir)]


@pytest.mark.parametrize("agent_at", MATRIX)
def test_tool_call_creates_file_and_succeeds(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([tool("touch made.txt"), text("Created made.txt.")])
    drop(layout, "make", prompt(agent, "Create made.txt", workdir=str(work)))
    started = time.monotonic()
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert (work / "made.txt").exists()
    assert (run_dir / "result.md").read_text() == "Created made.txt.\n"
    assert record.result_path == "result.md"
    assert record.session_id
    assert record.usage is not None and record.usage.output_tokens
    assert record.permission_denials == []
    log = (run_dir / "job.log").read_text()
    assert "touch made.txt" in log and "[tool" in log and "Created made.txt." in log
    raw = (run_dir / "agent.jsonl").read_text().splitlines()
    assert raw and all(json.loads(line) for line in raw)
    names = events(run_dir)
    assert "agent_started" in names and "agent_outcome" in names
    # the prompt went in on stdin, never on the command line
    assert "Create made.txt" not in json.dumps(
        json.loads((run_dir / "agent.spec.json").read_text())
    )
    assert (last_user_text(srv.model_requests()[0].body) or "").strip().endswith("Create made.txt")


def test_claude_denied_tools_fail_permission_denied(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url, claude={"permission_mode": "default"})
    srv.script([tool("touch made.txt"), text("I could not.")])
    drop(layout, "denied", prompt("claude", "Create made.txt", workdir=str(work)))
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(jobs(layout)[0])
    assert (record.state, record.reason, record.error_kind) == (
        JobState.FAILED,
        Reason.AGENT_ERROR,
        "permission_denied",
    )
    assert record.permission_denials and "touch made.txt" in record.permission_denials[0]
    assert not (work / "made.txt").exists()


@pytest.mark.parametrize("agent_at", MATRIX)
def test_session_second_prompt_carries_first_exchange(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([text("First answer."), text("Second answer.")])
    drop(layout, "a-first", prompt(agent, "First prompt", workdir=str(work), session="talk"))
    drop(layout, "b-second", prompt(agent, "Second prompt", workdir=str(work), session="talk"))
    assert hopper("run", "--until-idle").returncode == 0
    first, second = (read_record(d) for d in jobs(layout))
    assert first.state is second.state is JobState.SUCCEEDED, (first.detail, second.detail)
    assert first.session_id and first.session_id == second.session_id
    assert first.session == second.session == "talk"
    body = srv.model_requests()[1].body
    assert (last_user_text(body) or "").strip() == "Second prompt"
    flat = json.dumps(body)
    assert "First prompt" in flat and "First answer." in flat
    stored = json.loads((layout.root / "sessions" / "talk.json").read_text())
    assert stored["session_id"] == first.session_id and stored["agent"] == agent
    # one at a time: the second started after the first finished
    assert second.started_at and first.finished_at and second.started_at >= first.finished_at


def test_abort_mid_tool_kills_cli_and_tool(
    layout: Layout, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    pidfile = work / "tool.pid"
    srv.script([tool(f"echo $$ > {pidfile}; exec sleep 300"), text("never")])
    drop(layout, "abort", prompt("claude", "Sleep a while", workdir=str(work)))
    w = Watchers(layout, config_file)
    w.start()
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the tool to run")
        (run_dir,) = jobs(layout)
        tool_pid = int(pidfile.read_text())
        cli = [
            p
            for p in psutil.process_iter(["cmdline"])
            if "claude" in " ".join(p.info["cmdline"] or []) and p.pid != tool_pid
        ]
        (run_dir / "ABORT").touch()
        wait_for(lambda: read_record(run_dir).state is JobState.ABORTED, what="aborted")
    finally:
        w.stop_all()
    assert read_record(run_dir).reason is Reason.ABORTED
    for pid in [tool_pid, *(p.pid for p in cli)]:
        wait_for(lambda p=pid: not _alive(p), timeout=5, what=f"pid {pid} gone")
    assert "SIGINT" in [e.get("signal") for e in read_events(run_dir)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_rate_limit_is_retried_then_succeeds(
    agent: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    agent_config(config_file, tmp_path, srv.url)  # CLI retries 0: hopper's driver retries
    srv.script([error(429), text("Recovered.")])
    drop(layout, "limited", prompt(agent, "hi", workdir=str(work)))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert record.state is JobState.SUCCEEDED, record.detail
    assert (run_dir / "result.md").read_text() == "Recovered.\n"
    retries = [e for e in read_events(run_dir) if e["event"] == "agent_retry"]
    assert len(retries) == 1 and retries[0]["kind"] == "rate_limit"
    assert len(srv.model_requests()) == 2


@pytest.mark.parametrize("agent_at", MATRIX)
def test_auth_error_fails_fast_without_retry(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([error(401, times=10)])
    drop(layout, "noauth", prompt(agent, "hi", workdir=str(work)))
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    assert time.monotonic() - started < 20
    record = read_record(jobs(layout)[0])
    assert (record.state, record.reason, record.error_kind) == (
        JobState.FAILED,
        Reason.AGENT_ERROR,
        "auth",
    )
    assert len(srv.model_requests()) == 1
    assert "agent_retry" not in events(jobs(layout)[0])


def test_check_loop_nudges_once_then_succeeds(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([text("Done, I think."), tool("touch fixed.txt"), text("Fixed it.")])
    check = ["test", "-e", "fixed.txt"]
    drop(layout, "checked", prompt("claude", "Make fixed.txt", workdir=str(work), check=check))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert record.nudges == 1
    names = events(run_dir)
    assert names.count("nudge") == 1 and "check_failed" in names and "check_passed" in names
    nudge_body = srv.model_requests()[1].body
    assert "test -e fixed.txt" in (last_user_text(nudge_body) or "")
    assert (run_dir / "result.md").read_text() == "Fixed it.\n"


def test_check_still_failing_after_max_nudges(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([text("one"), text("two")])
    drop(
        layout,
        "never",
        prompt("claude", "x", workdir=str(work), check=["false"], max_nudges=1),
    )
    assert hopper("run", "--until-idle").returncode == 0
    record = read_record(jobs(layout)[0])
    assert (record.state, record.reason, record.nudges) == (
        JobState.FAILED,
        Reason.CHECK_FAILED,
        1,
    )


def test_idle_timeout_stops_a_silent_agent(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([tool("python3 -c 'import time; time.sleep(30)'"), text("late")])
    drop(layout, "quiet", prompt("claude", "x", workdir=str(work), idle_timeout="5s"))
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    assert time.monotonic() - started < 25
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.IDLE_TIMEOUT), record.detail
    assert "idle_timeout" in events(run_dir)


def test_idle_nudge_resumes_the_session(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([tool("python3 -c 'import time; time.sleep(30)'"), text("Done after the nudge.")])
    drop(
        layout,
        "nudged",
        prompt("claude", "x", workdir=str(work), idle_timeout="5s", on_idle="nudge", max_nudges=1),
    )
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    assert time.monotonic() - started < 40
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert record.nudges == 1
    assert "nudge" in events(run_dir)
    assert "printed nothing" in (last_user_text(srv.model_requests()[-1].body) or "")
    assert (run_dir / "result.md").read_text() == "Done after the nudge.\n"


def test_secrets_never_written(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    envs = agent_config(config_file, tmp_path, srv.url)
    secret = envs["claude"]["ANTHROPIC_API_KEY"]
    srv.script([tool("touch made.txt"), text("ok")])
    drop(layout, "secret", prompt("claude", "go", workdir=str(work)))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0
    assert secret not in result.stderr + result.stdout
    (run_dir,) = jobs(layout)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    status = hopper("status", "--json")
    assert secret not in status.stdout
