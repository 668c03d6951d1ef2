"""core/sessions.py's turn logic, on session logs recorded from the real Claude Code CLIs.

tests/data/claude_session_log/*.jsonl are Claude Code's own JSONL session logs
from interactive runs in a PTY against tests/modelserver.py (2.1.330 and
2.1.197): turn 1 a Bash tool call then "Created it.", turn 2 "Second answer.",
turn 3 interrupted by Esc mid-stream; and a 401 from the model (2.1.330).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper.core.sessions import (
    TurnEnd,
    Usage,
    UsageTally,
    agent_state,
    log_session_id,
    queued_after,
    tally_usage,
    turn_result,
    turn_state,
    turn_usage,
    turn_verdict,
)

LOGS = Path(__file__).parent / "data" / "claude_session_log"
PROMPTS = ("Create made.txt please", "Now a second question", "Slow one please")


def entries(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (LOGS / f"{name}.jsonl").read_text().splitlines()]


def turns(name: str) -> list[list[dict[str, Any]]]:
    """The log cut before each typed prompt: [before the first, turn 1, turn 2, turn 3]."""
    out: list[list[dict[str, Any]]] = [[]]
    for e in entries(name):
        content = (e.get("message") or {}).get("content")
        if e.get("type") == "user" and content in PROMPTS:
            out.append([])
        out[-1].append(e)
    return out


VERSIONS = ["turns_2.1.330", "turns_2.1.197"]


@pytest.mark.parametrize("log", VERSIONS)
def test_each_recorded_turn_ends_waiting_with_its_answer(log: str) -> None:
    _, first, second, third = turns(log)
    assert agent_state(first, now=100.0, last_change=0.0) == "waiting_for_input"
    assert turn_result(first) == "Created it."
    assert agent_state(second, now=100.0, last_change=0.0) == "waiting_for_input"
    assert turn_result(second) == "Second answer."
    # interrupted by Esc: the partial text, then "[Request interrupted by user]"
    assert agent_state(third, now=100.0, last_change=0.0) == "waiting_for_input"
    assert turn_result(third) == "a\n"
    assert log_session_id(first) == log_session_id(third) is not None


@pytest.mark.parametrize("log", VERSIONS)
def test_a_turn_mid_tool_call_is_working(log: str) -> None:
    first = turns(log)[1]
    tool_use = next(
        i
        for i, e in enumerate(first)
        if e["type"] == "assistant" and e["message"]["content"][0]["type"] == "tool_use"
    )
    assert agent_state(first[: tool_use + 1], now=100.0, last_change=0.0) == "working"
    tool_result = next(i for i, e in enumerate(first) if i > tool_use and e["type"] == "user")
    assert agent_state(first[: tool_result + 1], now=100.0, last_change=0.0) == "working"
    # the prompt alone: working (the model has not answered)
    assert agent_state(first[:1], now=100.0, last_change=0.0) == "working"


def test_nothing_yet_is_idle_and_an_api_error_is_api_error() -> None:
    assert agent_state(turns("turns_2.1.330")[0], now=100.0, last_change=0.0) == "idle"
    assert agent_state([], now=100.0, last_change=0.0) == "idle"
    log = entries("api_error_401_2.1.330")
    assert agent_state(log, now=0.0, last_change=0.0) == "api_error"  # no settle needed
    end = turn_verdict(markers=0, entries=log, now=0.0, last_change=0.0, deadline=None)
    assert end == TurnEnd("session_log", "api_error")


def test_waiting_is_believed_only_after_settle() -> None:
    first = turns("turns_2.1.330")[1]
    assert agent_state(first, now=10.0, last_change=9.0, settle=3.0) == "working"
    assert agent_state(first, now=12.0, last_change=9.0, settle=3.0) == "waiting_for_input"


def test_a_turn_is_working_until_its_log_says_otherwise() -> None:
    assert turn_state([], now=100.0, last_change=0.0) == "working"  # typed, log not written yet
    assert turn_state(turns("turns_2.1.330")[0], now=100.0, last_change=0.0) == "working"
    first = turns("turns_2.1.330")[1]
    assert turn_state(first, now=10.0, last_change=9.0, settle=3.0) == "working"
    assert turn_state(first, now=12.0, last_change=9.0, settle=3.0) == "waiting_for_input"
    log = entries("api_error_401_2.1.330")
    assert turn_state(log, now=0.0, last_change=0.0) == "api_error"


def test_turn_verdict_prefers_the_marker_then_the_log_then_the_deadline() -> None:
    first = turns("turns_2.1.330")[1]
    mid = first[:1]
    # a marker ends the turn at once, whatever the log says yet
    assert turn_verdict(markers=1, entries=mid, now=1.0, last_change=1.0, deadline=None) == (
        TurnEnd("stop_hook", "working")
    )
    # no marker: the log, once settled
    assert turn_verdict(markers=0, entries=first, now=1.0, last_change=0.5, deadline=None) is None
    assert turn_verdict(markers=0, entries=first, now=9.0, last_change=0.5, deadline=None) == (
        TurnEnd("session_log", "waiting_for_input")
    )
    # still working: only the deadline ends it
    assert turn_verdict(markers=0, entries=mid, now=50.0, last_change=0.0, deadline=60.0) is None
    assert turn_verdict(markers=0, entries=mid, now=60.0, last_change=0.0, deadline=60.0) == (
        TurnEnd("timeout", "working")
    )


@pytest.mark.parametrize("log", VERSIONS)
def test_usage_per_turn_is_the_difference_of_the_cumulative_figures(log: str) -> None:
    before, first, second, third = turns(log)
    t0 = tally_usage(UsageTally(), before)
    t1 = tally_usage(t0, first)
    t2 = tally_usage(t1, second)
    # the model server reports 10 in / 5 out per message: two messages, then one
    assert turn_usage(t0.usage, t1.usage) == Usage(20, 10, 0, 0, None)
    assert turn_usage(t1.usage, t2.usage) == Usage(10, 5, 0, 0, None)
    # read in one go or slice by slice, the session's figures are the same
    whole = tally_usage(UsageTally(), [*before, *first, *second, *third])
    assert whole.usage == tally_usage(t2, third).usage


def test_one_message_in_several_entries_counts_once() -> None:
    msg = {"id": "msg_1", "usage": {"input_tokens": 7, "output_tokens": 3}}
    text = {"type": "assistant", "message": {**msg, "content": [{"type": "text", "text": "x"}]}}
    call = {"type": "assistant", "message": {**msg, "content": [{"type": "tool_use"}]}}
    tally = tally_usage(UsageTally(), [text, call])
    assert tally.usage == Usage(7, 3)
    # a slice boundary between the two entries changes nothing
    assert tally_usage(tally_usage(UsageTally(), [text]), [call]) == tally


usages = st.builds(
    Usage,
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.one_of(st.none(), st.floats(0, 1e6)),
)


@given(usages, usages)
def test_turn_usage_adds_back_to_the_cumulative_figures(before: Usage, step: Usage) -> None:
    after = Usage(
        before.input_tokens + step.input_tokens,
        before.output_tokens + step.output_tokens,
        before.cache_read_tokens + step.cache_read_tokens,
        before.cache_write_tokens + step.cache_write_tokens,
        None if step.cost_usd is None else (before.cost_usd or 0.0) + step.cost_usd,
    )
    got = turn_usage(before, after)
    assert got.input_tokens == step.input_tokens
    assert got.output_tokens == step.output_tokens
    assert got.cache_read_tokens == step.cache_read_tokens
    assert got.cache_write_tokens == step.cache_write_tokens
    assert (got.cost_usd is None) == (step.cost_usd is None)
    assert turn_usage(after, before).input_tokens == 0  # never negative


def test_garbage_entries_are_ignored() -> None:
    junk: list[dict[str, Any]] = [
        {"type": "assistant"},
        {"type": "assistant", "message": "text"},
        {"type": "assistant", "message": {"content": "x", "usage": {"input_tokens": "many"}}},
        {"type": "user", "message": None},
        {"type": "system", "subtype": "turn_duration"},
    ]
    assert tally_usage(UsageTally(), junk).usage == Usage()
    assert agent_state(junk, now=10.0, last_change=0.0) == "working"  # a user entry last
    assert agent_state(junk[:3], now=10.0, last_change=0.0) == "waiting_for_input"
    assert turn_result(junk) is None and log_session_id(junk) is None


def test_a_nudge_queued_while_busy_is_answered_after_the_turn_and_not_its_result() -> None:
    """Recorded (2.1.330): "Think" stalls 12 s, the nudge is typed while the reply spins,
    Claude queues it, ends the turn with "Done at last." (its Stop hook runs) and answers
    the nudge as a turn of its own. A host that reads the log late sees both."""
    log = entries("nudged_2.1.330")
    start = next(i for i, e in enumerate(log) if (e.get("message") or {}).get("content") == "Think")
    turn = log[start:]
    assert turn_result(turn) == "Done at last."
    after = [e for e in turn if e.get("type") == "assistant"]
    assert [turn_result([e]) for e in after] == ["Done at last.", "Carrying on."]
    late_close = [e for e in log if e.get("subtype") == "turn_duration"][:1]
    assert turn_result(late_close + turn) == "Done at last."
    nudge = next(
        str(e["message"]["content"])
        for e in turn
        if e.get("type") == "user" and "printed nothing" in str(e["message"]["content"])
    )
    assert queued_after(turn, [nudge]) == 1  # answered after the turn: owed a turn of its own
    assert queued_after(turn, []) == 0
    took_it = [e for e in turn if e.get("type") != "system"]  # as if taken in mid-turn
    assert queued_after(took_it, [nudge + "\n"]) == 0
