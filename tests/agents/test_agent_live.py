"""Agent jobs as people run them: sessions without a workdir, errors judged live, live text.

Real watcher, real CLIs (every installed version where versions differ), the
scripted model server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agentjobs import CLAUDES, CODEXES, MATRIX, Hopper, agent_config, jobs, prompt, versioned

from conftest import Watchers, drop, wait_for
from hopper.core.states import TERMINAL_STATES, JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from modelserver import ModelServer, error, last_user_text, text


@pytest.mark.parametrize("agent_at", MATRIX)
def test_session_without_workdir_continues_one_conversation(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
) -> None:
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([text("First answer."), text("Second answer.")])
    drop(layout, "a-first", prompt(agent, "First prompt", session="talk"))
    drop(layout, "b-second", prompt(agent, "Second prompt", session="talk"))
    assert hopper("run", "--until-idle").returncode == 0
    first, second = (read_record(d) for d in jobs(layout))
    assert first.state is second.state is JobState.SUCCEEDED, (first.detail, second.detail)
    assert first.session_id and first.session_id == second.session_id
    body = srv.model_requests()[1].body
    assert (last_user_text(body) or "").strip() == "Second prompt"
    flat = json.dumps(body)
    assert "First prompt" in flat and "First answer." in flat
    # one directory for the whole session, under the root, recorded in the map
    folder = layout.root / "sessions" / "talk" / "work"
    stored = json.loads((layout.root / "sessions" / "talk.json").read_text())
    assert stored["workdir"] == str(folder) and folder.is_dir()
    for run_dir in jobs(layout):
        spec = json.loads((run_dir / "agent.spec.json").read_text())
        assert spec["workdir"] == str(folder)
        # job.json and the started event say where the job ran, not runs/<id>/work
        assert read_record(run_dir).workdir == str(folder)
        started = [e for e in read_events(run_dir) if e["event"] == "started"]
        assert started[0]["workdir"] == str(folder)


def test_session_prompt_naming_another_workdir_is_a_bad_prompt(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    other = tmp_path / "elsewhere"
    other.mkdir()
    srv.script([text("First answer."), text("never")])
    drop(layout, "a-first", prompt("claude", "First prompt", session="talk"))
    drop(layout, "b-second", prompt("claude", "Second", session="talk", workdir=str(other)))
    assert hopper("run", "--until-idle").returncode == 0
    first, second = (read_record(d) for d in jobs(layout))
    assert first.state is JobState.SUCCEEDED, first.detail
    assert (second.state, second.reason) == (JobState.FAILED, Reason.BAD_PROMPT)
    assert "session 'talk' runs in" in (second.detail or "")
    assert str(other) in (second.detail or "") and "drop the workdir key" in (second.detail or "")
    assert len(srv.model_requests()) == 1


@pytest.mark.parametrize("agent_at", MATRIX)
def test_auth_error_stops_a_retrying_cli_at_once(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
) -> None:
    """The CLI would retry a 401 for minutes (Claude: 10 times, backing off); hopper stops it."""
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, claude_retries=10, codex_retries=10, **versions)
    srv.script([error(401, times=50)])
    drop(layout, "noauth", prompt(agent, "hi"))
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    took = time.monotonic() - started
    assert took < 30
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason, record.error_kind) == (
        JobState.FAILED,
        Reason.AGENT_ERROR,
        "auth",
    ), record.detail
    assert record.agent_state == "api_error"
    assert len(srv.model_requests()) <= 3  # stopped at the first retry, not after ten
    live = [e for e in read_events(run_dir) if e["event"] == "agent_api_error"]
    assert live and live[0]["error_kind"] == "auth" and live[0]["action"] == "stop"
    assert "agent_retry" not in [e["event"] for e in read_events(run_dir)]


def test_rate_limit_hopper_takes_over_and_respects_retry_after(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    agent_config(config_file, tmp_path, srv.url, claude_retries=10)
    srv.script([error(429, retry_after=2), text("Recovered.")])
    drop(layout, "limited", prompt("claude", "hi"))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert record.state is JobState.SUCCEEDED, record.detail
    assert record.error_kind is None and record.agent_state == "idle"
    events = read_events(run_dir)
    (taken,) = [e for e in events if e["event"] == "agent_api_error"]
    assert (taken["error_kind"], taken["action"]) == ("rate_limit", "hopper")
    (retry,) = [e for e in events if e["event"] == "agent_retry"]
    # hopper's backoff is 0.1 s here; the server's retry-after (2 s) wins
    assert retry["kind"] == "rate_limit" and retry["delay_seconds"] >= 2
    assert len(srv.model_requests()) == 2
    assert (run_dir / "result.md").read_text() == "Recovered.\n"


@pytest.mark.parametrize("agent_at", CLAUDES)
def test_streaming_answer_reaches_the_log_line_by_line(
    agent_at: str, layout: Layout, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    """Six lines, 2.5 s apart: each is in job.log while the next is on its way, and the
    stream counts as activity (idle_timeout 10 s does not stop a 15 s answer).

    The idle clock runs from the agent's start: under load Claude Code takes over 5 s
    to print its first line, so the timeout leaves room for that and still ends well
    before the answer does."""
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    answer = "".join(f"tick{i}\n" for i in range(6))
    srv.script([text(answer, delay=2.5, chunks=6)])
    drop(layout, "stream", prompt(agent, "Count", idle_timeout="10s"))
    w = Watchers(layout, config_file)
    w.start()
    try:
        wait_for(lambda: jobs(layout), what="the job to be claimed")
        (run_dir,) = jobs(layout)
        log = run_dir / "job.log"

        def logged() -> str:
            return log.read_text() if log.exists() else ""

        wait_for(lambda: "  tick1" in logged(), timeout=40, what="tick1 in job.log")
        assert "tick5" not in logged()  # the rest is still streaming
        wait_for(
            lambda: read_record(run_dir).agent_state == "working" or "tick4" in logged(),
            what="agent_state working",
        )
        assert "tick5" not in logged(), "agent_state was not 'working' while the text streamed"
        last = read_record(run_dir).last_activity_at
        assert last is not None
        wait_for(lambda: read_record(run_dir).state in TERMINAL_STATES, timeout=40, what="the end")
    finally:
        w.stop_all()
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    lines = logged().splitlines()
    for i in range(6):
        assert lines.count(f"  tick{i}") == 1, lines  # streamed once, not printed again
    assert (run_dir / "result.md").read_text() == answer


@pytest.mark.parametrize("agent_at", CLAUDES)
def test_an_answer_without_a_newline_reaches_the_log_as_it_streams(
    agent_at: str, layout: Layout, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    """One long line, 12 pieces 1 s apart: what arrived is in job.log within about a
    second (not only at the end of the line), agent_state is ``working`` meanwhile, and
    the finished line is in the log once, whole."""
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    words = [f"w{i:02d}x " for i in range(12)]
    answer = "".join(words).strip()
    srv.script([text(answer, delay=1.0, chunks=12)])
    drop(layout, "oneline", prompt(agent, "Talk"))
    w = Watchers(layout, config_file)
    w.start()
    try:
        wait_for(lambda: jobs(layout), what="the job to be claimed")
        (run_dir,) = jobs(layout)
        log = run_dir / "job.log"

        def logged() -> str:
            return log.read_text() if log.exists() else ""

        wait_for(lambda: "w01x" in logged(), timeout=40, what="w01x in job.log mid-line")
        assert srv.deltas_sent < 12, "the second word reached job.log only at the end"
        wait_for(
            lambda: read_record(run_dir).agent_state == "working" or srv.deltas_sent >= 12,
            what="agent_state working",
        )
        assert srv.deltas_sent < 12, "agent_state was not 'working' while the text streamed"
        wait_for(lambda: read_record(run_dir).state in TERMINAL_STATES, timeout=40, what="the end")
    finally:
        w.stop_all()
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    lines = logged().splitlines()
    assert lines.count("  " + answer) == 1, lines  # pieces joined on one line, once
    assert (run_dir / "result.md").read_text().strip() == answer


@pytest.mark.parametrize("agent_at", CODEXES)
def test_codex_streaming_a_long_answer_is_not_idle(
    agent_at: str, layout: Layout, config_file: Path, tmp_path: Path, srv: ModelServer
) -> None:
    """``exec --json`` prints nothing until the answer is whole: an answer streamed for
    ~20 s (ten pieces 2 s apart) outlives ``idle_timeout = "8s"`` because the stream's
    events count as progress, and agent_state is ``working`` while it streams. Codex's
    progress tracing stays out of job.log."""
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    answer = "".join(f"p{i} " for i in range(10)).strip()
    srv.script([text(answer, delay=2.0, chunks=10)])
    drop(layout, "long", prompt(agent, "Talk", idle_timeout="8s"))
    w = Watchers(layout, config_file)
    w.start()
    try:
        wait_for(lambda: jobs(layout), what="the job to be claimed")
        (run_dir,) = jobs(layout)
        assert srv.wait_for_deltas(2, timeout=40)
        wait_for(
            lambda: read_record(run_dir).agent_state == "working" or srv.deltas_sent >= 10,
            what="agent_state working",
        )
        assert srv.deltas_sent < 10, "agent_state was not 'working' while the answer streamed"
        wait_for(lambda: read_record(run_dir).state in TERMINAL_STATES, timeout=60, what="the end")
    finally:
        w.stop_all()
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert (run_dir / "result.md").read_text().strip() == answer
    log = (run_dir / "job.log").read_text()
    assert "codex_otel" not in log and "sse_event" not in log


@pytest.mark.parametrize("agent_at", CODEXES)
def test_codex_whose_stream_stalls_is_stopped_by_idle_timeout(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
) -> None:
    """The other side: the server opens the answer, then sends nothing for 40 s: no
    event, no progress, and ``idle_timeout = "5s"`` ends it well before."""
    agent, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([text("late", delay=40.0, chunks=1)])
    drop(layout, "stall", prompt(agent, "Talk", idle_timeout="5s"))
    started = time.monotonic()
    assert hopper("run", "--until-idle").returncode == 0
    assert time.monotonic() - started < 35
    (run_dir,) = jobs(layout)
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.IDLE_TIMEOUT), record.detail
