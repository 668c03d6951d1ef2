"""Claude Code (``claude -p --output-format stream-json``), run by the agent driver.

The prompt goes on stdin. Hopper picks the conversation id: a fresh one for
every run that starts a session (``--session-id``), the recorded one to go on
(``--resume``). Its stream is the ``claude`` dialect, read by :func:`read_stream`
(also for a custom agent with ``format = "claude-jsonl"``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopper.agents.base import Fill, StderrProgress, extra_args
from hopper.agents.streamtext import (
    TEXT_CHARS,
    LiveError,
    content_text,
    indent,
    shorten,
    tool_input,
)
from hopper.core.agent_outcome import error_kind
from hopper.core.prices import ANTHROPIC_USAGE_KEYS

if TYPE_CHECKING:
    from hopper.agents.stream import StreamState
    from hopper.config import AgentConfig

# Tools with which a headless agent asks the human something (nobody will answer).
ASKING_TOOLS = frozenset({"AskUserQuestion"})
# The result of a run Claude Code's own ``--max-budget-usd`` ended (2.1.197 and 2.1.330).
BUDGET_SUBTYPE = "error_max_budget_usd"


class Claude:
    kind = "claude"
    binary: str | None = "claude"
    progress: StderrProgress | None = None

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
        if spec.get("max_budget_usd") is not None:  # the job's budget left: a second guard
            argv += ["--max-budget-usd", str(spec["max_budget_usd"])]
        if session_id:
            argv += ["--resume" if resume else "--session-id", session_id]
        return argv + extra_args(spec)

    def dialect(self, spec: Mapping[str, Any]) -> str:
        return "claude"

    def session_for_turn(self, session_id: str | None, resume: bool) -> str | None:
        return session_id if resume else str(uuid.uuid4())


CLAUDE = Claude()


# -- its stream: stream-json, the "claude" dialect ---------------------------------------
def read_stream(state: StreamState, obj: dict[str, Any]) -> list[str]:
    """One object of Claude's stream into ``state``; the job.log lines it renders to.

    ``stream_event`` text deltas are rendered line by line as they arrive (the
    complete ``assistant`` message that follows is then not printed again); a line
    still waiting for its newline is left in ``state.partial``, which the driver writes
    as it stands every so often (:meth:`StreamState.take_fragment`): the next line
    rendered then ends it rather than starting a new one."""
    kind = obj.get("type")
    if isinstance(obj.get("session_id"), str):
        state.session_id = obj["session_id"]
    if kind == "stream_event":
        return _partial(state, obj.get("event") or {})
    if kind == "assistant":
        return _assistant(state, obj)
    # anything else starts on a line of its own, after a piece of text left open
    if kind == "system":
        return _close(state) + _system(state, obj)
    if kind == "user":
        return _close(state) + _user(state, obj)
    if kind == "result":
        return _close(state) + _result(state, obj)
    return []


def usage_figures(usage: object) -> dict[str, Any]:
    """An Anthropic ``usage`` object in hopper's names."""
    usage = usage if isinstance(usage, dict) else {}
    return {name: usage.get(key) for key, name in ANTHROPIC_USAGE_KEYS.items()}


def _partial(state: StreamState, event: dict[str, Any]) -> list[str]:
    """A partial message (``--include-partial-messages``): text, line by line; its
    usage as it arrives (the input at ``message_start``, the output growing after)."""
    etype = event.get("type")
    if etype == "message_start":
        message = event.get("message") or {}
        state.current_message = str(message.get("id") or f"m{len(state.message_usage)}")
        state.note_usage(state.current_message, usage_figures(message.get("usage")))
        return []
    if etype == "message_delta":
        state.note_usage(None, usage_figures(event.get("usage")))
        return []
    if etype == "content_block_start":
        block = event.get("content_block") or {}
        if block.get("type") == "text":
            out = _close(state)
            state.streamed, state.partial = True, ""
            return [*out, "[assistant]"]
        return []
    if etype == "content_block_delta":
        delta = event.get("delta") or {}
        if delta.get("type") != "text_delta" or not state.streamed:
            return []
        state.partial += str(delta.get("text") or "")
        *done, state.partial = state.partial.split("\n")
        out = []
        for line in done:  # the first may end a line whose start is already in the log
            out.append(line if state.line_open else "  " + line)
            state.line_open = False
        return out
    if etype == "content_block_stop":
        return _flush_partial(state)
    return []


def _flush_partial(state: StreamState) -> list[str]:
    """The rest of a streamed text, as a whole line (or the end of the open one)."""
    rest, state.partial = state.partial, ""
    if state.line_open:
        state.line_open = False
        return [rest]
    return ["  " + rest] if rest else []


