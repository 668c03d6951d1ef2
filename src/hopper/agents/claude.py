"""Claude Code (``claude -p --output-format stream-json``), run by the agent driver.

The prompt goes on stdin. Hopper picks the conversation id: a fresh one for
every run that starts a session (``--session-id``), the recorded one to go on
(``--resume``). Its stream is the ``claude`` dialect (agents/stream.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopper.agents.base import Fill, extra_args

if TYPE_CHECKING:
    from hopper.config import AgentConfig


class Claude:
    kind = "claude"
    binary: str | None = "claude"

    def spec_keys(self, config: AgentConfig, fill: Fill) -> dict[str, Any]:
        return {"permission_mode": config.permission_mode}

    def argv(self, spec: Mapping[str, Any], session_id: str | None, resume: bool) -> list[str]:
        # partial messages: text reaches job.log as it streams (2.1.197 and later)
        argv = [str(spec["bin"]), "-p", "--output-format", "stream-json", "--verbose"]
        argv.append("--include-partial-messages")
        if spec.get("permission_mode"):
            argv += ["--permission-mode", str(spec["permission_mode"])]
        if spec.get("model"):
            argv += ["--model", str(spec["model"])]
        if session_id:
            argv += ["--resume" if resume else "--session-id", session_id]
        return argv + extra_args(spec)

    def dialect(self, spec: Mapping[str, Any]) -> str:
        return "claude"

    def session_for_turn(self, session_id: str | None, resume: bool) -> str | None:
        return session_id if resume else str(uuid.uuid4())


CLAUDE = Claude()
