"""The driver's side of a job's spending limits: usage read as it streams (Claude's
partial messages, Codex's progress trace), counted across runs and attempts."""

from __future__ import annotations

import math
from typing import Any

from hopper.agents.budget import JobBudget
from hopper.agents.codex import progress_usage
from hopper.agents.stream import StreamState

PRICES = {"m": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}


def event(etype: str, **fields: Any) -> dict[str, Any]:
    return {"type": "stream_event", "event": {"type": etype, **fields}}


def start(msg_id: str, input_tokens: int) -> dict[str, Any]:
    usage = {"input_tokens": input_tokens, "output_tokens": 1}
    return event("message_start", message={"id": msg_id, "usage": usage})


def test_claude_usage_grows_message_by_message() -> None:
    state = StreamState("claude")
    state.feed({"type": "system", "subtype": "init", "model": "m", "session_id": "s"})
    state.feed(start("a", 1000))
    assert state.spent_usage() == {"input_tokens": 1000, "output_tokens": 1}
    state.feed(event("message_delta", usage={"output_tokens": 40}))
    state.feed(event("message_delta", usage={"output_tokens": 90}))
    # the whole message repeats the figures from its start: nothing counted twice
    state.feed({"type": "assistant", "message": {"id": "a", "usage": {"input_tokens": 1000}}})
    state.feed(start("b", 2000))
    assert state.spent_usage() == {"input_tokens": 3000, "output_tokens": 91}
    budget = JobBudget({"prices": PRICES, "max_tokens": 3091, "agent_name": "claude"})
    assert (budget.reached(state) or "").startswith("max_tokens 3,091 reached")
    spend = budget.run_spend(state)
    assert spend.cost_usd is not None and math.isclose(spend.cost_usd, (3000 + 910) / 1e6)


def test_a_result_reporting_zeros_does_not_undo_what_streamed() -> None:
    state = StreamState("claude")
    state.feed(start("a", 500))
    state.feed(
        {
            "type": "result",
            "is_error": True,
            "total_cost_usd": 0.01,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
    )
    assert state.spent_usage()["input_tokens"] == 500


def test_claude_own_guard_is_recognised() -> None:
    state = StreamState("claude")
    state.feed({"type": "result", "subtype": "error_max_budget_usd", "is_error": True})
    assert state.budget_stop


def test_codex_progress_line_usage() -> None:
    line = (
        b'2026-11-26T08:56:16Z  INFO codex_otel.log_only: event.name="codex.sse_event" '
        b"event.kind=response.completed input_token_count=307 output_token_count=40 "
        b"cached_token_count=7 cache_write_token_count=0 reasoning_token_count=0 "
        b"tool_token_count=347 model=gpt-5.5 slug=gpt-5.5"
    )
    assert progress_usage(line) == (
        {"input_tokens": 300, "output_tokens": 40, "cache_read_tokens": 7, "cache_write_tokens": 0},
        "gpt-5.5",
    )
    other = b'INFO codex_otel.log_only: event.name="codex.sse_event" event.kind=response.created'
    assert progress_usage(other) is None


def test_codex_turn_usage_takes_the_cache_out_of_the_input() -> None:
    state = StreamState("codex")
    state.feed(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 807, "cached_input_tokens": 7, "output_tokens": 130},
        }
    )
    assert state.spent_usage()["input_tokens"] == 800
    assert state.spent_usage()["cache_read_tokens"] == 7


def test_runs_and_earlier_attempts_count_together() -> None:
    spec = {
        "prices": PRICES,
        "model": "m",
        "max_cost_usd": 0.01,
        "agent_name": "codex",
        "spent_before": {"input_tokens": 4000, "cost_usd": 0.004, "model": "m"},
    }
    budget = JobBudget(spec)
    assert budget.spent.tokens == 4000 and budget.cost_left() == 0.006
    run = StreamState("codex")
    run.feed({"type": "turn.completed", "usage": {"input_tokens": 999, "output_tokens": 500}})
    assert budget.reached(run) is None  # $0.009999: under
    run.feed({"type": "turn.completed", "usage": {"input_tokens": 1001, "output_tokens": 500}})
    assert (budget.reached(run) or "").startswith("max_cost_usd 0.01 reached: spent $0.0100")
    budget.add(run)
    fields = budget.usage_fields()
    assert (fields["tokens"], fields["cost_known"], fields["model"]) == (5501, True, "m")
    assert budget.cost_left() == 0.0


def test_no_limits_never_reached() -> None:
    state = StreamState("claude")
    state.feed(start("a", 10**9))
    assert JobBudget({}).reached(state) is None
    assert JobBudget({}).cost_left() is None
