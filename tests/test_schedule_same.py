"""core/schedule.py's loops, made leaner, decide exactly as the code before them.

``schedule_before`` is :func:`hopper.core.schedule.schedule` as it was before
its loops were tightened (issue 31: the start order by a stable sort on
priority, an early exit once no slot is left, the session checks only for a
job with a session). On random worlds — sessions, paused sessions and groups,
PAUSE of everything, retries backing off, reached budgets, other watchers'
slots, dependencies — both give the same Decision, the order of ``waiting``
included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from hopper.core.budgets import Holds, JobSpend, Rule, assess
from hopper.core.record import JobRecord
from hopper.core.schedule import (
    Decision,
    Elsewhere,
    KnownJob,
    Pause,
    SlotLimits,
    _dependencies,
    schedule,
)
from hopper.core.sessions import session_free, turn_wait
from hopper.core.states import JobState
from test_schedule import NOW, job, known


def schedule_before(
    queued: Sequence[JobRecord],
    running: Sequence[JobRecord],
    limits: SlotLimits,
    pause: Pause,
    known: Sequence[KnownJob],
    now: datetime,
    dependency_timeout: float,
    elsewhere: Elsewhere | None = None,
    budgets: Holds | None = None,
) -> Decision:
    other = elsewhere or Elsewhere()
    holds = budgets or Holds()
    held: dict[str, str] = {}
    failures, waiting = _dependencies(queued, known, now, dependency_timeout)
    failing = {f.job_id for f in failures}
    busy = {r.session for r in running if r.session} | set(other.sessions)
    paused: set[str] = set()
    eligible: list[JobRecord] = []
    for record in sorted(queued, key=lambda r: r.id):
        if record.id in failing:
            continue
        if record.session and record.session in pause.sessions:
            busy.add(record.session)
            paused.add(record.id)
            why = pause.sessions[record.session]
            waiting[record.id] = f"session {record.session} paused: {why}"
            continue
        session_busy = not session_free(record.session, busy)
        if record.session:
            busy.add(record.session)
        if record.id in waiting:
            continue
        if session_busy and record.session:
            waiting[record.id] = turn_wait(record.session)
            continue
        if pause.covers(record.group):
            paused.add(record.id)
            continue
        hold = holds.why(record.agent, record.group, record.session)
        if hold is not None:
            waiting[record.id] = held[record.id] = hold
            continue
        if record.not_before is not None and record.not_before > now:
            waiting[record.id] = "retry backing off"
            continue
        eligible.append(record)
    total = len(running) + other.total
    per_agent = Counter(r.agent for r in running) + Counter(other.agents)
    per_group: Counter[str | None] = Counter(r.group for r in running)
    per_group.update(other.groups)
    start: list[str] = []
    for record in sorted(eligible, key=lambda r: (-r.priority, r.id)):
        group_limit = limits.for_group(record.group)
        if total >= limits.max_parallel:
            waiting[record.id] = "all slots busy"
        elif per_agent[record.agent] >= limits.for_agent(record.agent):
            waiting[record.id] = f"agent {record.agent} at its limit"
        elif group_limit is not None and per_group[record.group] >= group_limit:
            waiting[record.id] = f"group {record.group} at its limit"
        else:
            start.append(record.id)
            total += 1
            per_agent[record.agent] += 1
            per_group[record.group] += 1
    return Decision(start, failures, frozenset(paused), waiting, held)


ZONE = ZoneInfo("UTC")
SPENT = Holds(
    tuple(
        assess(
            [Rule("group", "g1", "day", "usd", 1.0), Rule("session", "s2", "day", "usd", 1.0)],
            [
                JobSpend("x", NOW, "claude", "g1", None, 2.0, None),
                JobSpend("y", NOW, "codex", None, "s2", 2.0, None),
            ],
            NOW,
            ZONE,
        )
    ),
    ZONE,
)


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(0, 40))
    records = []
    for i in range(n):
        after = draw(st.lists(st.integers(0, 44), max_size=2)) if draw(st.booleans()) else []
        back_off = draw(st.sampled_from([None, None, -30, 30]))
        records.append(
            job(
                i,
                agent=draw(st.sampled_from(["bash", "bash", "claude", "codex"])),
                group=draw(st.sampled_from([None, "g1", "g2", "g3"])),
                session=draw(st.sampled_from([None, None, None, "", "s1", "s2", "s3"])),
                priority=draw(st.integers(-2, 2)),
                after=[f"job{a}" for a in after if a != i],
                not_before=None if back_off is None else NOW + timedelta(seconds=back_off),
                state=draw(
                    st.sampled_from(
                        [JobState.QUEUED] * 4
                        + [JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED]
                    )
                ),
            )
        )
    queued = [r for r in records if r.state is JobState.QUEUED]
    draw(st.randoms()).shuffle(queued)  # the window comes in start order, not claim order
    return {
        "queued": queued,
        "running": [r for r in records if r.state is JobState.RUNNING],
        "limits": SlotLimits(
            max_parallel=draw(st.integers(1, 8)),
            agents={"claude": draw(st.integers(1, 3))},
            agent_default=draw(st.integers(1, 3)),
            groups={"g1": draw(st.integers(1, 2))},
            group_default=draw(st.sampled_from([None, 1, 3])),
        ),
        "pause": Pause(
            all=draw(st.integers(0, 9)) == 0,
            groups=draw(st.sampled_from([frozenset(), frozenset({"g2"})])),
            sessions=draw(st.sampled_from([{}, {"s3": "its job failed"}])),
        ),
        "known": known(*records),
        "now": NOW,
        "dependency_timeout": draw(st.sampled_from([0.0, 60.0])),
        "elsewhere": draw(
            st.sampled_from(
                [
                    None,
                    Elsewhere(total=2, agents={"bash": 1}, groups={"g1": 1}),
                    Elsewhere(total=1, sessions=frozenset({"s1"})),
                ]
            )
        ),
        "budgets": draw(st.sampled_from([None, SPENT])),
    }


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_schedule_decides_as_before(world: dict[str, object]) -> None:
    new = schedule(**world)  # type: ignore[arg-type]
    old = schedule_before(**world)  # type: ignore[arg-type]
    assert new == old
    assert list(new.waiting.items()) == list(old.waiting.items())
