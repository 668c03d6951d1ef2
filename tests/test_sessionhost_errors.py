"""on_error in a live session: an API error that ends a turn, with the fake agent CLI in a
real pty (tests/sessionfake.py's ``fails N STATUS``), and the policy's pure parts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopper.agents.policy import pauses_on, retries_error
from hopper.core.sessions import agent_state, api_error_kind, turn_result
from hopper.sessionhost import contract as c
from sessionhosts import Session, _no

LOGS = Path(__file__).parent / "data" / "claude_session_log"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session(tmp_path)
    yield s
    s.cleanup()


def events(run: Path) -> list[dict[str, object]]:
    path = run / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def test_retry_types_the_message_again_after_the_backoff_and_the_turn_succeeds(
    session: Session,
) -> None:
    session.start()
    run = session.send("fails 2 429", on_error="retry", api_retries=2, retry_backoff=0.2)
    end = session.ended(run)
    assert end.ended == c.STOP_HOOK, end.detail
    assert (run / "result.md").read_text() == "answer: fails 2 429\n"
    summary = json.loads((run / "agent.json").read_text())
    assert summary["outcome"] == "succeeded" and summary["error_kind"] is None
    retries = [e for e in events(run) if e["event"] == "agent_retry"]
    assert [(e["attempt"], e["kind"], e["delay_seconds"]) for e in retries] == [
        (1, "rate_limit", 0.2),
        (2, "rate_limit", 0.4),
    ]
    log = (run / "job.log").read_text()
    assert "[hopper] rate_limit: retry 1/2 in 0.2s" in log
    state = session.state() or _no
    assert state.live and state.agent_pid == end.agent_pid and state.turns == 1


def test_retries_spent_fail_the_turn_agent_error_and_the_session_goes_on(
    session: Session,
) -> None:
    session.start()
    run = session.send("fails 3 429", on_error="retry", api_retries=1, retry_backoff=0.1)
    end = session.ended(run)
    summary = json.loads((run / "agent.json").read_text())
    assert (summary["outcome"], summary["error_kind"]) == ("agent_error", "rate_limit")
    assert summary["agent_state"] == "api_error" and summary["session_paused"] is None
    assert end.detail.startswith("the agent reported an error (rate_limit): API Error")
    assert len([e for e in events(run) if e["event"] == "agent_retry"]) == 1
    after = session.ended(session.send("after"))
    assert after.ended == c.STOP_HOOK and after.agent_pid == end.agent_pid


@pytest.mark.parametrize("status,kind", [(429, "rate_limit"), (401, "auth")])
def test_fail_never_types_it_again(session: Session, status: int, kind: str) -> None:
    session.start()
    run = session.send(f"fails 1 {status}", on_error="fail", api_retries=2)
    end = session.ended(run)
    summary = json.loads((run / "agent.json").read_text())
    assert (summary["outcome"], summary["error_kind"]) == ("agent_error", kind)
    assert not [e for e in events(run) if e["event"] == "agent_retry"]
    assert end.ended == c.SESSION_LOG and "retry" not in (run / "job.log").read_text()


def test_an_error_hopper_does_not_retry_fails_under_retry_too(session: Session) -> None:
    session.start()
    run = session.send("fails 1 401", on_error="retry", api_retries=2)
    session.ended(run)
    summary = json.loads((run / "agent.json").read_text())
    assert (summary["outcome"], summary["error_kind"]) == ("agent_error", "auth")


def test_pause_writes_the_sessions_pause_marker_before_the_turn_ends(session: Session) -> None:
    session.start()
    where = session.tmp / "sessions"
    run = session.send(
        "fails 1 429", on_error="pause", session="s", sessions_dir=str(where), api_retries=2
    )
    session.ended(run)
    summary = json.loads((run / "agent.json").read_text())
    assert (summary["outcome"], summary["session_paused"]) == ("agent_error", "s")
    marker = json.loads((where / "s.paused").read_text())
    assert marker["job_id"] == run.name and "agent_error/rate_limit" in marker["why"]
    assert [e["event"] for e in events(run)].count("session_paused") == 1
    assert f"remove {where / 's.paused'} to go on" in (run / "job.log").read_text()


def test_the_kind_comes_from_claudes_api_error_entry() -> None:
    lines = (LOGS / "api_error_401_2.1.330.jsonl").read_text().splitlines()
    log = [json.loads(line) for line in lines]
    assert api_error_kind(log) == "auth"
    entry = {
        "type": "assistant",
        "isApiErrorMessage": True,
        "error": "rate_limit",
        "apiErrorStatus": 429,
        "message": {"content": [{"type": "text", "text": "API Error: Request rejected (429)"}]},
    }
    assert api_error_kind([entry]) == "rate_limit"
    assert api_error_kind([{**entry, "apiErrorStatus": 529, "error": "x"}]) == "overloaded"
    answer = {"type": "assistant", "message": {"content": [{"type": "text", "text": "hi"}]}}
    assert api_error_kind([entry, answer]) is None
    assert api_error_kind([entry, {"type": "user", "message": {"content": "again"}}]) is None
    assert api_error_kind([]) is None


def test_an_api_error_logged_before_its_prompt_still_ends_the_turn() -> None:
    """Claude Code 2.1.197 at times writes an API error's assistant entry before the user
    entry it answers (seen once in three runs): the latest entry by timestamp decides.
    The recording: a 429, the message typed again, "Recovered.", a second message."""
    lines = (LOGS / "api_error_429_2.1.197.jsonl").read_text().splitlines()
    log = [json.loads(line) for line in lines]
    prompts = [i for i, e in enumerate(log) if e.get("type") == "user"]
    first = log[: prompts[1]]
    assert agent_state(first, now=0.0, last_change=0.0) == "api_error"
    assert api_error_kind(first) == "rate_limit"
    error = next(e for e in first if e.get("isApiErrorMessage"))
    reordered = [error, *(e for e in first if e is not error)]
    assert agent_state(reordered, now=0.0, last_change=0.0) == "api_error"
    assert api_error_kind(reordered) == "rate_limit"
    retried = log[prompts[1] : prompts[2]]
    assert agent_state(retried, now=100.0, last_change=0.0) == "waiting_for_input"
    assert api_error_kind(retried) is None and turn_result(retried) == "Recovered."


@pytest.mark.parametrize(
    "on_error,kind,done,retries,want",
    [
        ("retry", "rate_limit", 0, 2, True),
        (None, "overloaded", 1, 2, True),
        ("retry", "rate_limit", 2, 2, False),
        ("retry", "auth", 0, 2, False),
        ("retry", "server", 0, 2, False),
        ("fail", "rate_limit", 0, 2, False),
        ("pause", "rate_limit", 0, 2, False),
    ],
)
def test_retries_error(
    on_error: str | None, kind: str, done: int, retries: int, want: bool
) -> None:
    assert retries_error(on_error, kind, done, retries) is want


def test_pause_holds_only_for_an_api_error() -> None:
    assert pauses_on("pause", "auth") and pauses_on("pause", "rate_limit")
    assert not pauses_on("pause", "unknown") and not pauses_on("pause", None)
    assert not pauses_on("pause", "permission_denied") and not pauses_on("fail", "auth")
