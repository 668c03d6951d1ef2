"""What an agent run amounted to: error kinds, retry policy, the final verdict. Pure.

Standard library only (the job driver, ``hopper.agents.drive``, imports it).
The stream parsers (``hopper.agents.stream``) reduce a CLI's JSON lines to a
:class:`StreamSummary`-like dict; the functions here turn that into a verdict:
success only when the agent itself reported success.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hopper.core.states import Reason

# The kinds of agent error a person (or a retry policy) can branch on.
KINDS = (
    "auth",
    "permission",
    "billing",
    "quota",
    "rate_limit",
    "overloaded",
    "server",
    "network",
    "permission_denied",
    "unknown",
)
# Hopper reruns these (on_error = "retry", up to api_retries, its own backoff).
RETRYABLE = frozenset({"rate_limit", "quota", "overloaded", "network"})
# No retry can fix these: the CLI is stopped at the first sign (a retry event).
FATAL = frozenset({"auth", "permission", "billing"})

_STATUS = re.compile(r"\b([1-5]\d\d)\b")
_NETWORK_WORDS = (
    "connection refused",
    "connection reset",
    "connection error",
    "econnrefused",
    "enotfound",
    "timed out",
    "timeout",
    "stream disconnected",
    "network",
    "dns",
    "unable to connect",
)


def retryable(kind: str | None) -> bool:
    """Whether an error of this kind is worth another attempt (after a backoff)."""
    return kind in RETRYABLE


def fatal(kind: str | None) -> bool:
    """Whether an error of this kind ends the job at once (no retry can fix it)."""
    return kind in FATAL


def live_action(kind: str | None) -> str:
    """What the driver does when the CLI reports an error it is about to retry itself.

    ``"stop"``: a fatal kind: stop the CLI now, the job fails. ``"hopper"``: a
    kind hopper retries: stop the CLI now and apply hopper's own policy
    (``on_error``, ``api_retries``, its backoff, at least the delay the CLI
    announced, which carries the server's retry-after) instead of the CLI's
    minutes of silent retries. ``"wait"``: anything else (a 500, an unknown
    error): let the CLI retry, and show ``retrying``.
    """
    if fatal(kind):
        return "stop"
    if retryable(kind):
        return "hopper"
    return "wait"


def kind_for_status(status: int | None) -> str | None:
    if status is None:
        return None
    if status == 401:
        return "auth"
    if status == 402:
        return "billing"
    if status == 403:
        return "permission"
    if status == 429:
        return "rate_limit"
    if status == 529:
        return "overloaded"
    if 500 <= status < 600:
        return "server"
    return None


def error_kind(status: int | None = None, text: str = "", code: str | None = None) -> str:
    """Classify an agent error from an HTTP status, an error code word and/or its text."""
    word = (code or "").lower()
    low = text.lower()
    if "quota" in word or "quota" in low:
        return "quota"  # before the status: a 429 "insufficient_quota" is not a rate limit
    if "billing" in word or "credit balance" in low or "billing" in low:
        return "billing"
    kind = kind_for_status(status)
    if kind:
        return kind
    if "auth" in word or "invalid_api_key" in word:
        return "auth"
    if "permission_error" in word or "forbidden" in word:
        return "permission"
    if "rate_limit" in word:
        return "rate_limit"
    if "overloaded" in word:
        return "overloaded"
    match = _STATUS.search(low)
    if match and ("status" in low or "api error" in low or "http" in low):
        kind = kind_for_status(int(match.group(1)))
        if kind:
            return kind
    if "unauthorized" in low or "authenticat" in low or "api key" in low:
        return "auth"
    if "too many requests" in low or "rate limit" in low:
        return "rate_limit"
    if "overloaded" in low:
        return "overloaded"
    if any(w in low for w in _NETWORK_WORDS):
        return "network"
    return "unknown"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    kind: str | None  # an error kind from KINDS when not ok (and not stopped)
    detail: str


def judge(summary: dict[str, Any], exit_code: int | None) -> Verdict:
    """Decide one agent run from its stream summary (see ``hopper.agents.stream``)."""
    error = str(summary.get("error") or "")
    if summary.get("failed"):
        kind = summary.get("error_kind") or error_kind(summary.get("error_status"), error)
        return Verdict(False, kind, f"the agent reported an error ({kind}): {error[:300]}")
    if not summary.get("completed"):
        why = f"exited {exit_code}" if exit_code is not None else "was stopped"
        text = f": {error[:300]}" if error else ""
        kind = error_kind(summary.get("error_status"), error) if error else "unknown"
        return Verdict(False, kind, f"the agent ended without reporting a result ({why}){text}")
    denials = summary.get("permission_denials") or []
    tools = int(summary.get("tool_calls") or 0)
    if denials and len(denials) >= tools:
        return Verdict(
            False,
            "permission_denied",
            f"every tool call ({len(denials)}) was denied by the permission mode; "
            "allow them in the agent's config (see docs/agents.md)",
        )
    if denials:
        return Verdict(True, None, f"the agent reported success ({len(denials)} tool calls denied)")
    return Verdict(True, None, "the agent reported success")


def final_reason(base: Reason, agent: dict[str, Any] | None) -> tuple[Reason, str] | None:
    """Refine the process-level reason with the driver's final record; None keeps it.

    Only an undisturbed exit is refined: what hopper asked for (abort,
    timeout, shutdown) and spawn failures stand as they are.
    """
    if agent is None or base not in (Reason.COMPLETED, Reason.EXIT_NONZERO):
        return None
    outcome = agent.get("outcome")
    detail = str(agent.get("detail") or "")
    if outcome == "succeeded":
        return Reason.COMPLETED, detail or "the agent reported success"
    if outcome == "check_failed":
        return Reason.CHECK_FAILED, detail
    if outcome == "idle_timeout":
        return Reason.IDLE_TIMEOUT, detail
    if outcome == "agent_error":
        return Reason.AGENT_ERROR, detail
    if outcome == "budget_exceeded":
        return Reason.BUDGET_EXCEEDED, detail
    return None
