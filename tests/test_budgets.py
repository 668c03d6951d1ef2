"""core/budgets.py: periods in a zone, spend per scope, and the reason a job waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from hopper.core.budgets import (
    Holds,
    JobSpend,
    Rule,
    assess,
    hold_reason,
    period_end,
    period_start,
)

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def spend(
    job: str,
    finished: str,
    *,
    agent: str = "claude",
    group: str | None = "app",
    session: str | None = None,
    usd: float | None = 1.0,
    tokens: int | None = 1000,
) -> JobSpend:
    return JobSpend(job, at(finished), agent, group, session, usd, tokens)


def test_a_day_starts_at_midnight_in_the_zone_not_in_utc() -> None:
    now = at("2026-11-26T23:30:00+00:00")  # already the 27th in Berlin
    assert period_start("day", now, BERLIN) == at("2026-11-27T00:00:00+01:00")
    assert period_end("day", now, BERLIN) == at("2026-11-28T00:00:00+01:00")
    assert period_start("day", now, UTC) == at("2026-11-26T00:00:00+00:00")


def test_weeks_start_on_monday_and_months_on_the_first() -> None:
    now = at("2026-12-31T12:00:00+01:00")  # a Thursday
    assert period_start("week", now, BERLIN) == at("2026-12-28T00:00:00+01:00")
    assert period_end("week", now, BERLIN) == at("2027-01-04T00:00:00+01:00")
    assert period_start("month", now, BERLIN) == at("2026-12-01T00:00:00+01:00")
    assert period_end("month", now, BERLIN) == at("2027-01-01T00:00:00+01:00")


def test_a_day_across_a_clock_change_is_23_or_25_hours() -> None:
    spring = at("2026-03-29T12:00:00+02:00")
    assert period_end("day", spring, BERLIN) - period_start("day", spring, BERLIN) == timedelta(
        hours=23
    )
    autumn = at("2026-10-25T12:00:00+01:00")
    assert period_end("day", autumn, BERLIN) - period_start("day", autumn, BERLIN) == timedelta(
        hours=25
    )


def test_midnight_skipped_by_a_clock_change_starts_the_day_at_the_first_instant() -> None:
    santiago = ZoneInfo("America/Santiago")  # 2026-09-06 00:00 -> 01:00
    start = period_start("day", at("2026-09-06T12:00:00-03:00"), santiago)
    assert start == at("2026-09-06T04:00:00+00:00")
    assert start.astimezone(santiago).hour == 1


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)))
def test_now_is_always_inside_its_period(naive: datetime) -> None:
    now = naive.replace(tzinfo=UTC)
    for zone in (BERLIN, UTC, ZoneInfo("America/Santiago"), ZoneInfo("Pacific/Apia")):
        for period in ("day", "week", "month"):
            assert period_start(period, now, zone) <= now < period_end(period, now, zone)  # type: ignore[arg-type]


def test_spend_is_summed_per_scope_for_this_period_only() -> None:
    rules = [
        Rule("all", None, "day", "usd", 20.0),
        Rule("group", "app", "day", "usd", 5.0),
        Rule("agent", "codex", "day", "tokens", 2000.0),
        Rule("session", "s", "week", "usd", 3.0),
    ]
    spends = [
        spend("a", "2026-11-26T09:00:00+01:00", usd=2.5),
        spend("b", "2026-11-26T10:00:00+01:00", usd=2.52),
        spend("c", "2026-11-25T23:59:59+01:00", usd=100.0),  # yesterday in Berlin
        spend("d", "2026-11-26T11:00:00+01:00", agent="codex", group="web", usd=None, tokens=2500),
        spend("e", "2026-11-24T11:00:00+01:00", session="s", group=None, usd=1.0),  # Tuesday
    ]
    now = at("2026-11-26T12:00:00+01:00")
    every, app, codex, session = assess(rules, spends, now, BERLIN)
    assert (every.spent, every.jobs, every.uncounted) == (5.02, 3, 1)  # d's cost unknown
    assert (app.spent, app.jobs, app.reached) == (5.02, 2, True)
    assert (app.crossed_by, every.crossed_by, codex.crossed_by) == ("b", None, "d")
    assert (codex.spent, codex.reached, codex.remaining) == (2500.0, True, 0.0)
    assert (session.spent, session.jobs, session.reached) == (1.0, 1, False)
    assert session.remaining == 2.0


def test_the_reason_names_scope_spend_reset_and_key() -> None:
    rules = [Rule("group", "app", "day", "usd", 5.0)]
    budgets = assess(
        rules,
        [spend("a", "2026-11-26T09:00:00+01:00", usd=5.02)],
        at("2026-11-26T12:00+01:00"),
        BERLIN,
    )
    assert hold_reason(budgets, "claude", "app", None, BERLIN) == (
        "waiting: group app spent $5.02 of $5.00 today; resets 00:00 Europe/Berlin; "
        "raise [budgets.groups.app] daily_usd"
    )
    assert hold_reason(budgets, "claude", "web", None, BERLIN) is None  # another scope
    assert hold_reason(budgets, "bash", "app", None, BERLIN) is None  # bash runs on


def test_the_reached_budget_that_resets_last_is_named() -> None:
    rules = [
        Rule("all", None, "day", "tokens", 100.0),
        Rule("agent", "codex", "month", "usd", 1.0),
    ]
    spends = [spend("a", "2026-11-26T09:00:00+01:00", agent="codex", usd=3.0, tokens=5000)]
    budgets = assess(rules, spends, at("2026-11-26T12:00+01:00"), BERLIN)
    assert Holds(tuple(budgets), BERLIN).why("codex", None, None) == (
        "waiting: agent codex spent $3.00 of $1.00 this month; resets Dec 1 00:00 "
        "Europe/Berlin; raise [budgets.agents.codex] monthly_usd"
    )
    assert Holds(tuple(budgets), BERLIN).why("claude", None, None) == (
        "waiting: all agent jobs spent 5,000 tokens of 100 tokens today; resets 00:00 "
        "Europe/Berlin; raise [budgets] daily_tokens"
    )
    assert Holds().why("claude", None, None) is None


def test_a_new_day_releases_the_hold() -> None:
    rules = [Rule("group", "app", "day", "usd", 5.0)]
    spends = [spend("a", "2026-11-26T23:00:00+01:00", usd=9.0)]
    late = assess(rules, spends, at("2026-11-26T23:59:59+01:00"), BERLIN)
    assert late[0].reached
    assert late[0].resets_at == at("2026-11-27T00:00:00+01:00")
    after = assess(rules, spends, at("2026-11-27T00:00:00+01:00"), BERLIN)
    assert (after[0].spent, after[0].reached) == (0.0, False)
