"""core/prices.py: usage -> tokens and dollars, and a job's own limits (pure)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from hopper.core.prices import (
    NOTHING,
    Limits,
    Price,
    Spend,
    job_spend,
    limit_reached,
    price_for,
    tokens_of,
)

GPT = Price(input_per_mtok=1.25, output_per_mtok=10.0, cache_read_per_mtok=0.125)
PRICES = {"gpt-5.5": GPT}

counts = st.integers(min_value=0, max_value=10**9)
usages = st.fixed_dictionaries(
    {},
    optional={
        "input_tokens": counts,
        "output_tokens": counts,
        "cache_read_tokens": counts,
        "cache_write_tokens": counts,
    },
)


def test_reported_cost_is_used_as_is() -> None:
    spend = job_spend({"input_tokens": 20, "output_tokens": 10, "cost_usd": 0.00028}, None, {})
    assert spend == Spend(30, 0.00028)
    assert spend.cost_known


def test_tokens_priced_by_the_model_row() -> None:
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_tokens": 2_000_000}
    spend = job_spend(usage, "gpt-5.5", PRICES)
    assert spend.tokens == 3_100_000
    assert spend.cost_usd is not None
    assert math.isclose(spend.cost_usd, 1.25 + 1.0 + 0.25)


def test_unpriced_cache_costs_as_input() -> None:
    price = Price(input_per_mtok=2.0, output_per_mtok=8.0)
    assert math.isclose(
        price.cost({"cache_read_tokens": 500_000, "cache_write_tokens": 500_000}), 2.0
    )


def test_unknown_cost_says_why() -> None:
    spend = job_spend({"input_tokens": 5}, "gpt-9", PRICES)
    assert (spend.tokens, spend.cost_usd, spend.cost_known) == (5, None, False)
    assert spend.why_unknown is not None and '[prices."gpt-9"]' in spend.why_unknown
    assert "names no model" in str(job_spend({"input_tokens": 5}, None, PRICES).why_unknown)
    assert "cost unknown" in spend.text()


def test_a_bad_reported_cost_is_not_trusted() -> None:
    for bad in (float("nan"), float("inf"), -1.0, True, "0.5"):
        assert job_spend({"cost_usd": bad}, None, {}).cost_usd is None


def test_claude_variant_suffix_finds_the_row() -> None:
    assert price_for("gpt-5.5[1m]", PRICES) is GPT
    assert price_for("gpt-5.5", PRICES) is GPT
    assert price_for(None, PRICES) is None
    assert price_for("other", PRICES) is None


def test_bad_figures_count_as_nothing() -> None:
    assert tokens_of({"input_tokens": -3, "output_tokens": "7", "cache_read_tokens": True}) == 0
    assert tokens_of(None) == 0


@given(usages, usages)
def test_spend_adds_up_across_runs(a: dict[str, int], b: dict[str, int]) -> None:
    both = {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    total = job_spend(a, "gpt-5.5", PRICES) + job_spend(b, "gpt-5.5", PRICES)
    whole = job_spend(both, "gpt-5.5", PRICES)
    assert total.tokens == whole.tokens == tokens_of(a) + tokens_of(b)
    assert total.cost_usd is not None and whole.cost_usd is not None
    assert math.isclose(total.cost_usd, whole.cost_usd, rel_tol=1e-9, abs_tol=1e-9)


@given(usages)
def test_an_unknown_cost_stays_unknown_when_added(a: dict[str, int]) -> None:
    unknown = job_spend(a, "gpt-9", PRICES)
    assert (NOTHING + unknown).cost_usd is None
    assert (unknown + Spend(1, 0.5)).cost_usd is None
    assert (unknown + Spend(1, 0.5)).tokens == tokens_of(a) + 1


@given(usages, st.floats(min_value=0.0, max_value=1e4, allow_nan=False))
def test_cost_limit_reached_exactly_when_spent_at_or_past_it(
    a: dict[str, int], limit: float
) -> None:
    spend = job_spend(a, "gpt-5.5", PRICES)
    detail = limit_reached(Limits(max_cost_usd=limit), spend, "codex")
    assert spend.cost_usd is not None
    assert (detail is not None) == (spend.cost_usd >= limit)


def test_the_detail_names_the_limit_the_spend_and_the_fix() -> None:
    detail = limit_reached(Limits(max_cost_usd=0.05), Spend(1234, 0.0612), "claude")
    assert detail == (
        "max_cost_usd 0.05 reached: spent $0.0612 (1,234 tokens); "
        "raise max_cost_usd in the front matter or [agents.claude]"
    )
    tokens = limit_reached(Limits(max_tokens=1000), Spend(1500, None, "why"), "codex")
    assert tokens is not None and tokens.startswith("max_tokens 1,000 reached: spent 1,500 tokens")
    assert "raise max_tokens in the front matter or [agents.codex]" in tokens


def test_an_unknown_cost_never_reaches_a_cost_limit() -> None:
    assert limit_reached(Limits(max_cost_usd=0.0), Spend(10, None), "codex") is None
    assert limit_reached(Limits(), Spend(10**9, 1e9), "codex") is None


def test_cost_left() -> None:
    assert Limits(max_cost_usd=1.0).cost_left(Spend(1, 0.25)) == 0.75
    assert Limits(max_cost_usd=1.0).cost_left(Spend(1, 2.0)) == 0.0
    assert Limits(max_cost_usd=1.0).cost_left(Spend(1, None)) is None
    assert Limits().cost_left(Spend(1, 0.25)) is None
