"""Codex (``codex exec --json``), run by the agent driver; the prompt goes on stdin (``-``).

Codex names its own thread; hopper resumes it with ``exec … resume ID``. Its
stream is the ``codex`` dialect (agents/stream.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopper.agents.base import Fill, extra_args

if TYPE_CHECKING:
    from hopper.config import AgentConfig


class Codex:
    kind = "codex"
    binary: str | None = "codex"

    def spec_keys(self, config: AgentConfig, fill: Fill) -> dict[str, Any]:
        return {"sandbox": config.sandbox}

    def argv(self, spec: Mapping[str, Any], session_id: str | None, resume: bool) -> list[str]:
        argv = [str(spec["bin"]), "exec", "--json", "--skip-git-repo-check"]
        sandbox = spec.get("sandbox")
        if sandbox == "bypass":
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        elif sandbox:
            argv += ["-s", str(sandbox)]
        if spec.get("model"):
            argv += ["-m", str(spec["model"])]
        argv += extra_args(spec)
        if resume and session_id:
            argv += ["resume", session_id]
        return [*argv, "-"]

    def dialect(self, spec: Mapping[str, Any]) -> str:
        return "codex"

    def session_for_turn(self, session_id: str | None, resume: bool) -> str | None:
        return session_id


CODEX = Codex()
