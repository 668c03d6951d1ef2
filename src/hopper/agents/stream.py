"""Agent output streams -> rendered log lines and a summary. Pure, standard library only.

Claude Code (``--output-format stream-json --verbose
--include-partial-messages``) and Codex (``exec --json``) print one JSON object
per line; each dialect's reader lives with its CLI (``read_stream`` in
agents/claude.py and codex.py). Errors the CLI is about to retry itself
(Claude's ``api_retry``, Codex's ``Reconnecting…``) are classified as they
arrive and queued in :attr:`StreamState.live` for the driver to act on at once.
A :class:`StreamState` is fed those objects one at a time
(:meth:`StreamState.feed`); each call returns the human-readable lines for
``job.log`` and updates the running summary (session id, final message,
usage, denials, errors). ``summary()`` is what
:func:`hopper.core.agent_outcome.judge` decides on. Event shapes are
documented in docs/agents-cli-facts.md and recorded in tests/data/.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hopper.agents import claude, codex
from hopper.agents.streamtext import LiveError


def parse_line(line: bytes | str) -> dict[str, Any] | None:
    """One stream line as a JSON object, or None (blank, not JSON, not an object)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


@dataclass
class StreamState:
    """Everything learnt from one agent run's stream so far."""

    agent: str  # its dialect: "claude" | "codex"
    session_id: str | None = None
    result: str | None = None  # the final message
    last_text: str | None = None  # the latest assistant text (a fallback for result)
    completed: bool = False  # the agent reported the run finished
    failed: bool = False  # the agent reported an error
    error: str | None = None
    error_status: int | None = None
    error_kind: str | None = None
    num_turns: int | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    tool_calls: int = 0
    permission_denials: list[str] = field(default_factory=list)
    api_retries: int = 0
    model: str | None = None
    live: list[LiveError] = field(default_factory=list)  # taken (and cleared) by the driver
    waiting: str | None = None  # why the agent waits for a human (a denial, a question)
    streamed: bool = False  # the current message's text was rendered from deltas
    partial: str = ""  # streamed text not yet in the log (no newline yet)
    line_open: bool = False  # the log's last line is streamed text awaiting its end
    # usage as it arrives, per model message (Claude) or response (Codex): the spend so
    # far while the run goes on; ``usage`` (the run's own total, at its end) replaces it
    message_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    current_message: str | None = None
    budget_stop: bool = False  # the CLI's own budget guard ended the run

    def note_usage(self, message: str | None, figures: dict[str, Any]) -> None:
        """Usage figures of one message as they arrive; a figure only grows (Claude's
        ``message_delta`` repeats the message's output tokens so far)."""
        key = message or self.current_message or "?"
        seen = self.message_usage.setdefault(key, {})
        for name, value in figures.items():
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                seen[name] = max(seen.get(name, 0), value)

    def spent_usage(self) -> dict[str, Any]:
        """The run's token figures: the sum of what each message reported so far, or the
        run's reported total where that is more (a run stopped mid-message may report
        zeros: Claude's result after SIGINT)."""
        total: dict[str, Any] = {}
        for figures in self.message_usage.values():
            for name, value in figures.items():
                total[name] = total.get(name, 0) + value
        for name, value in self.usage.items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[name] = max(value, total.get(name, 0))
            elif name not in total:
                total[name] = value
        return total

    # -- feeding ----------------------------------------------------------------
    def feed(self, obj: dict[str, Any]) -> list[str]:
        """Take one stream object; return the job.log lines it renders to."""
        return READERS[self.agent](self, obj)

    def take_fragment(self) -> str:
        """Streamed text that has no newline yet, to write to the log as it stands (no
        line break after it): the start of a line, indented, or more of the open one.
        The next rendered line goes on from it; "" when there is nothing new."""
        if not self.partial:
            return ""
        text = self.partial if self.line_open else "  " + self.partial
        self.partial, self.line_open = "", True
        return text

    def close_line(self) -> bool:
        """End the open line, if any, before something else is written; True if one was."""
        was, self.line_open = self.line_open, False
        return was

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "result": self.result if self.result is not None else self.last_text,
            "completed": self.completed,
            "failed": self.failed,
            "error": self.error,
            "error_status": self.error_status,
            "error_kind": self.error_kind,
            "num_turns": self.num_turns,
            "usage": self.spent_usage(),
            "cost_usd": self.cost_usd,
            "tool_calls": self.tool_calls,
            "permission_denials": list(self.permission_denials),
            "api_retries": self.api_retries,
        }


# Each JSON-lines dialect's reader; any other stdout is copied to job.log as text.
READERS: dict[str, Callable[[StreamState, dict[str, Any]], list[str]]] = {
    "claude": claude.read_stream,
    "codex": codex.read_stream,
}
DIALECTS = frozenset(READERS)


def replay(agent: str, lines: list[str]) -> tuple[StreamState, list[str]]:
    """Feed a whole recorded stream; returns the final state and all rendered lines."""
    state = StreamState(agent)
    rendered: list[str] = []
    for line in lines:
        obj = parse_line(line)
        if obj is not None:
            rendered.extend(state.feed(obj))
    return state, rendered
