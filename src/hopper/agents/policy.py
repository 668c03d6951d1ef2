"""The driver's policies as plain functions: retry delays, nudge messages, final state. Pure.

Standard library only (the job driver imports it). Policies, from front
matter or ``[agents.NAME]`` (docs/agents.md has an example of each):

* ``on_idle`` = ``abort`` | ``nudge``: no output for ``idle_timeout``;
* ``on_error`` = ``retry`` (default) | ``fail`` | ``pause``: an API error
  that ended the run. ``retry`` reruns the kinds hopper retries (rate_limit,
  quota, overloaded, network) up to ``api_retries``; ``fail`` never reruns;
  ``pause`` never reruns and holds the session's later prompts;
* ``on_dead`` = ``fail`` (default) | ``resume``: the CLI ended without a
  result (crashed, killed): resume the same session with ``CONTINUE_TEXT``.
"""

from __future__ import annotations

from hopper.agents.streamtext import shorten
from hopper.core.agent_outcome import retryable

CHECK_OUTPUT_CHARS = 6000
MAX_RETRY_DELAY = 600.0  # seconds: no announced retry-after holds a job longer per attempt
CONTINUE_TEXT = (
    "Your previous run ended without a result (the process stopped). "
    "Continue the task from where you were; if it is done, say so.\n"
)


def retry_delay(backoff: float, attempt: int, announced: float | None) -> float:
    """hopper's wait before rerun ``attempt`` (1-based): its doubling backoff, at
    least what the CLI announced (which carries the server's retry-after), capped."""
    own = backoff * float(2 ** (attempt - 1))
    return min(MAX_RETRY_DELAY, max(own, announced or 0.0))


def retries_error(on_error: str | None, kind: str | None, done: int, api_retries: int) -> bool:
    """``on_error``: is an API error of ``kind`` run again, ``done`` reruns having been
    made? Only ``retry`` (the default) reruns, only the kinds hopper retries, up to
    ``api_retries``."""
    return (on_error or "retry") == "retry" and retryable(kind) and done < api_retries


def pauses_on(on_error: str | None, kind: str | None) -> bool:
    """``on_error = "pause"``: does a failure of ``kind`` hold the session's later
    prompts? Only an API error does (not the agent's own failure)."""
    return on_error == "pause" and kind not in (None, "unknown", "permission_denied")


def idle_nudge_text(quiet: float) -> str:
    return (
        f"You have printed nothing for {quiet:g} seconds. Carry on with the "
        "task; if you are stuck or waiting on something, say what and stop.\n"
    )


def check_nudge_text(check: list[str], code: int | None, output: str) -> str:
    return (
        f"The check `{' '.join(check)}` failed with exit code {code}. "
        "Fix the problem so that it passes. Its output:\n\n```\n"
        f"{shorten(output, CHECK_OUTPUT_CHARS)}\n```\n"
    )


def final_state(
    outcome: str, kind: str | None, denials: list[str], result: str | None
) -> tuple[str, str | None]:
    """The agent state a finished job is left in, and why."""
    if kind == "permission_denied" or (outcome != "succeeded" and denials):
        return "waiting_for_input", f"a permission was refused: {denials[0] if denials else ''}"
    if outcome == "agent_error" and kind not in (None, "unknown"):
        return "api_error", None
    if result and result.rstrip().endswith("?"):
        return "waiting_for_input", "the agent's last message is a question"
    return "idle", None
