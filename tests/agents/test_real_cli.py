"""The real Claude Code and Codex CLIs, offline, against the scripted model server.

Binaries come from scripts/install-agents (tools/agents/node_modules). When
they are missing these tests fail (not skip): CI installs them. The tests where
CLI versions differ (a tool call, a 401, resuming a session) run against every
installed version (``claude_any`` / ``codex_any``: pinned and oldest supported).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents_env import (
    CLAUDE_VERSIONS,
    CODEX_VERSIONS,
    claude_bin,
    claude_env,
    codex_bin,
    codex_env,
)
from modelserver import ModelServer, error, last_user_text, text, tool

TIMEOUT = 30  # per CLI run; each normally takes well under 2 s

INSTALL_HINT = "agent CLIs not installed: run scripts/install-agents"


@pytest.fixture
def claude() -> str:
    path = claude_bin()
    if path is None:
        pytest.fail(f"{INSTALL_HINT} (missing tools/agents/node_modules/.bin/claude)")
    return path


@pytest.fixture
def codex() -> str:
    path = codex_bin()
    if path is None:
        pytest.fail(f"{INSTALL_HINT} (missing tools/agents/node_modules/.bin/codex)")
    return path


@pytest.fixture(params=list(CLAUDE_VERSIONS), ids=lambda v: f"claude-{v}")
def claude_any(request: pytest.FixtureRequest) -> str:
    path = claude_bin(request.param)
    if path is None:
        pytest.fail(f"{INSTALL_HINT} (missing Claude Code {request.param})")
    return path


@pytest.fixture(params=list(CODEX_VERSIONS), ids=lambda v: f"codex-{v}")
def codex_any(request: pytest.FixtureRequest) -> str:
    path = codex_bin(request.param)
    if path is None:
        pytest.fail(f"{INSTALL_HINT} (missing Codex {request.param})")
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def run(
    cmd: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return proc, parse_lines(proc.stdout)


def claude_cmd(claude: str, *args: str) -> list[str]:
    return [claude, "-p", "--output-format", "stream-json", "--verbose", *args]


def codex_cmd(codex: str, *args: str) -> list[str]:
    return [codex, "exec", "--json", "--skip-git-repo-check", *args]


def only(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    found = [e for e in events if e.get("type") == type_]
    assert len(found) == 1, f"expected one {type_!r} event, got {len(found)}: {events}"
    return found[0]


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


# --------------------------------------------------------------------------- claude


def test_claude_plain_text(claude: str, srv: ModelServer, tmp_path: Path, work: Path) -> None:
    srv.script([text("Hello from the scripted model.")])
    proc, events = run(
        claude_cmd(claude, "Say hello"), work, claude_env(tmp_path / "home", srv.url)
    )
    assert proc.returncode == 0, describe(proc)
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    result = only(events, "result")
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "Hello from the scripted model."
    assert result["session_id"] == events[0]["session_id"]
    assert result["num_turns"] == 1
    assert result["usage"]["output_tokens"] == 5
    (req,) = srv.model_requests()
    assert req.path.startswith("/v1/messages")
    assert last_user_text(req.body).endswith("Say hello")
    # the transcript lands under HOME
    transcripts = list((tmp_path / "home" / ".claude" / "projects").glob("*/*.jsonl"))
    assert [p.stem for p in transcripts] == [result["session_id"]]


def test_claude_bash_tool_creates_file(
    claude_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([tool("touch made.txt"), text("Created made.txt.")])
    proc, events = run(
        claude_cmd(claude_any, "--permission-mode", "bypassPermissions", "Create made.txt"),
        work,
        claude_env(tmp_path / "home", srv.url),  # IS_SANDBOX=1: root may bypass
    )
    assert proc.returncode == 0, describe(proc)
    assert (work / "made.txt").exists()
    tool_results = [
        block
        for e in events
        if e["type"] == "user"
        for block in e["message"]["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(tool_results) == 1 and tool_results[0]["is_error"] is False
    result = only(events, "result")
    assert result["is_error"] is False and result["result"] == "Created made.txt."
    assert result["num_turns"] == 2
    assert result["permission_denials"] == []
    # the second request carries the tool result back to the model
    second = srv.model_requests()[1].body["messages"]
    assert any(
        isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in second
    )


def test_claude_401_fails_fast(
    claude_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([error(401, times=5)])
    start = time.monotonic()
    proc, events = run(claude_cmd(claude_any, "hi"), work, claude_env(tmp_path / "home", srv.url))
    assert proc.returncode == 1, describe(proc)
    assert time.monotonic() - start < 10
    result = only(events, "result")
    assert result["is_error"] is True
    assert result["api_error_status"] == 401
    # 2.1.197 reports a failed API call as terminal_reason "completed" (is_error and
    # api_error_status are what hopper judges on, in every version)
    old = "claude-code-2.1.197" in claude_any
    assert result["terminal_reason"] == ("completed" if old else "api_error")
    assert len(srv.model_requests()) == 1  # CLAUDE_CODE_MAX_RETRIES=0: no retry


def test_claude_429_then_success(claude: str, srv: ModelServer, tmp_path: Path, work: Path) -> None:
    srv.script([error(429), text("Recovered.")])
    env = claude_env(tmp_path / "home", srv.url, max_retries=2)
    proc, events = run(claude_cmd(claude, "hi"), work, env)
    assert proc.returncode == 0, describe(proc)
    retries = [e for e in events if e["type"] == "system" and e.get("subtype") == "api_retry"]
    assert len(retries) == 1
    assert retries[0]["error_status"] == 429 and retries[0]["attempt"] == 1
    # 500 ms base backoff (+ up to 25 % jitter); retry-after can only lengthen it
    assert retries[0]["retry_delay_ms"] <= 1000
    result = only(events, "result")
    assert result["is_error"] is False and result["result"] == "Recovered."
    assert len(srv.model_requests()) == 2


def test_claude_resume_carries_first_exchange(
    claude_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([text("First answer."), text("Second answer.")])
    env = claude_env(tmp_path / "home", srv.url)
    sid = str(uuid.uuid4())
    proc, events = run(claude_cmd(claude_any, "--session-id", sid, "First prompt"), work, env)
    assert proc.returncode == 0, describe(proc)
    assert only(events, "result")["session_id"] == sid
    proc, events = run(claude_cmd(claude_any, "--resume", sid, "Second prompt"), work, env)
    assert proc.returncode == 0, describe(proc)
    result = only(events, "result")
    assert result["session_id"] == sid and result["result"] == "Second answer."
    body = srv.model_requests()[1].body
    assert last_user_text(body) == "Second prompt"
    flat = json.dumps(body["messages"])
    assert "First prompt" in flat and "First answer." in flat
    roles = [m["role"] for m in body["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]


def test_claude_sigint_mid_stream(
    claude: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([text("A slow answer that streams in pieces.", delay=1.0)])
    proc = subprocess.Popen(
        claude_cmd(claude, "hi"),
        cwd=work,
        env=claude_env(tmp_path / "home", srv.url),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert srv.wait_for_requests(1, timeout=TIMEOUT)
        # The first text delta is on the wire; the rest comes a second apart.
        assert srv.wait_for_deltas(1, timeout=TIMEOUT)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    events = parse_lines(out)
    results = [e for e in events if e["type"] == "result"]
    # Under load (one full CI run) 2.1.330 exited 0 after the interrupt marker but
    # before printing its result line; when a result is printed, it says aborted.
    assert len(results) <= 1, events
    for result in results:
        assert result["subtype"] == "error_during_execution"
        assert result["is_error"] is True
        assert result["terminal_reason"] == "aborted_streaming"
    interrupted = [e for e in events if e["type"] == "user"]
    assert "[Request interrupted by user]" in json.dumps(interrupted)
    # When the CLI had read the first delta before the signal (the usual case:
    # it was on the wire, the next is 1 s away), the partial message is printed with
    # "aborted": true; before the first delta nothing of the reply is printed.
    for e in events:
        if e["type"] == "assistant":
            assert e.get("aborted") is True


# --------------------------------------------------------------------------- codex


def test_codex_plain_text(codex: str, srv: ModelServer, tmp_path: Path, work: Path) -> None:
    srv.script([text("Hello from the scripted model.")])
    proc, events = run(codex_cmd(codex, "Say hello"), work, codex_env(tmp_path / "home", srv.url))
    assert proc.returncode == 0, describe(proc)
    types = [e["type"] for e in events]
    assert types == ["thread.started", "turn.started", "item.completed", "turn.completed"], types
    msg = events[2]["item"]
    assert msg["type"] == "agent_message" and msg["text"] == "Hello from the scripted model."
    assert events[3]["usage"]["output_tokens"] == 5
    (req,) = srv.model_requests()
    assert req.path == "/v1/responses"
    assert last_user_text(req.body) == "Say hello"
    rollouts = list((tmp_path / "home" / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    assert len(rollouts) == 1 and events[0]["thread_id"] in rollouts[0].name


def test_codex_shell_tool_creates_file(
    codex_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([tool("touch made.txt"), text("Created made.txt.")])
    proc, events = run(
        codex_cmd(codex_any, "-s", "workspace-write", "Create made.txt"),
        work,
        codex_env(tmp_path / "home", srv.url),
    )
    assert proc.returncode == 0, describe(proc)
    assert (work / "made.txt").exists()
    done = [e["item"] for e in events if e["type"] == "item.completed"]
    cmd = [i for i in done if i["type"] == "command_execution"]
    if not cmd:
        # Codex 0.142.0 in one loaded full run (not reproduced in 5 reruns) reported
        # no completed command item although the file was made: probably exec_command's
        # yield window ran out before `touch` was reaped. The file and the model's
        # second request (below) still prove the tool ran; a started item must name it.
        started = [e["item"] for e in events if e["type"] == "item.started"]
        cmd = [i for i in started if i["type"] == "command_execution"]
        assert len(cmd) == 1 and "touch made.txt" in cmd[0]["command"], events
    else:
        assert len(cmd) == 1 and cmd[0]["exit_code"] == 0, events
        assert "touch made.txt" in cmd[0]["command"], events
    assert done[-1] == {**done[-1], "type": "agent_message", "text": "Created made.txt."}
    first, second = srv.model_requests()
    assert "exec_command" in [t.get("name") for t in first.body["tools"]]
    outputs = [i for i in second.body["input"] if i.get("type") == "function_call_output"]
    assert len(outputs) == 1


def test_codex_401_turn_failed(
    codex_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([error(401, times=5)])
    proc, events = run(codex_cmd(codex_any, "hi"), work, codex_env(tmp_path / "home", srv.url))
    assert proc.returncode == 1, describe(proc)
    failed = only(events, "turn.failed")
    assert "401" in failed["error"]["message"]
    assert any(e["type"] == "error" for e in events)
    assert len(srv.model_requests()) == 1


def test_codex_429_then_success(codex: str, srv: ModelServer, tmp_path: Path, work: Path) -> None:
    srv.script([error(429), text("Recovered.")])
    # 429 is retried by the stream-level loop (stream_max_retries); retry-after: 0 makes it instant
    env = codex_env(tmp_path / "home", srv.url, retries=2)
    start = time.monotonic()
    proc, events = run(codex_cmd(codex, "hi"), work, env)
    assert proc.returncode == 0, describe(proc)
    assert time.monotonic() - start < 10
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["message"].startswith("Reconnecting... 1/2")
    assert events[-1]["type"] == "turn.completed"
    assert len(srv.model_requests()) == 2


def test_codex_resume_carries_first_exchange(
    codex_any: str, srv: ModelServer, tmp_path: Path, work: Path
) -> None:
    srv.script([text("First answer."), text("Second answer.")])
    env = codex_env(tmp_path / "home", srv.url)
    proc, events = run(codex_cmd(codex_any, "First prompt"), work, env)
    assert proc.returncode == 0, describe(proc)
    thread_id = events[0]["thread_id"]
    proc, events = run(codex_cmd(codex_any, "resume", thread_id, "Second prompt"), work, env)
    assert proc.returncode == 0, describe(proc)
    assert events[0] == {"type": "thread.started", "thread_id": thread_id}
    body = srv.model_requests()[1].body
    assert last_user_text(body) == "Second prompt"
    flat = json.dumps(body["input"])
    assert "First prompt" in flat and "First answer." in flat


# --------------------------------------------------------------------------- the server itself


def test_modelserver_queue_errors_and_head() -> None:
    import urllib.error
    import urllib.request

    def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
        req = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    with ModelServer() as s:
        s.script([error(429, times=2), text("hi"), tool("ls")])
        head = urllib.request.Request(s.url + "/", method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as resp:
            assert resp.status == 200
        msgs = {
            "stream": True,
            "messages": [
                {"role": "user", "content": "the prompt"},
                {"role": "system", "content": "x"},
            ],
        }
        assert post(s.url + "/v1/messages?beta=true", msgs)[0] == 429
        assert post(s.url + "/v1/responses", {"stream": True, "input": []})[0] == 429
        status, sse = post(s.url + "/v1/messages?beta=true", msgs)
        assert status == 200 and '"text_delta"' in sse and "event: message_stop" in sse
        tools = [{"type": "function", "name": "exec_command", "parameters": {}}]
        status, sse = post(s.url + "/v1/responses", {"stream": True, "input": [], "tools": tools})
        assert status == 200 and "response.completed" in sse
        assert '"name": "exec_command"' in sse and '\\"cmd\\": \\"ls\\"' in sse
        assert s.pending() == 0
        assert [r.turn.kind for r in s.model_requests()] == ["error", "error", "text", "tool"]
        assert last_user_text(s.model_requests()[0].body) == "the prompt"
        assert s.requests[0].method == "HEAD" and s.requests[0].turn is None
