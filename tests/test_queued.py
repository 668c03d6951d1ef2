"""core/queued.py: the start order of the queued jobs, kept as the queue changes.

``first(k)`` must always equal what a pass over the whole queue would pick:
the k jobs without a session or ``after`` with the highest priority, ties by
id (claim order). Random sets, priority changes and removals are checked
against that pass, on fixed seeds.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from hopper.core.queued import QueuedJobs
from hopper.core.record import JobRecord
from hopper.core.states import JobState

NOW = datetime(2026, 11, 23, tzinfo=UTC)


@cache
def record(i: int, priority: int = 0, session: str | None = None) -> JobRecord:
    job_id = f"20261123-000000-{i:06d}-job-abcd"
    return JobRecord(
        id=job_id,
        name=f"job{i}",
        state=JobState.QUEUED,
        agent="bash",
        host="h",
        owner="h:1:1",
        inbox_path=f"inbox/job{i}.prompt.md",
        created_at=NOW,
        priority=priority,
        session=session,
    )


def by_pass(queued: dict[str, JobRecord], k: int) -> list[str]:
    plain = [r for r in queued.values() if not (r.session or r.after)]
    return [r.id for r in sorted(plain, key=lambda r: (-r.priority, r.id))[:k]]


def test_first_is_priority_then_claim_order_and_leaves_sessions_out() -> None:
    queued = QueuedJobs()
    for i, prio in enumerate([0, 5, 0, 5, -1]):
        queued[record(i, prio).id] = record(i, prio)
    queued[record(9, 99, session="s").id] = record(9, 99, session="s")
    assert [r.name for r in queued.first(3)] == ["job1", "job3", "job0"]
    assert [r.name for r in queued.first(10)] == ["job1", "job3", "job0", "job2", "job4"]
    assert [r.name for r in queued.special()] == ["job9"]
    assert [r.name for r in queued.first(3)] == ["job1", "job3", "job0"]  # asking changes nothing


def test_first_follows_removals_and_priority_changes() -> None:
    queued = QueuedJobs({record(i).id: record(i) for i in range(5)})
    del queued[record(0).id]  # started
    queued.pop(record(1).id)  # aborted while queued
    queued[record(4).id] = record(4, priority=7)  # `hopper priority`
    queued[record(2).id] = record(2)  # set again, unchanged (a start refused)
    assert [r.name for r in queued.first(5)] == ["job4", "job2", "job3"]
    queued.clear()
    assert queued.first(5) == [] and queued.special() == []
    queued.setdefault(record(3).id, record(3))
    assert [r.name for r in queued.first(5)] == ["job3"]


def test_first_matches_a_pass_over_the_queue_under_random_changes() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        queued = QueuedJobs()
        for _ in range(400):
            i = rng.randrange(60)
            action = rng.random()
            if action < 0.5:
                rec = record(i, rng.choice([-1, 0, 0, 3, 10]), rng.choice([None, None, "s"]))
                queued[rec.id] = rec
            elif action < 0.8:
                queued.pop(record(i).id, None)
            else:
                k = rng.randrange(1, 12)
                assert [r.id for r in queued.first(k)] == by_pass(queued, k), seed
        sessions = sorted(r.id for r in queued.values() if r.session)
        assert [r.id for r in queued.special()] == sessions, seed


def test_has_after_follows_sets_removals_and_replacements() -> None:
    """has_after() is asked on every start: it must equal a pass over the queue."""
    waits = record(1).model_copy(update={"after": ["job0"]})
    queued = QueuedJobs({record(i).id: record(i) for i in range(3)})
    assert not queued.has_after()
    queued[waits.id] = waits
    assert queued.has_after()
    queued[waits.id] = record(1)  # its dependency dropped: a plain record again
    assert not queued.has_after()
    queued[waits.id] = waits
    del queued[waits.id]  # started
    assert not queued.has_after()
    queued[waits.id] = waits
    queued.pop(waits.id)  # aborted while queued
    assert not queued.has_after()
    queued[record(2, session="s").id] = record(2, session="s")
    assert not queued.has_after()  # a session alone is no dependency
    for seed in range(10):
        rng = random.Random(seed)
        queued = QueuedJobs()
        for _ in range(300):
            i = rng.randrange(40)
            rec = record(i, session=rng.choice([None, "s"]))
            if rng.random() < 0.3:
                rec = rec.model_copy(update={"after": ["job0"]})
            if rng.random() < 0.6:
                queued[rec.id] = rec
            else:
                queued.pop(rec.id, None)
            assert queued.has_after() == any(r.after for r in queued.values()), seed


def _apply(queued: QueuedJobs, op: tuple[str, int, int, int]) -> list[str] | None:
    kind, i, priority, k = op
    if kind == "set":
        queued[record(i, priority).id] = record(i, priority)
    elif kind == "session":
        queued[record(i, priority, "s").id] = record(i, priority, "s")
    elif kind == "del":
        queued.pop(record(i).id, None)
    elif kind == "clear":
        queued.clear()
    elif kind == "default":
        queued.setdefault(record(i, priority).id, record(i, priority))
    else:
        return [r.id for r in queued.first(k)]
    return None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "set", "session", "del", "del", "clear", "default", "first"]),
            st.integers(0, 30),
            st.sampled_from([-2, 0, 0, 1, 5]),
            st.integers(0, 40),
        ),
        max_size=120,
    )
)
def test_first_with_its_front_equals_a_pass_under_any_changes(
    ops: list[tuple[str, int, int, int]],
) -> None:
    """The front (entries first() took off the heap, kept between calls) never changes
    the answer: after any sets, re-sets, removals and asks of any size, first(k) is
    the pass over the queue. The asks interleave, so a front walked only in part, a
    record set again before or after the front's last entry, and stale entries in
    the front are all covered."""
    queued = QueuedJobs()
    for op in ops:
        got = _apply(queued, op)
        if got is not None:
            assert got == by_pass(queued, op[3])
    for k in (0, 1, 7, 64):
        assert [r.id for r in queued.first(k)] == by_pass(queued, k)
