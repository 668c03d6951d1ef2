"""The supervisor's stop ladder (proc/ladder.py) on a fake clock: no sleeps, no processes."""

from __future__ import annotations

import signal

from hopper.proc.ladder import KILL_REPEAT, Action, KillTree, Ladder, Send, Stop, stop_now

TERM, INT, KILL = int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGKILL)


def _drive(ladder: Ladder, times: list[float]) -> list[tuple[float, Action]]:
    """Step the ladder at each fake time; the actions it asked for, with when."""
    done: list[tuple[float, Action]] = []
    for now in times:
        ladder, action = ladder.step(now)
        if action is not None:
            done.append((now, action))
    return done


def test_nothing_happens_before_a_stop_begins() -> None:
    ladder = Ladder(grace=5.0)
    assert not ladder.stopping and ladder.due is None
    assert _drive(ladder, [0.0, 100.0, 1e9]) == []


def test_sigterm_then_sigkill_after_the_grace() -> None:
    ladder = Ladder(grace=5.0).begin(100.0, [TERM])
    assert ladder.stopping and ladder.due == 100.0
    ladder, action = ladder.step(100.0)
    assert action == Send(TERM) and ladder.due == 105.0
    ladder, action = ladder.step(104.999)
    assert action is None
    ladder, action = ladder.step(105.0)
    assert action == KillTree()


def test_an_interactive_agent_gets_sigint_first_then_sigterm_then_sigkill() -> None:
    ladder = Ladder(grace=2.0).begin(0.0, [INT, TERM])
    steps = _drive(ladder, [0.0, 1.0, 2.0, 3.0, 4.0])
    assert steps == [(0.0, Send(INT)), (2.0, Send(TERM)), (4.0, KillTree())]


def test_an_output_limit_kills_at_once_without_grace() -> None:
    ladder = Ladder(grace=30.0).begin(7.0, [INT, TERM], at_once=True)
    ladder, action = ladder.step(7.0)
    assert action == KillTree()


def test_kill_rounds_repeat_until_the_job_is_reaped() -> None:
    """The supervisor keeps stepping while the job is not reaped: SIGKILL every KILL_REPEAT."""
    ladder = Ladder(grace=1.0).begin(0.0, [TERM])
    times = [0.0, 1.0, 1.0 + KILL_REPEAT / 2, 1.0 + KILL_REPEAT, 1.0 + 2 * KILL_REPEAT]
    steps = _drive(ladder, times)
    assert steps == [
        (0.0, Send(TERM)),
        (1.0, KillTree()),
        (1.0 + KILL_REPEAT, KillTree()),
        (1.0 + 2 * KILL_REPEAT, KillTree()),
    ]


def test_a_second_stop_request_does_not_restart_the_ladder() -> None:
    ladder = Ladder(grace=5.0).begin(0.0, [TERM])
    ladder, _ = ladder.step(0.0)
    again = ladder.begin(3.0, [TERM])
    assert again == ladder  # SIGKILL still due at 5.0, not 8.0
    assert _drive(again, [3.0, 5.0]) == [(5.0, KillTree())]


def test_sigkill_among_the_stop_signals_is_the_kill_step() -> None:
    ladder = Ladder(grace=5.0).begin(0.0, [KILL])
    assert _drive(ladder, [0.0]) == [(0.0, KillTree())]


def test_zero_grace_sends_the_next_step_at_the_same_instant() -> None:
    ladder = Ladder(grace=0.0).begin(0.0, [TERM])
    assert _drive(ladder, [0.0, 0.0]) == [(0.0, Send(TERM)), (0.0, KillTree())]


# -- whether a stop begins now (stop_now), on a fake clock -------------------------------


def test_nothing_calls_for_a_stop_before_the_deadline() -> None:
    assert stop_now(False, False, None, None, 100.0) is None
    assert stop_now(False, False, None, 105.0, 104.99) is None


def test_the_deadline_begins_a_timeout_at_its_instant() -> None:
    assert stop_now(False, False, None, 105.0, 105.0) == Stop("timeout")
    assert stop_now(False, False, None, 105.0, 900.0) == Stop("timeout")


def test_a_request_wins_over_a_limit_and_the_timeout() -> None:
    assert stop_now(False, True, None, 105.0, 200.0) == Stop("request")
    assert stop_now(False, True, "memory", None, 1.0) == Stop("request")


def test_a_limit_wins_over_the_timeout() -> None:
    assert stop_now(False, False, "memory", 105.0, 200.0) == Stop("limit", "memory")
    assert stop_now(False, False, "idle", None, 1.0) == Stop("limit", "idle")


def test_only_an_output_limit_is_a_kill_at_once() -> None:
    assert stop_now(False, False, "output", None, 1.0) == Stop("limit", "output", at_once=True)
    for limit in ("memory", "idle"):
        stop = stop_now(False, False, limit, None, 1.0)
        assert stop is not None and not stop.at_once


def test_no_second_stop_while_one_is_under_way() -> None:
    for requested, limit, deadline in (
        (True, None, None),
        (False, "output", None),
        (False, None, 1.0),
    ):
        assert stop_now(True, requested, limit, deadline, 50.0) is None


def test_a_timeout_then_the_ladder_on_the_same_clock() -> None:
    """The supervisor's turn: stop_now says timeout at the deadline, the ladder sends
    SIGTERM at once and SIGKILL a grace later."""
    ladder, now = Ladder(grace=2.0), 10.0
    stop = stop_now(ladder.stopping, False, None, 10.0, now)
    assert stop == Stop("timeout")
    ladder = ladder.begin(now, [signal.SIGTERM], at_once=stop.at_once)
    ladder, action = ladder.step(now)
    assert action == Send(signal.SIGTERM)
    assert stop_now(ladder.stopping, True, None, 10.0, 11.0) is None
    ladder, action = ladder.step(12.0)
    assert action == KillTree()
