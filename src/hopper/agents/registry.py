"""Agent names -> adapters."""

from __future__ import annotations

from hopper.agents.base import Agent
from hopper.agents.bash import BashAgent
from hopper.agents.claude import CLAUDE
from hopper.agents.codex import CODEX
from hopper.agents.custom import CUSTOM
from hopper.agents.driven import DrivenAgent
from hopper.config import AgentConfig, Config
from hopper.core.admission import unknown_agent

PLANNED: frozenset[str] = frozenset()


class UnknownAgent(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        if name in PLANNED:
            text = (
                f"agent {name!r} is not available in this version of hopper; "
                f"available: {', '.join(known)}"
            )
        else:
            text = unknown_agent(name, known)
        super().__init__(text)


def builtin_agents(config: Config | None = None) -> dict[str, Agent]:
    """bash, claude and codex, plus every ``[agents.NAME]`` with an ``argv`` in the config."""
    tables = config.agents if config is not None else {}
    agents: dict[str, Agent] = {
        "bash": BashAgent(),
        "claude": DrivenAgent("claude", CLAUDE, tables.get("claude", AgentConfig())),
        "codex": DrivenAgent("codex", CODEX, tables.get("codex", AgentConfig())),
    }
    for name, table in tables.items():
        if table.argv:
            agents[name] = DrivenAgent(name, CUSTOM, table)
    return agents


def lookup(agents: dict[str, Agent], name: str) -> Agent:
    try:
        return agents[name]
    except KeyError:
        raise UnknownAgent(name, sorted(agents)) from None


def driven(agents: dict[str, Agent], name: str) -> bool:
    """Whether the driver runs this agent (and so writes its agent.json); bash's never does."""
    return not isinstance(agents.get(name), BashAgent)