def _close(state: StreamState) -> list[str]:
    """A line break ending the streamed text left open in the log, if any."""
    if state.line_open:
        state.line_open = False
        return [""]
    return []


def _system(state: StreamState, obj: dict[str, Any]) -> list[str]:
    sub = obj.get("subtype")
    if sub == "init":
        state.model = obj.get("model")
        return [
            f"[claude] session {obj.get('session_id')} model {obj.get('model')} "
            f"permission mode {obj.get('permissionMode')} in {obj.get('cwd')}"
        ]
    if sub == "api_retry":
        state.api_retries += 1
        status = obj.get("error_status")
        status = status if isinstance(status, int) else None
        code = str(obj.get("error") or "")
        delay = obj.get("retry_delay_ms")
        state.live.append(
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
        state.waiting = f"a permission was refused: {obj.get('tool_name')}"
        return [f"[denied] {obj.get('tool_name')}: {shorten(str(obj.get('message', '')))}"]
    return []


def _assistant(state: StreamState, obj: dict[str, Any]) -> list[str]:
    message = obj.get("message") or {}
    out: list[str] = []
    if message.get("usage") and message.get("model") != "<synthetic>":
        state.note_usage(str(message.get("id") or "?"), usage_figures(message["usage"]))
    if obj.get("is_api_error_message") or obj.get("error"):
        status = obj.get("api_error_status")
        state.error_status = status if isinstance(status, int) else state.error_status
        state.error_kind = error_kind(state.error_status, "", str(obj.get("error") or ""))
    streamed, state.streamed = state.streamed, False
    if not streamed:
        out += _close(state)
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            text = str(block["text"])
            state.last_text = text
            if streamed:  # already in the log, line by line
                out += _flush_partial(state)
                if obj.get("aborted"):
                    out.append("[assistant, interrupted]")
                continue
            tag = "[assistant, interrupted]" if obj.get("aborted") else "[assistant]"
            out.append(f"{tag}\n{indent(shorten(text, TEXT_CHARS))}")
        elif block.get("type") == "tool_use":
            state.tool_calls += 1
            if block.get("name") in ASKING_TOOLS:
                state.waiting = "the agent asked a question"
            out.append(f"[tool] {block.get('name')}: {tool_input(block.get('input'))}")
    return out


def _user(state: StreamState, obj: dict[str, Any]) -> list[str]:
    message = obj.get("message") or {}
    out: list[str] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        text = content_text(block.get("content"))
        tag = "[tool error]" if block.get("is_error") else "[tool result]"
        out.append(f"{tag}\n{indent(shorten(text))}")
    return out


def _result(state: StreamState, obj: dict[str, Any]) -> list[str]:
    state.completed = True
    state.num_turns = obj.get("num_turns")
    if isinstance(obj.get("result"), str):
        state.result = obj["result"]
    state.usage = usage_figures(obj.get("usage"))
    # --max-budget-usd reached: Claude Code ends the run with this subtype
    if obj.get("subtype") == BUDGET_SUBTYPE or obj.get("terminal_reason") == "budget_exhausted":
        state.budget_stop = True
    cost = obj.get("total_cost_usd")
    state.cost_usd = float(cost) if isinstance(cost, int | float) else None
    for denial in obj.get("permission_denials") or []:
        if isinstance(denial, dict):
            state.permission_denials.append(
                f"{denial.get('tool_name')}: {tool_input(denial.get('tool_input'))}"
            )
    if state.permission_denials:
        state.waiting = f"a permission was refused: {state.permission_denials[0]}"
    status = obj.get("api_error_status")
    if obj.get("is_error"):
        state.failed = True
        state.error_status = status if isinstance(status, int) else state.error_status
        errors = obj.get("errors")
        text = str(obj.get("result") or "") or (
            "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
        )
        state.error = text or str(obj.get("terminal_reason") or "error")
        if obj.get("terminal_reason") == "aborted_streaming":
            state.error_kind = "unknown"
            state.error = "interrupted"
        else:
            state.error_kind = error_kind(
                state.error_status, state.error, str(obj.get("api_error_type") or "")
            )
    ended = "error" if obj.get("is_error") else "done"
    cost_text = f", ${state.cost_usd:.4f}" if state.cost_usd is not None else ""
    line = (
        f"[result] {ended} ({obj.get('terminal_reason') or obj.get('subtype')}), "
        f"{state.num_turns} turns{cost_text}"
    )
    if state.permission_denials:
        line += f", {len(state.permission_denials)} tool calls denied"
    return [line]
