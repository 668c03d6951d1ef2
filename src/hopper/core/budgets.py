"""Budgets per scope and period: spend so far + limits + now -> allow or hold. Pure.

Theory of operation. ``[budgets]`` in the config sets limits (:class:`Rule`)
on what agent jobs spend, in US dollars or in tokens, per day, week or month,
over a scope: every agent job (``all``), one group, one agent or one session.
JobSpend is what finished jobs reported (``usage`` in job.json), one
:class:`JobSpend` per job, dated by when the job finished; the shell reads them
from the root's spend ledger (store/spend.py), which every watcher shares.

:func:`assess` sums, for each rule, the spend of the jobs it covers that
finished since its period began, in the configured time zone (a day starts
at 00:00 there, a week on Monday, a month on the 1st), and says whether the
rule is *reached* (spent >= limit) and when its period ends (the reset).
:func:`hold_reason` then says why a queued agent job of a reached scope
waits; the scheduler (core/schedule.py) holds it, bash jobs never. A new
period needs no event: the next :func:`assess` after the reset counts
nothing from the period before.

A job's tokens and cost are what core/prices.py makes of its usage (input,
output and cache tokens together; the reported or priced cost). A job whose
cost is not known (an agent reporting tokens only, with no price for its
model) counts against token budgets only; a dollar budget says how many such
jobs it could not count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal

Kind = Literal["all", "group", "agent", "session"]
Period = Literal["day", "week", "month"]
Unit = Literal["usd", "tokens"]

PERIOD_WORDS: dict[Period, str] = {"day": "daily", "week": "weekly", "month": "monthly"}
THIS: dict[Period, str] = {"day": "today", "week": "this week", "month": "this month"}
TABLES: dict[Kind, str] = {"group": "groups", "agent": "agents", "session": "sessions"}
BASH = "bash"


@dataclass(frozen=True)
class Rule:
    """One limit: ``[budgets.groups.app] daily_usd = 5`` is
    ``Rule("group", "app", "day", "usd", 5.0)``."""

    kind: Kind
    name: str | None  # None for kind "all"
    period: Period
    unit: Unit
    limit: float

    @property
    def scope(self) -> str:
        """``all``, ``group:app``, ``agent:codex``, ``session:auth``."""
        return "all" if self.name is None else f"{self.kind}:{self.name}"

    @property
    def label(self) -> str:
        return "all agent jobs" if self.name is None else f"{self.kind} {self.name}"

    @property
    def key(self) -> str:
        """The config key that sets it: ``[budgets.groups.app] daily_usd``."""
        table = "[budgets]" if self.name is None else f"[budgets.{TABLES[self.kind]}.{self.name}]"
        return f"{table} {PERIOD_WORDS[self.period]}_{self.unit}"

    def covers(self, agent: str, group: str | None, session: str | None) -> bool:
        if agent == BASH:
            return False
        if self.kind == "all":
            return True
        if self.kind == "group":
            return group == self.name
        if self.kind == "agent":
            return agent == self.name
        return session == self.name


@dataclass(frozen=True)
class JobSpend:
    """What one finished job spent: its cost when known, its tokens when reported."""

    job_id: str
    finished_at: datetime  # aware
    agent: str
    group: str | None
    session: str | None
    cost_usd: float | None
    tokens: int | None


@dataclass(frozen=True)
class Budget:
    """A rule's state now: what its scope spent this period, and whether that is enough."""

    rule: Rule
    since: datetime  # the period's start (UTC)
    resets_at: datetime  # the next period's start (UTC)
    spent: float  # dollars or tokens
    jobs: int  # jobs of the scope that finished this period
    uncounted: int  # dollar rules: jobs of the scope whose cost is not known
    crossed_by: str | None = None  # the job whose spend reached the limit (None: not reached)

    @property
    def reached(self) -> bool:
        return self.spent >= self.rule.limit

    @property
    def remaining(self) -> float:
        return max(0.0, self.rule.limit - self.spent)


def amount(value: float, unit: Unit) -> str:
    """``$5.02`` or ``2,000,512 tokens``."""
    if unit == "usd":
        return f"${value:,.2f}"
    return f"{round(value):,} tokens"


def zone_name(zone: tzinfo) -> str:
    key = getattr(zone, "key", None)
    return key if isinstance(key, str) and key else "local time"


