"""Codex (``codex exec --json``), run by the agent driver; the prompt goes on stdin (``-``).

Codex names its own thread; hopper resumes it with ``exec … resume ID``. Its
stream is the ``codex`` dialect, read by :func:`read_stream` (also for a custom
agent with ``format = "codex-jsonl"``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hopper.agents.base import Fill, StderrProgress, extra_args
from hopper.agents.streamtext import TEXT_CHARS, LiveError, indent, shorten
from hopper.core.agent_outcome import error_kind

if TYPE_CHECKING:
    from hopper.agents.stream import StreamState
    from hopper.config import AgentConfig


# ``exec --json`` prints an answer only once it is complete: a minute of streaming is a
# minute of silence on stdout. Codex traces each server-sent event it receives
# (``event.name="codex.sse_event"``) under the tracing target ``codex_otel.log_only``
# at level info (0.142.0 and 0.169.0 alike); turned on through RUST_LOG, those stderr
# lines are the stream's progress for the idle clock and the live state. Codex's own
# default filter is ``error``: a user's RUST_LOG is kept, with the target added.
OTEL_TARGET = "codex_otel.log_only"


def progress_env(env: Mapping[str, str]) -> dict[str, str]:
    """RUST_LOG for a run: the job's own filter (Codex's default, ``error``, if none)
    with the progress target added."""
    return {"RUST_LOG": f"{env.get('RUST_LOG') or 'error'},{OTEL_TARGET}=info"}


_RESPONSE_DONE = re.compile(rb"event\.kind=response\.completed .*?input_token_count=(\d+)")
_FIGURE = re.compile(rb"\b(input|output|cached|cache_write)_token_count=(\d+)")
_MODEL = re.compile(rb"\bmodel=([^\s\"]+)")


def progress_usage(line: bytes) -> tuple[dict[str, int], str | None] | None:
    """One model response's usage from Codex's trace of its ``response.completed``
    event (``input_token_count=307 output_token_count=40 cached_token_count=7 …
    model=gpt-5.5``), in hopper's names (cached tokens out of the input); None for
    any other line."""
    if not _RESPONSE_DONE.search(line):
        return None
    raw = {name.decode(): int(value) for name, value in _FIGURE.findall(line)}
    cached = raw.get("cached", 0)
    figures = {
        "input_tokens": max(0, raw.get("input", 0) - cached),
        "output_tokens": raw.get("output", 0),
        "cache_read_tokens": cached,
        "cache_write_tokens": raw.get("cache_write", 0),
    }
    model = _MODEL.search(line)
    return figures, (model.group(1).decode("utf-8", "replace") if model else None)


PROGRESS = StderrProgress(progress_env, f" {OTEL_TARGET}: ".encode(), progress_usage)


class Codex:
    kind = "codex"
    binary: str | None = "codex"
    progress: StderrProgress | None = PROGRESS

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


# -- its stream: exec --json, the "codex" dialect ----------------------------------------
def read_stream(state: StreamState, obj: dict[str, Any]) -> list[str]:
    """One object of Codex's stream into ``state``; the job.log lines it renders to."""
    kind = obj.get("type")
    if kind == "thread.started":
        state.session_id = obj.get("thread_id")
        return [f"[codex] thread {state.session_id}"]
    if kind == "turn.started":
        state.num_turns = (state.num_turns or 0) + 1
        return []
    if kind in ("item.started", "item.completed"):
        return _item(state, kind, obj.get("item") or {})
    if kind == "turn.completed":
        state.completed = True
        usage = obj.get("usage") or {}
        state.usage = usage_figures(usage)
        return [
            f"[result] done, {usage.get('input_tokens')} in / "
            f"{usage.get('output_tokens')} out tokens"
        ]
    if kind == "error":
        message = str(obj.get("message") or "")
        if message.startswith("Reconnecting"):
            state.api_retries += 1
            state.live.append(LiveError(error_kind(None, message), None, message))
            return [f"[retry] {message}"]
        state.error = message
        return [f"[error] {message}"]
    if kind == "turn.failed":
        state.failed = True
        message = str((obj.get("error") or {}).get("message") or state.error or "turn failed")
        state.error = message
        state.error_kind = error_kind(None, message)
        return [f"[result] error: {message}"]
    return []


def usage_figures(usage: dict[str, Any]) -> dict[str, Any]:
    """Codex's ``usage`` in hopper's names: its input counts the cached tokens, which
    hopper counts apart (``input_tokens`` are the input not read from a cache)."""
    given, cached = usage.get("input_tokens"), usage.get("cached_input_tokens")
    if isinstance(given, int) and isinstance(cached, int):
        given = max(0, given - cached)
    return {
        "input_tokens": given,
        "output_tokens": usage.get("output_tokens"),
        "cache_read_tokens": cached,
        "cache_write_tokens": usage.get("cache_write_input_tokens"),
    }


def _item(state: StreamState, kind: str, item: dict[str, Any]) -> list[str]:
    itype = item.get("type")
    if itype == "command_execution":
        if kind == "item.started":
            state.tool_calls += 1
            return [f"[tool] shell: {item.get('command')}"]
        out = shorten(str(item.get("aggregated_output") or ""))
        tag = "[tool result]" if item.get("exit_code") == 0 else "[tool error]"
        return [f"{tag} exit {item.get('exit_code')}\n{indent(out)}"]
    if kind != "item.completed":
        return []
    if itype == "agent_message":
        text = str(item.get("text") or "")
        state.last_text = text
        state.result = text
        return [f"[assistant]\n{indent(shorten(text, TEXT_CHARS))}"]
    if itype == "reasoning" and item.get("text"):
        return [f"[thinking] {shorten(str(item['text']))}"]
    if itype == "error":  # a warning item, not fatal
        return [f"[warning] {item.get('message')}"]
    if itype == "file_change":
        changes = item.get("changes") or []
        paths = ", ".join(str(c.get("path")) for c in changes if isinstance(c, dict))
        return [f"[edit] {paths}"]
    return []
