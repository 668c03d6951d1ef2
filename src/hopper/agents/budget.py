"""A job's own spending limits, followed by the driver across its runs. Standard library.

``agent.spec.json`` carries the job's ``max_cost_usd`` and ``max_tokens`` and the
config's ``[prices]`` rows. :class:`JobBudget` adds each finished run's spend
(retries, nudges and session resumes within the job count together) and, while a
run goes on, says whether the spend so far — what the finished runs spent plus
what the current run's stream has reported — has reached a limit
(:func:`hopper.core.prices.limit_reached`). The arithmetic is
:func:`hopper.core.prices.job_spend`'s, the one place usage becomes dollars.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopper.agents.stream import StreamState
from hopper.core.prices import NOTHING, Limits, Price, Spend, job_spend, limit_reached


class JobBudget:
    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.limits = Limits(spec.get("max_cost_usd"), spec.get("max_tokens"))
        rows = spec.get("prices") or {}
        self.prices = {str(model): Price.of(row) for model, row in rows.items()}
        self.agent = str(spec.get("agent_name") or "?")
        self.model: str | None = spec.get("model")  # configured; the stream's wins
        self.models: list[str] = []
        before = spec.get("spent_before") or {}  # the job's earlier attempts (job.json)
        self.spent: Spend = NOTHING  # the finished runs'
        if before:
            self.spent = job_spend(before, before.get("model"), self.prices)
            if before.get("model"):
                self.models.append(str(before["model"]))

    def run_spend(self, state: StreamState) -> Spend:
        """What the run ``state`` follows has spent so far."""
        usage = {**state.spent_usage(), "cost_usd": state.cost_usd}
        return job_spend(usage, state.model or self.model, self.prices)

    def reached(self, state: StreamState | None = None) -> str | None:
        """The detail of the limit reached by the finished runs (and ``state``'s so far),
        or None while the job is within its limits."""
        if not self.limits.any:
            return None
        spent = self.spent if state is None else self.spent + self.run_spend(state)
        return limit_reached(self.limits, spent, self.agent)

    def add(self, state: StreamState) -> None:
        """A run ended: its spend counts from now on."""
        self.spent = self.spent + self.run_spend(state)
        model = state.model or self.model
        if model and model not in self.models:
            self.models.append(model)

    def cost_left(self) -> float | None:
        """Dollars the next run may spend (for the CLI's own guard); None: no cost limit,
        or the spend so far has no known cost."""
        return self.limits.cost_left(self.spent)

    def usage_fields(self) -> dict[str, Any]:
        """agent.json's spend: tokens, cost (None when not known) and why not, model."""
        spent = self.spent
        return {
            "tokens": spent.tokens,
            "cost_usd": spent.cost_usd,
            "cost_known": spent.cost_known,
            "cost_note": spent.why_unknown,
            "model": ", ".join(self.models)[:200] or None,
        }
