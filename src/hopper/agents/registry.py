"""Agent names -> adapters."""

from __future__ import annotations

from hopper.agents.base import Agent
from hopper.agents.bash import BashAgent

PLANNED = frozenset({"claude", "codex"})


class UnknownAgent(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        if name in PLANNED:
            text = (
                f"agent {name!r} is not available in this version of hopper; "
                f"available: {', '.join(known)}"
            )
        else:
            text = f"unknown agent {name!r}; available: {', '.join(known)}"
        super().__init__(text)


def builtin_agents() -> dict[str, Agent]:
    return {"bash": BashAgent()}


def lookup(agents: dict[str, Agent], name: str) -> Agent:
    try:
        return agents[name]
    except KeyError:
        raise UnknownAgent(name, sorted(agents)) from None
