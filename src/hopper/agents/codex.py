"""Codex (``codex exec --json``), run by the agent driver; the prompt goes on stdin."""

from __future__ import annotations

from dataclasses import dataclass, field

from hopper.agents.base import JobContext, Preparation
from hopper.agents.driven import find_binary, prepare_driven
from hopper.config import AgentConfig


@dataclass
class CodexAgent:
    config: AgentConfig = field(default_factory=AgentConfig)
    name: str = "codex"

    def prepare(self, job: JobContext) -> Preparation:
        binary = find_binary("codex", self.config.bin)
        extra = {"bin": binary, "sandbox": self.config.sandbox}
        return prepare_driven(job, self.name, "codex", self.config, extra)