def reset_text(budget: Budget, zone: tzinfo) -> str:
    """``00:00 Europe/Berlin``, ``Mon 00:00 …``, ``Dec 1 00:00 …``."""
    at = budget.resets_at.astimezone(zone)
    when = {
        "day": "00:00",
        "week": f"{at:%a} 00:00",
        "month": f"{at:%b} {at.day} 00:00",
    }[budget.rule.period]
    return f"{when} {zone_name(zone)}"


def reason(budget: Budget, zone: tzinfo) -> str:
    """Why the scope's queued agent jobs wait, and how to go on.

    ``waiting: group app spent $5.02 of $5.00 today; resets 00:00 Europe/Berlin;
    raise [budgets.groups.app] daily_usd``
    """
    rule = budget.rule
    return (
        f"waiting: {rule.label} spent {amount(budget.spent, rule.unit)} of "
        f"{amount(rule.limit, rule.unit)} {THIS[rule.period]}; "
        f"resets {reset_text(budget, zone)}; raise {rule.key}"
    )


def period_start(period: Period, now: datetime, zone: tzinfo) -> datetime:
    """The start of the period holding ``now`` (aware): 00:00 in ``zone``, in UTC."""
    return _midnight(_first_day(period, now, zone), zone)


def period_end(period: Period, now: datetime, zone: tzinfo) -> datetime:
    """The start of the next period: when a budget of ``period`` resets (UTC)."""
    first = _first_day(period, now, zone)
    if period == "day":
        nxt = first + timedelta(days=1)
    elif period == "week":
        nxt = first + timedelta(days=7)
    else:
        nxt = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return _midnight(nxt, zone)


def _first_day(period: Period, now: datetime, zone: tzinfo) -> date:
    """The period's first day, on the zone's calendar."""
    day = now.astimezone(zone).date()
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    return day


def _midnight(day: date, zone: tzinfo) -> datetime:
    """00:00 of ``day`` in ``zone``, in UTC (instants, so that subtraction and
    comparison never go by wall time); where a clock change skips midnight, the
    first instant of the day (the skipped time is read with the offset before)."""
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def earliest_start(rules: Iterable[Rule], now: datetime, zone: tzinfo) -> datetime | None:
    """Where the longest period of ``rules`` began: spend before it counts for none."""
    starts = [period_start(r.period, now, zone) for r in rules]
    return min(starts) if starts else None


def job_spend(rule: Rule, spend: JobSpend) -> float | None:
    """What ``spend`` counts against ``rule`` (None: not known in its unit)."""
    if rule.unit == "usd":
        return spend.cost_usd
    return None if spend.tokens is None else float(spend.tokens)


def assess(
    rules: Sequence[Rule], spends: Iterable[JobSpend], now: datetime, zone: tzinfo
) -> list[Budget]:
    """Each rule's spend this period (finished_at in [period start, now]), in rule order."""
    items = sorted(spends, key=lambda s: (s.finished_at, s.job_id))  # in the order spent
    out: list[Budget] = []
    for rule in rules:
        since = period_start(rule.period, now, zone)
        spent, jobs, uncounted = 0.0, 0, 0
        crossed_by: str | None = None
        for s in items:
            if not since <= s.finished_at <= now or not rule.covers(s.agent, s.group, s.session):
                continue
            jobs += 1
            value = job_spend(rule, s)
            if value is None:
                uncounted += 1
                continue
            spent += value
            if crossed_by is None and spent >= rule.limit:
                crossed_by = s.job_id
        end = period_end(rule.period, now, zone)
        out.append(Budget(rule, since, end, spent, jobs, uncounted, crossed_by))
    return out


def hold_reason(
    budgets: Sequence[Budget], agent: str, group: str | None, session: str | None, zone: tzinfo
) -> str | None:
    """Why a queued job of this agent, group and session waits (None: it may start).

    The reached budget that resets last is named: raising or waiting out any
    earlier one would not let the job start anyway.
    """
    reached = [b for b in budgets if b.reached and b.rule.covers(agent, group, session)]
    if not reached:
        return None
    return reason(max(reached, key=lambda b: b.resets_at), zone)


@dataclass(frozen=True)
class Holds:
    """The reached budgets, for the scheduler: which queued jobs wait, and why."""

    budgets: tuple[Budget, ...] = ()
    zone: tzinfo | None = None

    def why(self, agent: str, group: str | None, session: str | None) -> str | None:
        if not self.budgets or self.zone is None:
            return None
        return hold_reason(self.budgets, agent, group, session, self.zone)
