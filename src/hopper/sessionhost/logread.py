"""What the host takes from the agent's session log: text, result, usage, waiting.

``read_log`` answers with new entries (JSON objects, Claude's JSONL shape:
``{"type": "assistant", "message": {"content": [...], "usage": {...}}}``);
this module reduces them to what a turn records. Where the agent's slice
already says it (``session_id``, ``usage``, ``result``, ``text``
attributes), that wins. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopper.core.prices import ANTHROPIC_USAGE_KEYS

TEXT_LIMIT = 2000  # characters of one tool input or result in job.log


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + " …"


def _blocks(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []


@dataclass
class LogState:
    """The session log as read so far."""

    offset: int = 0
    session_id: str | None = None
    usage: dict[str, float | int | None] = field(default_factory=dict)
    last_text: str | None = None  # the last assistant text
    waiting: bool = False  # the last assistant entry has no tool_use: waiting for input
    # Claude writes one entry per content block, each with its message's usage:
    # counted once per message id.
    by_message: dict[str, dict[str, int]] = field(default_factory=dict)

    def feed(self, view: Any) -> tuple[list[str], bool]:
        """Take a slice from ``read_log``: job.log's lines for it, and whether it had news."""
        entries: Sequence[Mapping[str, Any]] = getattr(view, "entries", None) or []
        offset = getattr(view, "offset", None)
        if isinstance(offset, int):
            self.offset = offset
        sid = getattr(view, "session_id", None)
        if isinstance(sid, str) and sid:
            self.session_id = sid
        lines: list[str] = []
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            lines.extend(self._entry(entry))
        usage = getattr(view, "usage", None)
        if isinstance(usage, Mapping):
            self.usage = {str(k): v for k, v in usage.items() if isinstance(v, int | float)}
        result = getattr(view, "result", None)
        if isinstance(result, str) and result:
            self.last_text = result
        text = getattr(view, "text", None)
        if isinstance(text, str) and text:
            lines = [text if text.endswith("\n") else text + "\n"]
        return lines, bool(entries)

    def _entry(self, entry: Mapping[str, Any]) -> list[str]:
        sid = entry.get("sessionId") or entry.get("session_id")
        if isinstance(sid, str) and sid:
            self.session_id = sid
        kind = entry.get("type")
        lines: list[str] = []
        if kind == "assistant":
            message = entry.get("message")
            raw = message.get("usage") if isinstance(message, Mapping) else None
            if isinstance(raw, Mapping):
                mid = message.get("id") if isinstance(message, Mapping) else None
                key_of = mid if isinstance(mid, str) else f"#{len(self.by_message)}"
                old = self.by_message.get(key_of, {})
                new = {
                    name: value
                    for key, name in ANTHROPIC_USAGE_KEYS.items()
                    if isinstance(value := raw.get(key), int) and not isinstance(value, bool)
                }
                self.by_message[key_of] = new
                for name in set(old) | set(new):
                    prior = int(self.usage.get(name) or 0)
                    self.usage[name] = prior - old.get(name, 0) + new.get(name, 0)
            texts, tools = [], 0
            for block in _blocks(entry):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                    lines.append(block["text"].rstrip("\n") + "\n")
                elif block.get("type") == "tool_use":
                    tools += 1
                    lines.append(f"[tool] {block.get('name')}: {_short(block.get('input'))}\n")
            if texts:
                self.last_text = "\n".join(texts)
            self.waiting = tools == 0
        elif kind == "user":
            self.waiting = False
            for block in _blocks(entry):
                if block.get("type") == "tool_result":
                    lines.append(f"[result] {_short(block.get('content'))}\n")
        return lines
