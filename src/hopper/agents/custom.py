"""An agent defined in the config: ``[agents.NAME] argv = [...]`` (an argv template).

Placeholders ``{prompt_file}``, ``{workdir}``, ``{run_dir}``, ``{session_id}``
and ``{job_id}`` are replaced inside arguments; the argv is never a shell
string, and the prompt text itself is never put on the command line (it is in
``{prompt_file}``, and on stdin unless ``stdin = false``). ``format`` says how
to read its stdout: ``text`` (copied to job.log; the exit code decides) or
JSON lines in Claude's (``claude-jsonl``) or Codex's (``codex-jsonl``) shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from hopper.agents.base import JobContext, Preparation
from hopper.agents.driven import prepare_driven
from hopper.config import AgentConfig
from hopper.core.templates import expand_argv


@dataclass
class CustomAgent:
    name: str
    config: AgentConfig

    def prepare(self, job: JobContext) -> Preparation:
        assert self.config.argv
        extra = {
            "bin": self.config.argv[0],
            "argv": expand_argv(self.config.argv, job.values),
            "format": self.config.format,
            "stdin": self.config.stdin,
        }
        return prepare_driven(job, self.name, "custom", self.config, extra)
