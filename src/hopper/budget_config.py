"""``[budgets]`` in the config: spend limits per scope and period (docs/budgets.md).

```toml
[budgets]
daily_usd = 20                 # every agent job together
timezone = "Europe/Berlin"     # when a day starts; default: the host's local zone
on_budget = "finish"           # running jobs of a reached scope finish, or "stop"
[budgets.groups.app]
daily_usd = 5
[budgets.agents.codex]
daily_tokens = 2_000_000
[budgets.sessions.auth-refactor]
weekly_usd = 10
```

Validated here, turned into the pure core's rules (core/budgets.py) by
:meth:`Budgets.rules`.
"""

from __future__ import annotations

from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hopper.core.budgets import Kind, Period, Rule, Unit

Dollars = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Tokens = Annotated[int, Field(gt=0)]

LIMIT_KEYS: tuple[tuple[str, Period, Unit], ...] = (
    ("daily_usd", "day", "usd"),
    ("weekly_usd", "week", "usd"),
    ("monthly_usd", "month", "usd"),
    ("daily_tokens", "day", "tokens"),
    ("weekly_tokens", "week", "tokens"),
    ("monthly_tokens", "month", "tokens"),
)


class BudgetLimits(BaseModel):
    """The limits of one scope: any of daily / weekly / monthly, in USD or tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    daily_usd: Dollars | None = Field(None, description="US dollars a day")
    weekly_usd: Dollars | None = Field(None, description="US dollars a week (from Monday)")
    monthly_usd: Dollars | None = Field(None, description="US dollars a month (from the 1st)")
    daily_tokens: Tokens | None = Field(None, description="tokens a day")
    weekly_tokens: Tokens | None = Field(None, description="tokens a week (from Monday)")
    monthly_tokens: Tokens | None = Field(None, description="tokens a month (from the 1st)")

    def rules(self, kind: Kind, name: str | None) -> list[Rule]:
        out: list[Rule] = []
        for key, period, unit in LIMIT_KEYS:
            value = getattr(self, key)
            if value is not None:
                out.append(Rule(kind, name, period, unit, float(value)))
        return out


class ScopeLimits(BudgetLimits):
    """``[budgets.groups.NAME]`` and the like: at least one limit."""

    @model_validator(mode="after")
    def _some_limit(self) -> ScopeLimits:
        if not self.rules("all", None):
            keys = ", ".join(k for k, _, _ in LIMIT_KEYS)
            raise ValueError(f"sets no limit; give one of {keys}, or remove the table")
        return self


class Budgets(BudgetLimits):
    """``[budgets]``: the overall limits, the per-scope tables, the zone and the policy."""

    timezone: str | None = Field(
        None,
        description="IANA zone where days, weeks and months begin (Europe/Berlin); "
        "default: the host's local zone",
    )
    on_budget: Literal["finish", "stop"] = Field(
        "finish",
        description="once a scope's budget is reached, its running agent jobs finish, or "
        "are stopped (reason budget_exceeded); its queued agent jobs wait either way",
    )
    groups: dict[str, ScopeLimits] = Field(default_factory=dict, description="per group")
    agents: dict[str, ScopeLimits] = Field(default_factory=dict, description="per agent")
    sessions: dict[str, ScopeLimits] = Field(default_factory=dict, description="per session")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name such as Europe/Berlin or "
                "UTC, or leave the key out for the host's local zone"
            ) from None
        return value

    @field_validator("agents")
    @classmethod
    def _no_bash(cls, value: dict[str, ScopeLimits]) -> dict[str, ScopeLimits]:
        if "bash" in value:
            raise ValueError(
                "bash jobs report no spend and are never held; remove [budgets.agents.bash]"
            )
        return value

    def all_rules(self) -> list[Rule]:
        """Every limit as a rule: the overall ones, then groups, agents, sessions."""
        out = self.rules("all", None)
        tables: tuple[tuple[Kind, dict[str, ScopeLimits]], ...] = (
            ("group", self.groups),
            ("agent", self.agents),
            ("session", self.sessions),
        )
        for kind, table in tables:
            for scope in sorted(table):
                out.extend(table[scope].rules(kind, scope))
        return out

    def zone(self) -> ZoneInfo | None:
        """The configured zone (validated above); None: the host's local zone."""
        return ZoneInfo(self.timezone) if self.timezone else None
