"""core/states.py: the whole transition table, and where every reason lands."""

from __future__ import annotations

import itertools

import pytest

from hopper.core.states import (
    ACTIVE_STATES,
    REASON_STATE,
    TERMINAL_STATES,
    IllegalTransition,
    JobState,
    Reason,
    check_transition,
    is_terminal,
    state_for,
)

Q, R, S, F, A = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.ABORTED,
)
ALLOWED = {(Q, R), (Q, F), (Q, A), (R, S), (R, F), (R, A), (R, Q)}
ALL_PAIRS = list(itertools.product(JobState, JobState))


@pytest.mark.parametrize(("old", "new"), sorted(ALLOWED), ids=lambda s: str(s))
def test_allowed(old: JobState, new: JobState) -> None:
    check_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"), [p for p in ALL_PAIRS if p not in ALLOWED], ids=lambda s: str(s)
)
def test_forbidden(old: JobState, new: JobState) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(old, new)
    assert str(old) in str(info.value) and str(new) in str(info.value)


def test_queued_cannot_succeed_without_running() -> None:
    with pytest.raises(IllegalTransition):
        check_transition(Q, S)


@pytest.mark.parametrize("terminal", sorted(TERMINAL_STATES))
def test_terminal_states_are_final(terminal: JobState) -> None:
    for new in JobState:
        with pytest.raises(IllegalTransition):
            check_transition(terminal, new)


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_maps_to_a_terminal_state(reason: Reason) -> None:
    state = state_for(reason)
    assert is_terminal(state)
    assert reason in REASON_STATE


def test_reason_states_match_the_contract() -> None:
    """Only `completed` succeeds; `aborted` and `shutdown` abort; every other reason fails."""
    assert {r for r in Reason if state_for(r) is S} == {Reason.COMPLETED}
    aborted = {Reason.ABORTED, Reason.SHUTDOWN, Reason.INTERRUPTED}
    assert {r for r in Reason if state_for(r) is A} == aborted
    failed = {r for r in Reason if state_for(r) is F}
    assert failed == set(Reason) - {Reason.COMPLETED} - aborted
    assert {
        Reason.EXIT_NONZERO,
        Reason.SIGNALED,
        Reason.TIMEOUT,
        Reason.BAD_PROMPT,
        Reason.UNKNOWN_AGENT,
        Reason.SPAWN_FAILED,
        Reason.LOST,
    } <= failed


def test_states_partition() -> None:
    assert set(JobState) == TERMINAL_STATES | ACTIVE_STATES
    assert not TERMINAL_STATES & ACTIVE_STATES
    assert not is_terminal(Q) and not is_terminal(R)


def test_wire_values_are_stable() -> None:
    assert [s.value for s in JobState] == ["queued", "running", "succeeded", "failed", "aborted"]
    assert Reason("bad_prompt") is Reason.BAD_PROMPT
    assert Reason("unknown_agent") is Reason.UNKNOWN_AGENT
