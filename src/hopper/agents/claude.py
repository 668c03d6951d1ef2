"""Claude Code (``claude -p --output-format stream-json``), run by the agent driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from hopper.agents.base import JobContext, Preparation
from hopper.agents.driven import find_binary, prepare_driven
from hopper.config import AgentConfig


@dataclass
class ClaudeAgent:
    config: AgentConfig = field(default_factory=AgentConfig)
    name: str = "claude"

    def prepare(self, job: JobContext) -> Preparation:
        binary = find_binary("claude", self.config.bin)
        extra = {"bin": binary, "permission_mode": self.config.permission_mode}
        return prepare_driven(job, self.name, "claude", self.config, extra)
