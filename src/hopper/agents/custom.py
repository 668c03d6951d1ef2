"""An agent defined in the config: ``[agents.NAME] argv = [...]`` (an argv template).

Placeholders ``{prompt_file}``, ``{workdir}``, ``{run_dir}``, ``{session_id}``
and ``{job_id}`` are replaced inside arguments; the argv is never a shell
string, and the prompt text itself is never put on the command line (it is in
``{prompt_file}``, and on stdin unless ``stdin = false``). ``format`` says how
to read its stdout: ``text`` (copied to job.log; the exit code decides) or
JSON lines in Claude's (``claude-jsonl``) or Codex's (``codex-jsonl``) shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopper.agents.base import Fill, StderrProgress, extra_args

if TYPE_CHECKING:
    from hopper.config import AgentConfig


class Custom:
    kind = "custom"
    binary: str | None = None  # the template's first word
    progress: StderrProgress | None = None

    def spec_keys(self, config: AgentConfig, fill: Fill) -> dict[str, Any]:
        assert config.argv  # the registry makes a custom agent only of a table with one
        return {
            "bin": config.argv[0],
            "argv": fill(config.argv),
            "format": config.format,
            "stdin": config.stdin,
        }

    def argv(self, spec: Mapping[str, Any], session_id: str | None, resume: bool) -> list[str]:
        # placeholders filled inside each argument (one never becomes two); the
        # turn's message (a nudge after the first) is the {prompt_file}
        values = {
            "prompt_file": str(spec.get("message_file") or spec["prompt_file"]),
            "workdir": str(spec["workdir"]),
            "run_dir": str(spec["run_dir"]),
            "session_id": session_id or "",
            "job_id": str(spec.get("job_id") or ""),
        }
        out: list[str] = []
        for arg in spec["argv"]:
            text = str(arg)
            for key, value in values.items():
                text = text.replace("{" + key + "}", value)
            out.append(text)
        return out + extra_args(spec)

    def dialect(self, spec: Mapping[str, Any]) -> str:
        return str(spec.get("format")).removesuffix("-jsonl")

    def session_for_turn(self, session_id: str | None, resume: bool) -> str | None:
        return session_id


CUSTOM = Custom()
