"""The budgets as the read commands and the dashboard show them: one row per budget.

``hopper budgets``, ``hopper usage``, ``hopper status``, ``hopper watch`` and
``/api/budgets`` all build their figures here, from the same ledger the
watchers read (store/spend.py) and the same pure sums (core/budgets.py), so
they agree with each other and with what holds jobs, to the cent.

The config's ``[budgets]`` is read with tomllib and validated by its own
model only (:func:`budgets_from_config`): the read commands stay fast and a
typo elsewhere in the config does not hide the budgets.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from pydantic import ValidationError

from hopper.budget_config import Budgets
from hopper.budgetwatch import current, zone_of
from hopper.configfile import CONFIG_LIMIT, config_path
from hopper.core.budgets import Budget, Period, Unit, amount, reason, reset_text, zone_name
from hopper.core.selection import JobFilter
from hopper.core.states import JobState
from hopper.errors import ConfigError
from hopper.store.index import JobIndex
from hopper.store.layout import Layout
from hopper.store.saferead import UnreadableFile, read_text


@dataclass(frozen=True)
class QueuedJob:
    """What decides whether a budget holds a queued job."""

    id: str
    agent: str
    group: str | None
    session: str | None


@dataclass(frozen=True)
class BudgetRow:
    scope: str  # all, group:app, agent:codex, session:x
    kind: str
    name: str | None
    period: Period
    unit: Unit
    limit: float
    spent: float
    remaining: float
    jobs: int  # jobs of the scope that finished this period
    uncounted: int  # usd: those whose cost is not known
    reached: bool
    held: int  # queued agent jobs of the scope waiting for it
    since: str  # ISO, UTC
    resets_at: str  # ISO, UTC
    resets: str  # "00:00 Europe/Berlin"
    key: str  # the config key that sets it
    reason: str | None  # why its queued jobs wait, when reached


@dataclass(frozen=True)
class BudgetReport:
    timezone: str
    on_budget: str
    rows: list[BudgetRow]

    def as_json(self) -> dict[str, Any]:
        return {
            "timezone": self.timezone,
            "on_budget": self.on_budget,
            "budgets": [asdict(r) for r in self.rows],
        }

    def held_lines(self) -> list[str]:
        """One line per reached budget: why its queued agent jobs wait, and how many."""
        out: list[str] = []
        for row in self.rows:
            if not row.reached or not row.reason:
                continue
            if row.held:
                jobs = f"{row.held} queued agent job{'s' if row.held != 1 else ''} held"
                out.append(f"{row.reason} ({jobs})")
            else:
                out.append("budget reached: " + row.reason.removeprefix("waiting: "))
        return out

    def short_lines(self) -> list[str]:
        """For a narrow screen (``hopper watch``): the count first, then the reason."""
        return [
            f"{r.held} held: {r.reason.removeprefix('waiting: ')}"
            for r in self.rows
            if r.reached and r.reason
        ]


def budgets_from_config(cli_config: str | None, env: Mapping[str, str]) -> Budgets | None:
    """The config's ``[budgets]`` (None: no config or no budgets). Raises
    :class:`ConfigError` naming the file and key for a table the model refuses."""
    path = config_path(cli_config, env)
    if path is None:
        return None
    try:
        raw: Any = tomllib.loads(read_text(path.resolve(), CONFIG_LIMIT))
    except (OSError, UnreadableFile, tomllib.TOMLDecodeError, RecursionError):
        return None  # the commands that load the whole config say what is wrong
    table = raw.get("budgets") if isinstance(raw, dict) else None
    if table is None:
        return None
    try:
        budgets = Budgets.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(("budgets", *(str(p) for p in err["loc"])))
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"key {key!r}: {msg}", path=path) from None
    return budgets if budgets.all_rules() else None


def report(
    layout: Layout, budgets: Budgets, now: datetime, queued: Iterable[QueuedJob] = ()
) -> BudgetReport:
    zone = zone_of(budgets)
    states = current(layout, budgets, now)
    waiting = [q for q in queued if q.agent != "bash"]
    return BudgetReport(
        timezone=zone_name(zone),
        on_budget=budgets.on_budget,
        rows=[_row(b, zone, waiting) for b in states],
    )


def _row(b: Budget, zone: tzinfo, queued: list[QueuedJob]) -> BudgetRow:
    rule = b.rule
    held = sum(1 for q in queued if rule.covers(q.agent, q.group, q.session)) if b.reached else 0
    return BudgetRow(
        scope=rule.scope,
        kind=rule.kind,
        name=rule.name,
        period=rule.period,
        unit=rule.unit,
        limit=rule.limit,
        spent=round(b.spent, 6) if rule.unit == "usd" else b.spent,
        remaining=round(b.remaining, 6) if rule.unit == "usd" else b.remaining,
        jobs=b.jobs,
        uncounted=b.uncounted,
        reached=b.reached,
        held=held,
        since=b.since.isoformat(),
        resets_at=b.resets_at.isoformat(),
        resets=reset_text(b, zone),
        key=rule.key,
        reason=reason(b, zone) if b.reached else None,
    )


def queued_of(texts: Iterable[str]) -> list[QueuedJob]:
    """Queued jobs from their job.json texts (the index keeps them for active jobs)."""
    out: list[QueuedJob] = []
    for text in texts:
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if not isinstance(doc, dict) or doc.get("state") != "queued":
            continue
        group, session = doc.get("group"), doc.get("session")
        out.append(
            QueuedJob(
                str(doc.get("id")),
                str(doc.get("agent")),
                group if isinstance(group, str) else None,
                session if isinstance(session, str) else None,
            )
        )
    return out


def cells(row: BudgetRow) -> tuple[str, ...]:
    """SCOPE PERIOD LIMIT SPENT REMAINING JOBS HELD RESETS, for a table."""
    unknown = f" (+{row.uncounted} cost unknown)" if row.uncounted else ""
    return (
        row.scope,
        row.period,
        amount(row.limit, row.unit),
        amount(row.spent, row.unit) + unknown,
        amount(row.remaining, row.unit),
        str(row.jobs),
        str(row.held) if row.reached else "-",
        row.resets,
    )


COLUMNS = ("SCOPE", "PERIOD", "LIMIT", "SPENT", "REMAINING", "JOBS", "HELD", "RESETS")


def queued_job_texts(index: JobIndex) -> list[QueuedJob]:
    """The queued jobs the index knows, with what a budget looks at (agent, group, session)."""
    ids = [j.id for j in index.jobs(JobFilter(states=frozenset({JobState.QUEUED})))]
    return queued_of(index.raw(ids)) if ids else []


def held_news(layout: Layout, cli_config: str | None, index: JobIndex) -> list[str]:
    """``hopper status`` and ``watch``: a line per reached budget (none without budgets;
    a ``[budgets]`` the model refuses is one line saying so)."""
    try:
        budgets = budgets_from_config(cli_config, os.environ)
    except ConfigError as exc:
        return [f"budgets: {exc.render().splitlines()[0]}"]
    if budgets is None:
        return []
    found = report(layout, budgets, datetime.now(UTC))
    if not any(r.reached for r in found.rows):
        return []
    return report(layout, budgets, datetime.now(UTC), queued_job_texts(index)).held_lines()
