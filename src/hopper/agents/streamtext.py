"""What both stream dialects' readers (agents/claude.py, codex.py) share: the job.log
text helpers and :class:`LiveError`. Pure, standard library only."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

TOOL_RESULT_CHARS = 400
TEXT_CHARS = 4000


def shorten(text: str, limit: int = TOOL_RESULT_CHARS) -> str:
    text = text.rstrip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"


def indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix.rstrip()


def tool_input(value: Any) -> str:
    if isinstance(value, dict):
        if "command" in value:
            return shorten(str(value["command"]))
        if "file_path" in value:
            return shorten(str(value["file_path"]))
    return shorten(json.dumps(value, ensure_ascii=False)) if value is not None else ""


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text")) for b in content if isinstance(b, dict) and b.get("text")
        )
    return ""


class LiveError(NamedTuple):
    """An error the CLI reported mid-run (and would retry on its own)."""

    kind: str
    delay_seconds: float | None  # the CLI's announced wait (carries retry-after), if any
    text: str
