"""The session host's crossing decision for one turn (sessionhost/turn.over_budget). Pure."""

from __future__ import annotations

from hopper.sessionhost.contract import TurnRequest
from hopper.sessionhost.turn import log_model, over_budget

ROW = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}


def request(**limits: object) -> TurnRequest:
    return TurnRequest("j1", "/run", "hi", **limits)  # type: ignore[arg-type]


def test_no_limit_never_stops_and_tokens_stop_at_the_limit() -> None:
    usage = {"input_tokens": 10, "output_tokens": 90}
    assert over_budget(request(), usage, None, "claude") is None
    assert over_budget(request(max_tokens=101), usage, None, "claude") is None
    detail = over_budget(request(max_tokens=100), usage, None, "claude")
    assert detail is not None and detail.startswith("max_tokens 100 reached: spent 100 tokens")


def test_the_cost_is_priced_by_the_logs_model_else_the_requests() -> None:
    usage = {"input_tokens": 10, "output_tokens": 500}  # $0.51 at ROW
    logged = request(max_cost_usd=0.5, model="other", prices={"fake": ROW})
    assert over_budget(logged, usage, "fake", "claude") == (
        "max_cost_usd 0.5 reached: spent $0.5100 (510 tokens); raise max_cost_usd in the "
        "front matter or [agents.claude]"
    )
    configured = request(max_cost_usd=0.5, model="fake", prices={"fake": ROW})
    assert over_budget(configured, usage, "unpriced", "claude") is not None
    assert over_budget(configured, {"output_tokens": 400}, "unpriced", "claude") is None
    unknown = request(max_cost_usd=0.5, prices={"fake": {"input_per_mtok": "x"}})
    assert over_budget(unknown, usage, "fake", "claude") is None  # no cost known: no stop


def test_the_model_is_the_last_assistant_entrys() -> None:
    entries = [
        {"type": "assistant", "message": {"model": "a"}},
        {"type": "user", "message": {"model": "u"}},
        {"type": "assistant", "message": {"model": "b"}},
        {"type": "assistant", "message": {"content": []}},
    ]
    assert log_model(entries) == "b"
    assert log_model([]) is None
