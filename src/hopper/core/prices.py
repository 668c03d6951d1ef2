"""What an agent spent: its token usage -> tokens and dollars, and a job's limits. Pure.

Standard library only (the job driver, ``hopper.agents.drive``, imports it).

Theory of operation. Every agent reports tokens; only Claude Code reports a
cost (``total_cost_usd``, priced by the CLI itself). :func:`job_spend` is the
one place a usage becomes a :class:`Spend`: a reported cost is used as it is;
otherwise the config's ``[prices."<model>"]`` row prices the tokens; otherwise
the cost is not known, and says why, and the job counts against token limits
only. Token figures follow one meaning for every agent: ``input_tokens`` are the
input tokens not read from a cache (Codex's cached tokens are taken out of its
input when its stream is read), so the four figures add up to the tokens the
model processed (:func:`tokens_of`).

:func:`limit_reached` decides a job's own limits (``max_cost_usd``,
``max_tokens``) on a spend and says which one, how much, and how to raise it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# The Anthropic API's names for them (Claude's stream-json and its session log).
ANTHROPIC_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}
MTOK = 1_000_000.0


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens of one model (``[prices."<model>"]``). Cache reads and
    writes cost as much as input unless priced (a budget errs on the side of spending less)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Price:
        """A row as the config (or agent.spec.json) holds it."""
        return cls(
            float(row["input_per_mtok"]),
            float(row["output_per_mtok"]),
            _opt_float(row.get("cache_read_per_mtok")),
            _opt_float(row.get("cache_write_per_mtok")),
        )

    def cost(self, usage: Mapping[str, Any]) -> float:
        """The dollars ``usage``'s tokens cost at this price."""
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        return (
            _count(usage, "input_tokens") * self.input_per_mtok
            + _count(usage, "output_tokens") * self.output_per_mtok
            + _count(usage, "cache_read_tokens") * read
            + _count(usage, "cache_write_tokens") * write
        ) / MTOK


@dataclass(frozen=True)
class Spend:
    """What a job (or one run of its agent) spent.

    ``cost_usd`` is None when the cost is not known (``cost_known`` False, and
    ``why_unknown`` says why); ``tokens`` is always known (0 when nothing was reported).
    """

    tokens: int = 0
    cost_usd: float | None = 0.0
    why_unknown: str | None = None

    @property
    def cost_known(self) -> bool:
        return self.cost_usd is not None

    def __add__(self, other: Spend) -> Spend:
        """Two spends together: the cost is known only when both are."""
        if self.cost_usd is None or other.cost_usd is None:
            why = self.why_unknown or other.why_unknown
            return Spend(self.tokens + other.tokens, None, why)
        return Spend(self.tokens + other.tokens, self.cost_usd + other.cost_usd)

    def text(self) -> str:
        """``$0.0612 (12,345 tokens)``, or ``12,345 tokens (cost unknown: why)``."""
        if self.cost_usd is None:
            why = f": {self.why_unknown}" if self.why_unknown else ""
            return f"{self.tokens:,} tokens (cost unknown{why})"
        return f"${self.cost_usd:.4f} ({self.tokens:,} tokens)"


NOTHING = Spend()


def tokens_of(usage: Mapping[str, Any] | None) -> int:
    """Input, output, cache-read and cache-write tokens together (absent figures: 0)."""
    return sum(_count(usage or {}, key) for key in TOKEN_KEYS)


def price_for(model: str | None, prices: Mapping[str, Price]) -> Price | None:
    """The row for ``model``: its exact name, else without a ``[…]`` suffix (Claude Code
    names a variant ``claude-opus-4-8[1m]``); None when the config prices it not."""
    if not model:
        return None
    found = prices.get(model)
    if found is None and model.endswith("]") and "[" in model:
        found = prices.get(model[: model.index("[")])
    return found


def job_spend(
    usage: Mapping[str, Any] | None, model: str | None, prices: Mapping[str, Price]
) -> Spend:
    """What ``usage`` (job.json's or agent.json's ``usage``, or one run's) cost.

    A reported ``cost_usd`` (a finite number, 0 or more) is used as it is; else the
    tokens are priced by ``prices[model]``; else the cost is unknown and says why.
    """
    usage = usage or {}
    tokens = tokens_of(usage)
    reported = usage.get("cost_usd")
    if isinstance(reported, int | float) and not isinstance(reported, bool):
        cost = float(reported)
        if math.isfinite(cost) and cost >= 0:
            return Spend(tokens, cost)
    price = price_for(model, prices)
    if price is not None:
        return Spend(tokens, price.cost(usage))
    if not model:
        return Spend(tokens, None, "the agent reports tokens only and names no model")
    return Spend(
        tokens, None, f'the agent reports tokens only; no [prices."{model}"] in the config'
    )


@dataclass(frozen=True)
class Limits:
    """A job's own limits (``max_cost_usd``, ``max_tokens``); None: no limit."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None

    @property
    def any(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None

    def cost_left(self, spent: Spend) -> float | None:
        """Dollars still allowed (0 or more); None without a cost limit or a known cost."""
        if self.max_cost_usd is None or spent.cost_usd is None:
            return None
        return max(0.0, self.max_cost_usd - spent.cost_usd)


def limit_reached(limits: Limits, spent: Spend, agent: str) -> str | None:
    """The detail of a job stopped by its own limit, or None while within them.

    A limit is reached when the spend is at it or past it. An unknown cost never
    reaches ``max_cost_usd`` (admission refuses a cost limit it cannot follow)."""
    where = f"in the front matter or [agents.{agent}]"
    if (
        limits.max_cost_usd is not None
        and spent.cost_usd is not None
        and spent.cost_usd >= limits.max_cost_usd
    ):
        return (
            f"max_cost_usd {limits.max_cost_usd:g} reached: spent {spent.text()}; "
            f"raise max_cost_usd {where}"
        )
    if limits.max_tokens is not None and spent.tokens >= limits.max_tokens:
        return (
            f"max_tokens {limits.max_tokens:,} reached: spent {spent.text()}; "
            f"raise max_tokens {where}"
        )
    return None


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
