"""The watcher's side of the budgets: the ledger read, core/budgets.py asked, the news told.

Each turn that schedules, :meth:`BudgetWatch.holds` gives the scheduler the
budgets reached now (core/schedule.py holds their scopes' queued agent
jobs). The spend comes from the root's shared ledger (store/spend.py), so
a budget another watcher's jobs used up holds this watcher's jobs too. The
ledger is looked at every :data:`CHECK_INTERVAL` seconds (a ``stat`` per day
folder when nothing was filed), at once after one of this watcher's jobs
ended, and again just before an agent job under a budget starts, so a
budget reached by another watcher's job a moment ago holds it. With no ``[budgets]``
nothing is read at all.

A budget that is reached is announced once per period, whichever watcher
sees it first: the one that creates its marker
(``.hopper/spend/reached/<period start>.<scope>.<period>.<unit>``, made
exclusively) logs it and fires the hooks (budgetnews.py: ``[hooks] on_budget``,
the webhook's ``budget_reached`` event).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from hopper.budget_config import Budgets
from hopper.clock import Clock, local_zone
from hopper.core.budgets import Budget, Holds, Rule, assess, earliest_start, reason
from hopper.core.record import JobRecord
from hopper.store.layout import Layout
from hopper.store.leases import create_exclusive, scope_name
from hopper.store.spend import SPEND_DIR, SpendLedger

log = logging.getLogger(__name__)

CHECK_INTERVAL = 0.2  # seconds between looks at the ledger (monotonic)
REACHED_DIR = "reached"


def zone_of(budgets: Budgets) -> tzinfo:
    """The configured zone, else the host's."""
    return budgets.zone() or local_zone()


def current(
    layout: Layout, budgets: Budgets, now: datetime, ledger: SpendLedger | None = None
) -> list[Budget]:
    """Every budget's state at ``now`` (the read commands' way in: one look)."""
    rules = budgets.all_rules()
    zone = zone_of(budgets)
    since = earliest_start(rules, now, zone)
    if since is None:
        return []
    spends = (ledger or SpendLedger(layout)).spends(since, now)
    return assess(rules, spends, now, zone)


@dataclass
class BudgetWatch:
    layout: Layout
    budgets: Budgets
    clock: Clock
    rules: list[Rule] = field(init=False)
    zone: tzinfo = field(init=False)
    ledger: SpendLedger = field(init=False)
    _holds: Holds = field(init=False, default_factory=Holds)
    _next: float = field(init=False, default=0.0)
    _announced: set[str] = field(init=False, default_factory=set)
    _key: tuple[int, datetime] | None = field(init=False, default=None)
    _until: datetime = field(init=False, default=datetime.max.replace(tzinfo=UTC))
    news: list[Budget] = field(init=False, default_factory=list)  # reached, told by no one yet

    def __post_init__(self) -> None:
        self.rules = self.budgets.all_rules()
        self.zone = zone_of(self.budgets)
        self.ledger = SpendLedger(self.layout)

    def covers_any(self, records: Iterable[JobRecord | None]) -> bool:
        """Is any of these a job some budget covers (an agent job in a budgeted scope)?"""
        if not self.rules:
            return False
        return any(
            r is not None and any(rule.covers(r.agent, r.group, r.session) for rule in self.rules)
            for r in records
        )

    def holds(self, *, fresh: bool = False) -> Holds:
        """The budgets reached now (cached for CHECK_INTERVAL unless ``fresh``)."""
        if not self.rules:
            return self._holds
        mono = self.clock.monotonic()
        if mono < self._next and not fresh:
            return self._holds
        self._next = mono + CHECK_INTERVAL
        now = self.clock.now()
        since = earliest_start(self.rules, now, self.zone)
        assert since is not None  # rules are set
        spends = self.ledger.spends(since, now)
        key = (self.ledger.version, since)
        if key == self._key and now < self._until:
            return self._holds  # no new spend, no period turned: the same verdicts
        budgets = assess(self.rules, spends, now, self.zone)
        self._key, self._until = key, min(b.resets_at for b in budgets)
        reached = tuple(b for b in budgets if b.reached)
        self._holds = Holds(reached, self.zone)
        for budget in reached:
            self._announce(budget)
        return self._holds

    def refresh(self) -> None:
        """Look at the ledger on the next :meth:`holds` (this watcher just filed spend)."""
        self._next = 0.0

    def over(self, running: Sequence[JobRecord]) -> list[tuple[JobRecord, str]]:
        """``on_budget = "stop"``: the running agent jobs of a reached scope, and why."""
        if self.budgets.on_budget != "stop" or not self.holds().budgets:
            return []
        out: list[tuple[JobRecord, str]] = []
        for record in running:
            why = self._holds.why(record.agent, record.group, record.session)
            if why is not None:
                out.append((record, why.replace("waiting: ", "", 1)))
        return out

    def _announce(self, budget: Budget) -> None:
        """Log a reached budget once per period across every watcher on the root."""
        rule = budget.rule
        scope = scope_name(rule.kind, rule.name or "")
        key = f"{budget.since:%Y%m%dT%H%M}.{scope}.{rule.period}.{rule.unit}"
        if key in self._announced:
            return
        self._announced.add(key)
        folder = self.layout.state_dir / SPEND_DIR / REACHED_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            first = create_exclusive(folder / key, reason(budget, self.zone).encode() + b"\n")
        except OSError as exc:
            log.warning(
                "budget %s reached; its marker cannot be made in %s: %s",
                rule.key,
                folder,
                os.strerror(exc.errno or 0),
            )
            return
        if first:
            log.warning("budget reached: %s", reason(budget, self.zone).removeprefix("waiting: "))
            self.news.append(budget)
