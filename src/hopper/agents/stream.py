"""Agent output streams -> rendered log lines and a summary. Pure, standard library only.

Claude Code (``--output-format stream-json --verbose
--include-partial-messages``) and Codex (``exec --json``) print one JSON object
per line. Claude's ``stream_event`` text deltas are rendered line by line as
they arrive (the complete ``assistant`` message that follows is then not
printed again). Errors the CLI is about to retry itself (Claude's
``api_retry``, Codex's ``Reconnecting…``) are classified as they arrive and
queued in :attr:`StreamState.live` for the driver to act on at once.
A :class:`StreamState` is fed those objects one at a time
(:meth:`StreamState.feed`); each call returns the human-readable lines for
``job.log`` and updates the running summary (session id, final message,
usage, denials, errors). ``summary()`` is what
:func:`hopper.core.agent_outcome.judge` decides on. Event shapes are
documented in docs/agents-cli-facts.md and recorded in tests/data/.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hopper.core.agent_outcome import error_kind

TOOL_RESULT_CHARS = 400
TEXT_CHARS = 4000


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


def shorten(text: str, limit: int = TOOL_RESULT_CHARS) -> str:
    text = text.rstrip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more chars]"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix.rstrip()


class LiveError(NamedTuple):
    """An error the CLI reported mid-run (and would retry on its own)."""

    kind: str
    delay_seconds: float | None  # the CLI's announced wait (carries retry-after), if any
    text: str


# The JSON-lines dialects StreamState reads; any other stdout is copied to job.log as text.
DIALECTS = frozenset({"claude", "codex"})

# Tools with which a headless agent asks the human something (nobody will answer).
ASKING_TOOLS = frozenset({"AskUserQuestion"})


@dataclass
class StreamState:
    """Everything learnt from one agent run's stream so far."""

    agent: str  # "claude" | "codex"
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
    partial: str = ""  # streamed text not yet ended by a newline

    # -- feeding ----------------------------------------------------------------
    def feed(self, obj: dict[str, Any]) -> list[str]:
        """Take one stream object; return the job.log lines it renders to."""
        if self.agent == "codex":
            return self._codex(obj)
        return self._claude(obj)

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
            "usage": dict(self.usage),
            "cost_usd": self.cost_usd,
            "tool_calls": self.tool_calls,
            "permission_denials": list(self.permission_denials),
            "api_retries": self.api_retries,
        }

    # -- Claude -----------------------------------------------------------------
    def _claude(self, obj: dict[str, Any]) -> list[str]:
        kind = obj.get("type")
        if isinstance(obj.get("session_id"), str):
            self.session_id = obj["session_id"]
        if kind == "system":
            return self._claude_system(obj)
        if kind == "assistant":
            return self._claude_assistant(obj)
        if kind == "user":
            return self._claude_user(obj)
        if kind == "result":
            return self._claude_result(obj)
        if kind == "stream_event":
            return self._claude_partial(obj.get("event") or {})
        return []

    def _claude_partial(self, event: dict[str, Any]) -> list[str]:
        """A partial message (``--include-partial-messages``): text, line by line."""
        etype = event.get("type")
        if etype == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "text":
                self.streamed, self.partial = True, ""
                return ["[assistant]"]
            return []
        if etype == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") != "text_delta" or not self.streamed:
                return []
            self.partial += str(delta.get("text") or "")
            *done, self.partial = self.partial.split("\n")
            return ["  " + line for line in done]
        if etype == "content_block_stop":
            return self._flush_partial()
        return []

    def _flush_partial(self) -> list[str]:
        rest, self.partial = self.partial, ""
        return ["  " + rest] if rest else []

    def _claude_system(self, obj: dict[str, Any]) -> list[str]:
        sub = obj.get("subtype")
        if sub == "init":
            self.model = obj.get("model")
            return [
                f"[claude] session {obj.get('session_id')} model {obj.get('model')} "
                f"permission mode {obj.get('permissionMode')} in {obj.get('cwd')}"
            ]
        if sub == "api_retry":
            self.api_retries += 1
            status = obj.get("error_status")
            status = status if isinstance(status, int) else None
            code = str(obj.get("error") or "")
            delay = obj.get("retry_delay_ms")
            self.live.append(
                LiveError(
                    error_kind(status, "", code),
                    float(delay) / 1000 if isinstance(delay, int | float) else None,
                    f"API error {status} ({code})",
                )
            )
            return [
                f"[retry] API error {obj.get('error_status')} ({obj.get('error')}); "
                f"retry {obj.get('attempt')}/{obj.get('max_retries')} "
                f"in {obj.get('retry_delay_ms')} ms"
            ]
        if sub == "permission_denied":
            self.waiting = f"a permission was refused: {obj.get('tool_name')}"
            return [f"[denied] {obj.get('tool_name')}: {shorten(str(obj.get('message', '')))}"]
        return []

    def _claude_assistant(self, obj: dict[str, Any]) -> list[str]:
        message = obj.get("message") or {}
        out: list[str] = []
        if obj.get("is_api_error_message") or obj.get("error"):
            status = obj.get("api_error_status")
            self.error_status = status if isinstance(status, int) else self.error_status
            self.error_kind = error_kind(self.error_status, "", str(obj.get("error") or ""))
        streamed, self.streamed = self.streamed, False
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                text = str(block["text"])
                self.last_text = text
                if streamed:  # already in the log, line by line
                    out += self._flush_partial()
                    if obj.get("aborted"):
                        out.append("[assistant, interrupted]")
                    continue
                tag = "[assistant, interrupted]" if obj.get("aborted") else "[assistant]"
                out.append(f"{tag}\n{_indent(shorten(text, TEXT_CHARS))}")
            elif block.get("type") == "tool_use":
                self.tool_calls += 1
                if block.get("name") in ASKING_TOOLS:
                    self.waiting = "the agent asked a question"
                out.append(f"[tool] {block.get('name')}: {_tool_input(block.get('input'))}")
        return out

    def _claude_user(self, obj: dict[str, Any]) -> list[str]:
        message = obj.get("message") or {}
        out: list[str] = []
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            text = _content_text(block.get("content"))
            tag = "[tool error]" if block.get("is_error") else "[tool result]"
            out.append(f"{tag}\n{_indent(shorten(text))}")
        return out

    def _claude_result(self, obj: dict[str, Any]) -> list[str]:
        self.completed = True
        self.num_turns = obj.get("num_turns")
        if isinstance(obj.get("result"), str):
            self.result = obj["result"]
        usage = obj.get("usage") or {}
        self.usage = {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "cache_read_tokens": usage.get("cache_read_input_tokens"),
            "cache_write_tokens": usage.get("cache_creation_input_tokens"),
        }
        cost = obj.get("total_cost_usd")
        self.cost_usd = float(cost) if isinstance(cost, int | float) else None
        for denial in obj.get("permission_denials") or []:
            if isinstance(denial, dict):
                self.permission_denials.append(
                    f"{denial.get('tool_name')}: {_tool_input(denial.get('tool_input'))}"
                )
        if self.permission_denials:
            self.waiting = f"a permission was refused: {self.permission_denials[0]}"
        status = obj.get("api_error_status")
        if obj.get("is_error"):
            self.failed = True
            self.error_status = status if isinstance(status, int) else self.error_status
            errors = obj.get("errors")
            text = str(obj.get("result") or "") or (
                "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
            )
            self.error = text or str(obj.get("terminal_reason") or "error")
            if obj.get("terminal_reason") == "aborted_streaming":
                self.error_kind = "unknown"
                self.error = "interrupted"
            else:
                self.error_kind = error_kind(
                    self.error_status, self.error, str(obj.get("api_error_type") or "")
                )
        state = "error" if obj.get("is_error") else "done"
        cost_text = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        line = (
            f"[result] {state} ({obj.get('terminal_reason') or obj.get('subtype')}), "
            f"{self.num_turns} turns{cost_text}"
        )
        if self.permission_denials:
            line += f", {len(self.permission_denials)} tool calls denied"
        return [line]

    # -- Codex ------------------------------------------------------------------
    def _codex(self, obj: dict[str, Any]) -> list[str]:
        kind = obj.get("type")
        if kind == "thread.started":
            self.session_id = obj.get("thread_id")
            return [f"[codex] thread {self.session_id}"]
        if kind == "turn.started":
            self.num_turns = (self.num_turns or 0) + 1
            return []
        if kind in ("item.started", "item.completed"):
            return self._codex_item(kind, obj.get("item") or {})
        if kind == "turn.completed":
            self.completed = True
            usage = obj.get("usage") or {}
            self.usage = {
                "input_tokens": usage.get("input_tokens"),
                "output_tokens": usage.get("output_tokens"),
                "cache_read_tokens": usage.get("cached_input_tokens"),
                "cache_write_tokens": usage.get("cache_write_input_tokens"),
            }
            return [
                f"[result] done, {usage.get('input_tokens')} in / "
                f"{usage.get('output_tokens')} out tokens"
            ]
        if kind == "error":
            message = str(obj.get("message") or "")
            if message.startswith("Reconnecting"):
                self.api_retries += 1
                self.live.append(LiveError(error_kind(None, message), None, message))
                return [f"[retry] {message}"]
            self.error = message
            return [f"[error] {message}"]
        if kind == "turn.failed":
            self.failed = True
            message = str((obj.get("error") or {}).get("message") or self.error or "turn failed")
            self.error = message
            self.error_kind = error_kind(None, message)
            return [f"[result] error: {message}"]
        return []

    def _codex_item(self, kind: str, item: dict[str, Any]) -> list[str]:
        itype = item.get("type")
        if itype == "command_execution":
            if kind == "item.started":
                self.tool_calls += 1
                return [f"[tool] shell: {item.get('command')}"]
            out = shorten(str(item.get("aggregated_output") or ""))
            tag = "[tool result]" if item.get("exit_code") == 0 else "[tool error]"
            return [f"{tag} exit {item.get('exit_code')}\n{_indent(out)}"]
        if kind != "item.completed":
            return []
        if itype == "agent_message":
            text = str(item.get("text") or "")
            self.last_text = text
            self.result = text
            return [f"[assistant]\n{_indent(shorten(text, TEXT_CHARS))}"]
        if itype == "reasoning" and item.get("text"):
            return [f"[thinking] {shorten(str(item['text']))}"]
        if itype == "error":  # a warning item, not fatal
            return [f"[warning] {item.get('message')}"]
        if itype == "file_change":
            changes = item.get("changes") or []
            paths = ", ".join(str(c.get("path")) for c in changes if isinstance(c, dict))
            return [f"[edit] {paths}"]
        return []


def _tool_input(value: Any) -> str:
    if isinstance(value, dict):
        if "command" in value:
            return shorten(str(value["command"]))
        if "file_path" in value:
            return shorten(str(value["file_path"]))
    return shorten(json.dumps(value, ensure_ascii=False)) if value is not None else ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text")) for b in content if isinstance(b, dict) and b.get("text")
        )
    return ""


def replay(agent: str, lines: list[str]) -> tuple[StreamState, list[str]]:
    """Feed a whole recorded stream; returns the final state and all rendered lines."""
    state = StreamState(agent)
    rendered: list[str] = []
    for line in lines:
        obj = parse_line(line)
        if obj is not None:
            rendered.extend(state.feed(obj))
    return state, rendered
