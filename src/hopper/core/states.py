"""Job states, terminal reasons and the allowed transitions: the whole table.

Theory of operation: a job is ``queued`` from the moment its prompt is
claimed until it may start, ``running`` while its supervisor lives, and then
exactly one of the terminal states. Every terminal state carries a
:class:`Reason`, a stable machine-readable word a person or a script can
branch on; the human sentence lives in ``detail`` beside it.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"


class Reason(StrEnum):
    """Why a job ended. Null (None) until the job is terminal."""

    COMPLETED = "completed"  # exit status 0
    EXIT_NONZERO = "exit_nonzero"
    SIGNALED = "signaled"  # killed by a signal hopper did not send
    TIMEOUT = "timeout"
    ABORTED = "aborted"  # ABORT marker or `hopper abort`
    INTERRUPTED = "interrupted"  # an interactive session's turn interrupted; the session lives on
    SHUTDOWN = "shutdown"  # the watcher was stopped with on_stop = "abort"
    BAD_PROMPT = "bad_prompt"
    UNKNOWN_AGENT = "unknown_agent"
    SPAWN_FAILED = "spawn_failed"
    LOST = "lost"  # process gone and no exit status was ever recorded
    AGENT_ERROR = "agent_error"  # the agent reported an error (job.json error_kind says which)
    CHECK_FAILED = "check_failed"  # the check still failed after max_nudges nudges
    IDLE_TIMEOUT = "idle_timeout"  # the job (bash or agent) printed nothing for idle_timeout
    MEMORY_LIMIT = "memory_limit"  # the process tree's RSS went past memory_max
    OUTPUT_LIMIT = "output_limit"  # job.log grew past output_max
    DEPENDENCY_FAILED = "dependency_failed"  # a job named in `after` failed or was aborted
    DEPENDENCY_CYCLE = "dependency_cycle"  # `after` jobs wait on each other
    DEPENDENCY_UNKNOWN = "dependency_unknown"  # an `after` name never appeared in time
    WORKSPACE_FAILED = "workspace_failed"  # the folder or git worktree could not be made
    BUDGET_EXCEEDED = "budget_exceeded"  # a spend limit: the job's own, or its scope's budget


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED})
ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.RUNNING})

# Which terminal state each reason lands in.
REASON_STATE: dict[Reason, JobState] = {
    Reason.COMPLETED: JobState.SUCCEEDED,
    Reason.EXIT_NONZERO: JobState.FAILED,
    Reason.SIGNALED: JobState.FAILED,
    Reason.TIMEOUT: JobState.FAILED,
    Reason.ABORTED: JobState.ABORTED,
    Reason.INTERRUPTED: JobState.ABORTED,
    Reason.SHUTDOWN: JobState.ABORTED,
    Reason.BAD_PROMPT: JobState.FAILED,
    Reason.UNKNOWN_AGENT: JobState.FAILED,
    Reason.SPAWN_FAILED: JobState.FAILED,
    Reason.LOST: JobState.FAILED,
    Reason.AGENT_ERROR: JobState.FAILED,
    Reason.CHECK_FAILED: JobState.FAILED,
    Reason.IDLE_TIMEOUT: JobState.FAILED,
    Reason.MEMORY_LIMIT: JobState.FAILED,
    Reason.OUTPUT_LIMIT: JobState.FAILED,
    Reason.DEPENDENCY_FAILED: JobState.FAILED,
    Reason.DEPENDENCY_CYCLE: JobState.FAILED,
    Reason.DEPENDENCY_UNKNOWN: JobState.FAILED,
    Reason.WORKSPACE_FAILED: JobState.FAILED,
    Reason.BUDGET_EXCEEDED: JobState.FAILED,
}

_ALLOWED: frozenset[tuple[JobState, JobState]] = frozenset(
    {
        (JobState.QUEUED, JobState.RUNNING),  # QUEUED -> RUNNING: a slot was free
        (JobState.QUEUED, JobState.FAILED),  # bad prompt, unknown agent, spawn, dependency
        (JobState.QUEUED, JobState.ABORTED),  # aborted before it started
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.ABORTED),
        (JobState.RUNNING, JobState.QUEUED),  # recovery: recorded running, never released
    }
)


class IllegalTransition(ValueError):
    """A state change the table does not allow was attempted."""


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_STATES


def check_transition(old: JobState, new: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in the table."""
    if (old, new) not in _ALLOWED:
        raise IllegalTransition(f"job state {old} -> {new} is not allowed")


def state_for(reason: Reason) -> JobState:
    return REASON_STATE[reason]
