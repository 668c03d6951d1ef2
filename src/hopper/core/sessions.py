"""Sessions: which jobs may start, and how a live session's turn goes. Pure.

A session is one agent conversation; two of its jobs running at once would
resume the same conversation twice. The scheduler (core/schedule.py) asks
:func:`session_free` before starting a queued job.

A live (interactive) session is one CLI process in a terminal, and each
message is a turn. Whether a turn has ended, what state the agent is in, and
what a turn cost are judged here from values the session host gathers: how
many Stop-hook markers appeared, the session log's entries (Claude Code's
JSONL log, the one interactive agent so far: ``type`` user / assistant /
system, ``message.content`` blocks, ``message.usage``, ``message.id``), when
the log last grew, and ``now`` (seconds on the host's monotonic clock).

Theory of a turn's end, most trusted first: the CLI's Stop hook wrote a new
marker (``stop_hook``); else the log says the agent waits (its last assistant
entry asks for no tool, or the turn was interrupted, or an API error ended it)
and nothing new arrived for ``settle`` seconds (``session_log``: one message's
blocks arrive as several entries, so a text entry may be followed by its
tool call a moment later); else the job's deadline passed (``timeout``).

Standard library only: the session host imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hopper.core.agent_outcome import error_kind
from hopper.core.prices import ANTHROPIC_USAGE_KEYS

# -- which jobs may start ---------------------------------------------------------------


def busy_sessions(running: Iterable[str | None], earlier_queued: Iterable[str | None]) -> set[str]:
    """Sessions that have a running job, or a job queued ahead (in claim order)."""
    return {s for s in (*running, *earlier_queued) if s}


def turn_wait(session: str) -> str:
    """Why a message waits behind an earlier one of its session: the one wording
    (the scheduler's, the dashboard's and ``hopper status``'s)."""
    return f"waiting for session {session}'s turn"


def session_free(session: str | None, busy: set[str]) -> bool:
    """May a queued job of ``session`` start now? Jobs without a session always may."""
    return session is None or session not in busy


# -- a live session's turns -------------------------------------------------------------

LogState = Literal["working", "waiting_for_input", "api_error", "idle"]
TurnEndHow = Literal["stop_hook", "session_log", "timeout"]

# Seconds the log must stay unchanged before "the agent waits" is believed.
DEFAULT_SETTLE = 3.0
INTERRUPTED = "[Request interrupted by user"


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended (recorded with the message's job) and the agent's state then."""

    how: TurnEndHow
    state: LogState


@dataclass(frozen=True)
class Usage:
    """Token and cost figures; field for field hopper.core.record.Usage (stdlib here)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None  # Claude's session log has no cost: None

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True)
class UsageTally:
    """A session's cumulative usage from its log, and the last message counted
    (the entries of one message repeat its usage: it is counted once)."""

    usage: Usage = Usage()
    last_message_id: str | None = None


def turn_verdict(
    *,
    markers: int,
    entries: Sequence[Mapping[str, Any]],
    now: float,
    last_change: float,
    deadline: float | None,
    settle: float = DEFAULT_SETTLE,
) -> TurnEnd | None:
    """Has the turn ended, and how? None: not yet.

    ``markers``: Stop-hook markers that appeared since the message was typed;
    ``entries``: the log's entries since then; ``last_change``: when the log
    last grew (or the message was typed); ``deadline``: the job's timeout, as
    a time on the same clock (None: no timeout).
    """
    state = agent_state(entries, now, last_change, settle)
    if markers > 0:
        return TurnEnd("stop_hook", state)
    if state in ("waiting_for_input", "api_error"):
        return TurnEnd("session_log", state)
    if deadline is not None and now >= deadline:
        return TurnEnd("timeout", state)
    return None


def agent_state(
    entries: Sequence[Mapping[str, Any]],
    now: float,
    last_change: float,
    settle: float = DEFAULT_SETTLE,
) -> LogState:
    """The agent's state from its session log, as oddjobs reads it.

    No conversation yet: ``idle``. The last conversation entry decides: an
    assistant entry with an API error is ``api_error``; one with a ``tool_use``
    block (or only thinking) is ``working``; one with neither is
    ``waiting_for_input`` once the log has been still for ``settle`` seconds
    (``working`` until then); a user entry (a prompt, a tool result) is
    ``working``, except "[Request interrupted by user]", which waits too.
    """
    last = last_conversation_entry(entries)
    if last is None:
        return "idle"
    settled = now - last_change >= settle
    if last.get("type") == "user":
        return "waiting_for_input" if _interrupted(last) and settled else "working"
    if last.get("isApiErrorMessage") is True or last.get("error"):
        return "api_error"
    kinds = {b.get("type") for b in _blocks(last)}
    if "tool_use" in kinds or (kinds and kinds <= {"thinking", "redacted_thinking"}):
        return "working"
    return "waiting_for_input" if settled else "working"


def turn_state(
    entries: Sequence[Mapping[str, Any]],
    now: float,
    last_change: float,
    settle: float = DEFAULT_SETTLE,
) -> LogState:
    """The agent's state while a message's turn runs: :func:`agent_state` of the turn's
    log entries, ``working`` before the log shows any (the message is typed: the
    agent is at it, though its log has nothing yet)."""
    if last_conversation_entry(entries) is None:
        return "working"
    return agent_state(entries, now, last_change, settle)


def last_conversation_entry(entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The last user or assistant entry (bookkeeping, system and meta lines skipped): the
    latest by ``timestamp`` when every one has one, else the last in the log. (Claude Code
    2.1.197 writes the assistant entry of an API error before the user entry it answers.)"""
    talk = [e for e in entries if e.get("type") in ("user", "assistant") and not e.get("isMeta")]
    if not talk:
        return None
    stamps = [e.get("timestamp") for e in talk]
    if all(isinstance(t, str) and t for t in stamps):
        latest = max(range(len(talk)), key=lambda i: (str(stamps[i]), i))
        return talk[latest]
    return talk[-1]


def api_error_kind(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """The kind (core/agent_outcome.py's KINDS) of the API error the last conversation
    entry reports, or None when it reports none. Claude's entry carries the HTTP status
    (``apiErrorStatus``), a code word (``error``: "rate_limit", "authentication_failed")
    and the text shown ("API Error: Request rejected (429) ...")."""
    last = last_conversation_entry(entries)
    if last is None or last.get("type") != "assistant":
        return None
    if not (last.get("isApiErrorMessage") is True or last.get("error")):
        return None
    status = last.get("apiErrorStatus")
    code = last.get("error")
    text = " ".join(str(b.get("text") or "") for b in _blocks(last) if b.get("type") == "text")
    return error_kind(
        status if isinstance(status, int) and not isinstance(status, bool) else None,
        text,
        code if isinstance(code, str) else None,
    )


TURN_ENDS = ("stop_hook_summary", "turn_duration")  # Claude's system entries after a turn


def this_turn(entries: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """The entries up to the turn's end: the first system entry that closes a turn
    (:data:`TURN_ENDS`) after an assistant entry. What follows belongs to a later turn:
    a message typed while the agent was busy (a nudge) is queued by Claude and answered
    as a turn of its own, which the log may already hold when the host reads it. A
    closing entry before any assistant entry is the previous turn's, written late."""
    answered = False
    for at, entry in enumerate(entries):
        if entry.get("type") == "assistant":
            answered = True
        elif answered and entry.get("type") == "system" and entry.get("subtype") in TURN_ENDS:
            return entries[: at + 1]
    return entries


def queued_after(entries: Sequence[Mapping[str, Any]], typed: Sequence[str]) -> int:
    """How many of the texts ``typed`` into the turn while the agent was busy (nudges)
    the turn did not take in: not a user entry of :func:`this_turn`. Claude answers each
    such one as a turn of its own after this one, with a Stop hook of its own."""
    taken = [_user_text(e).strip() for e in this_turn(entries) if e.get("type") == "user"]
    return sum(1 for text in typed if text.strip() not in taken)


def _user_text(entry: Mapping[str, Any]) -> str:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or "") for b in _blocks(entry) if b.get("type") == "text")


def turn_result(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the turn's last assistant message that has text (its answer), in
    :func:`this_turn`'s entries."""
    for entry in reversed(this_turn(entries)):
        if entry.get("type") != "assistant":
            continue
        texts = [
            str(b["text"]) for b in _blocks(entry) if b.get("type") == "text" and b.get("text")
        ]
        if texts:
            return "\n".join(texts)
    return None


def log_session_id(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """The conversation id the entries carry (``sessionId``), the last one seen."""
    for entry in reversed(entries):
        sid = entry.get("sessionId")
        if isinstance(sid, str) and sid:
            return sid
    return None


def tally_usage(tally: UsageTally, entries: Iterable[Mapping[str, Any]]) -> UsageTally:
    """``tally`` plus the usage of the assistant messages in ``entries`` (each once)."""
    usage, last_id = tally.usage, tally.last_message_id
    for entry in entries:
        if entry.get("type") != "assistant":
            continue
        message = entry.get("message")
        if not isinstance(message, Mapping):
            continue
        mid = message.get("id")
        if isinstance(mid, str) and mid == last_id:
            continue
        last_id = mid if isinstance(mid, str) else None
        figures = message.get("usage")
        if isinstance(figures, Mapping):
            counts = {name: _count(figures, key) for key, name in ANTHROPIC_USAGE_KEYS.items()}
            usage = Usage(
                usage.input_tokens + counts["input_tokens"],
                usage.output_tokens + counts["output_tokens"],
                usage.cache_read_tokens + counts["cache_read_tokens"],
                usage.cache_write_tokens + counts["cache_write_tokens"],
                usage.cost_usd,
            )
    return UsageTally(usage, last_id)


def turn_usage(before: Usage, after: Usage) -> Usage:
    """A turn's usage and cost: the session's cumulative figures after it, less before."""
    cost = None
    if after.cost_usd is not None:
        cost = max(0.0, after.cost_usd - (before.cost_usd or 0.0))
    return Usage(
        max(0, after.input_tokens - before.input_tokens),
        max(0, after.output_tokens - before.output_tokens),
        max(0, after.cache_read_tokens - before.cache_read_tokens),
        max(0, after.cache_write_tokens - before.cache_write_tokens),
        cost,
    )


def _blocks(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []


def _interrupted(entry: Mapping[str, Any]) -> bool:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return content.startswith(INTERRUPTED)
    return any(str(b.get("text") or "").startswith(INTERRUPTED) for b in _blocks(entry))


def _count(figures: Mapping[str, Any], key: str) -> int:
    value = figures.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
