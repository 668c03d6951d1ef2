"""The stream parsers and the verdicts, on the recorded real streams in tests/data/. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopper.agents.argv import build_argv
from hopper.agents.policy import final_state, retry_delay
from hopper.agents.stream import StreamState, parse_line, replay
from hopper.core.agent_outcome import (
    error_kind,
    final_reason,
    judge,
    live_action,
    retryable,
)
from hopper.core.sessions import busy_sessions, session_free
from hopper.core.states import Reason

DATA = Path(__file__).resolve().parents[1] / "data"


def recorded(agent: str, name: str) -> list[str]:
    return (DATA / agent / f"{name}.jsonl").read_text().splitlines()


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_tool_call_stream(agent: str) -> None:
    state, lines = replay(agent, recorded(agent, "tool_call"))
    summary = state.summary()
    assert summary["result"] == "Created made.txt."
    assert summary["session_id"] and summary["tool_calls"] == 1
    assert summary["usage"]["output_tokens"] == 10
    assert judge(summary, 0).ok
    log = "\n".join(lines)
    assert "touch made.txt" in log and "Created made.txt." in log and "[tool result]" in log


def test_claude_usage_cost_and_turns() -> None:
    state, _ = replay("claude", recorded("claude", "tool_call"))
    assert state.num_turns == 2 and state.cost_usd and state.cost_usd > 0


@pytest.mark.parametrize(
    ("agent", "name", "kind"),
    [
        ("claude", "error_401", "auth"),
        ("claude", "error_500", "server"),
        ("codex", "error_401", "auth"),
        ("codex", "error_429_no_retry", "rate_limit"),
        ("claude", "permission_denied", "permission_denied"),
    ],
)
def test_errors_are_classified(agent: str, name: str, kind: str) -> None:
    state, _ = replay(agent, recorded(agent, name))
    verdict = judge(state.summary(), 1)
    assert not verdict.ok and verdict.kind == kind


def test_permission_denials_listed() -> None:
    state, lines = replay("claude", recorded("claude", "permission_denied"))
    assert state.permission_denials == ["Bash: touch made.txt"]
    assert any(line.startswith("[denied]") for line in lines)


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_retries_are_rendered_not_fatal(agent: str) -> None:
    state, lines = replay(agent, recorded(agent, "retry_429"))
    assert state.api_retries == 1 and judge(state.summary(), 0).ok
    assert any(line.startswith("[retry]") for line in lines)


@pytest.mark.parametrize("agent", ["claude", "codex"])
@pytest.mark.parametrize("name", ["sigint", "sigterm"])
def test_interrupted_runs_are_not_success(agent: str, name: str) -> None:
    state, _ = replay(agent, recorded(agent, name))
    assert not judge(state.summary(), 0).ok


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_resume_keeps_the_session_id(agent: str) -> None:
    first, _ = replay(agent, recorded(agent, "resume_1"))
    second, _ = replay(agent, recorded(agent, "resume_2"))
    assert first.session_id == second.session_id and second.result == "Second answer."


def test_parse_line_tolerates_junk() -> None:
    assert parse_line(b"") is None and parse_line("not json") is None
    assert parse_line("[1]") is None and parse_line('{"type": "x"') is None
    assert parse_line(b'{"type": "x"}\n') == {"type": "x"}


@pytest.mark.parametrize(
    ("status", "text", "kind"),
    [
        (401, "", "auth"),
        (429, "", "rate_limit"),
        (529, "", "overloaded"),
        (503, "", "server"),
        (None, "Connection refused", "network"),
        (None, "stream disconnected before completion", "network"),
        (None, "unexpected status 401 Unauthorized", "auth"),
        (None, "something odd", "unknown"),
    ],
)
def test_error_kind(status: int | None, text: str, kind: str) -> None:
    assert error_kind(status, text) == kind


def test_retryable_kinds() -> None:
    assert retryable("rate_limit") and retryable("network") and retryable("overloaded")
    assert not retryable("auth") and not retryable("permission_denied") and not retryable(None)


def test_final_reason_only_refines_an_undisturbed_exit() -> None:
    agent = {"outcome": "agent_error", "detail": "d"}
    assert final_reason(Reason.EXIT_NONZERO, agent) == (Reason.AGENT_ERROR, "d")
    assert final_reason(Reason.ABORTED, agent) is None
    assert final_reason(Reason.COMPLETED, None) is None
    assert final_reason(Reason.EXIT_NONZERO, {"outcome": "check_failed", "detail": "c"}) == (
        Reason.CHECK_FAILED,
        "c",
    )


def test_sessions_one_at_a_time() -> None:
    busy = busy_sessions(["a", None], ["b"])
    assert busy == {"a", "b"}
    assert not session_free("a", busy) and session_free("c", busy) and session_free(None, busy)


def test_argv_never_contains_the_prompt() -> None:
    spec = {
        "kind": "claude",
        "bin": "claude",
        "permission_mode": "bypassPermissions",
        "prompt_file": "/r/prompt.body.md",
    }
    assert build_argv(spec, "u-1", False) == [
        "claude", "-p", "--output-format", "stream-json", "--verbose",
        "--include-partial-messages",
        "--permission-mode", "bypassPermissions", "--session-id", "u-1",
    ]  # fmt: skip
    assert build_argv(spec, "u-1", True)[-2:] == ["--resume", "u-1"]
    codex = {"kind": "codex", "bin": "codex", "sandbox": "workspace-write"}
    assert build_argv(codex, "t", True) == [
        "codex", "exec", "--json", "--skip-git-repo-check", "-s", "workspace-write",
        "resume", "t", "-",
    ]  # fmt: skip
    custom = {
        "kind": "custom",
        "bin": "x",
        "argv": ["x", "--in={prompt_file}", "{workdir}", "$(rm -rf /)"],
        "prompt_file": "/r/p.md",
        "workdir": "/w",
        "run_dir": "/r",
    }
    assert build_argv(custom, None, False) == ["x", "--in=/r/p.md", "/w", "$(rm -rf /)"]


def test_partial_messages_render_line_by_line_once() -> None:
    """2.1.197's deltas: each line when its newline arrives, the rest at the block's end,
    and the whole message that follows is not printed a second time."""
    state = StreamState("claude")
    rendered: list[list[str]] = []
    for line in recorded("claude", "partial_2.1.197"):
        obj = parse_line(line)
        if obj is not None:
            rendered.append(state.feed(obj))
    flat = [ln for lines in rendered for ln in lines]
    assert flat.count("[assistant]") == 1
    assert [ln for ln in flat if ln.startswith("  line")] == ["  line1", "  line2", "  line3"]
    # line1 was out before the delta carrying line3 arrived
    first = next(i for i, lines in enumerate(rendered) if "  line1" in lines)
    last = next(i for i, lines in enumerate(rendered) if "  line3" in lines)
    assert first < last
    assert state.summary()["result"] == "line1\nline2\nline3"
    assert judge(state.summary(), 0).ok


def test_claude_retry_event_is_judged_live() -> None:
    state, lines = replay("claude", recorded("claude", "retry_401"))
    (err,) = state.live
    assert err.kind == "auth" and live_action(err.kind) == "stop"
    assert err.delay_seconds is not None and 0 < err.delay_seconds < 5
    assert any(ln.startswith("[retry] API error 401") for ln in lines)


def test_codex_reconnect_is_judged_live() -> None:
    state = StreamState("codex")
    msg = "Reconnecting... 1/5 (unexpected status 401 Unauthorized: bad key, url: http://x/v1)"
    state.feed({"type": "error", "message": msg})
    assert [e.kind for e in state.live] == ["auth"]
    state.live.clear()
    state.feed({"type": "error", "message": "Reconnecting... 2/5 (stream disconnected)"})
    assert [e.kind for e in state.live] == ["network"]


@pytest.mark.parametrize(
    ("status", "text", "code", "kind", "action"),
    [
        (401, "", "authentication_failed", "auth", "stop"),
        (403, "", "permission_error", "permission", "stop"),
        (402, "", "", "billing", "stop"),
        (400, "Your credit balance is too low", "", "billing", "stop"),
        (429, "You exceeded your current quota", "insufficient_quota", "quota", "hopper"),
        (429, "", "rate_limit", "rate_limit", "hopper"),
        (529, "", "overloaded_error", "overloaded", "hopper"),
        (None, "connection refused", "", "network", "hopper"),
        (500, "", "api_error", "server", "wait"),
        (None, "something odd", "", "unknown", "wait"),
    ],
)
def test_live_error_kinds_and_actions(
    status: int | None, text: str, code: str, kind: str, action: str
) -> None:
    assert error_kind(status, text, code) == kind
    assert live_action(kind) == action


def test_retry_delay_respects_announced_wait_and_caps() -> None:
    assert retry_delay(2.0, 1, None) == 2.0
    assert retry_delay(2.0, 3, 0.5) == 8.0
    assert retry_delay(0.1, 1, 30.0) == 30.0  # retry-after wins over a shorter backoff
    assert retry_delay(0.1, 1, 1e9) == 600.0


def test_final_state() -> None:
    assert final_state("succeeded", None, [], "Done.") == ("idle", None)
    assert final_state("succeeded", None, [], "Shall I also fix b.py?")[0] == "waiting_for_input"
    assert final_state("agent_error", "permission_denied", ["Bash: x"], None)[0] == (
        "waiting_for_input"
    )
    assert final_state("agent_error", "auth", [], None) == ("api_error", None)
    assert final_state("agent_error", "unknown", [], None) == ("idle", None)


def _delta(text: str) -> dict[str, object]:
    return {
        "type": "stream_event",
        "event": {"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}},
    }


def test_streamed_text_without_a_newline_is_taken_as_it_stands_and_continued() -> None:
    """The driver writes what has no newline yet (take_fragment); the line rendered next
    ends that line rather than starting another, and nothing is written twice."""
    state = StreamState("claude")
    start = {"type": "content_block_start", "content_block": {"type": "text"}}
    log = "\n".join(state.feed({"type": "stream_event", "event": start})) + "\n"
    assert state.feed(_delta("hel")) == []
    log += state.take_fragment()
    assert state.take_fragment() == ""  # nothing new
    log += "".join(t + "\n" for t in state.feed(_delta("lo\nwor")))
    log += state.take_fragment()
    state.feed(_delta("ld"))
    stop = {"type": "stream_event", "event": {"type": "content_block_stop"}}
    log += "".join(t + "\n" for t in state.feed(stop))
    assert log == "[assistant]\n  hello\n  world\n"
    assert not state.line_open and state.partial == ""


def test_an_event_in_the_middle_of_a_streamed_line_starts_on_a_line_of_its_own() -> None:
    state = StreamState("claude")
    start = {"type": "content_block_start", "content_block": {"type": "text"}}
    state.feed({"type": "stream_event", "event": start})
    state.feed(_delta("half a li"))
    log = state.take_fragment()
    retry = {"type": "system", "subtype": "api_retry", "error_status": 500, "attempt": 1}
    log += "".join(t + "\n" for t in state.feed(retry))
    log += "".join(t + "\n" for t in state.feed(_delta("ne\n")))
    assert log.splitlines()[0] == "  half a li"
    assert log.splitlines()[1].startswith("[retry] API error 500")
    assert log.splitlines()[2] == "  ne"
    assert state.close_line() is False


def test_codex_progress_env_keeps_the_users_filter() -> None:
    from hopper.agents.codex import CODEX, progress_env

    assert progress_env({}) == {"RUST_LOG": "error,codex_otel.log_only=info"}
    assert progress_env({"RUST_LOG": "warn"}) == {"RUST_LOG": "warn,codex_otel.log_only=info"}
    assert CODEX.progress is not None
    line = b'2026-11-26T05:25:59Z  INFO codex_otel.log_only: event.name="codex.sse_event"'
    assert CODEX.progress.marker in line
    assert CODEX.progress.marker not in b"WARNING: proceeding, even though we could not"
