"""core/schedule.py: which queued jobs start, which fail. Pure: no processes, no clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from hopper.core.budgets import Holds, JobSpend, Rule, assess
from hopper.core.record import JobRecord
from hopper.core.schedule import KnownJob, Pause, SlotLimits, cycles, resolve, schedule
from hopper.core.states import JobState, Reason

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
WIDE = SlotLimits(max_parallel=100, agent_default=100)
NO_PAUSE = Pause()


def job(n: int, **fields: object) -> JobRecord:
    base: dict[str, object] = {
        "id": f"20261122-120000-{n:03d}-job{n}-abcd",
        "name": f"job{n}",
        "state": JobState.QUEUED,
        "agent": "bash",
        "host": "h",
        "inbox_path": f"inbox/job{n}.prompt.md",
        "created_at": NOW,
    }
    base.update(fields)
    return JobRecord.model_validate(base)


def known(*records: JobRecord) -> list[KnownJob]:
    return [KnownJob(r.id, r.name, r.state) for r in records]


def decide(queued, running=(), limits=WIDE, pause=NO_PAUSE, extra=(), now=NOW, timeout=60.0):
    everyone = known(*queued, *running) + list(extra)
    return schedule(list(queued), list(running), limits, pause, everyone, now, timeout)


def test_priority_then_claim_order() -> None:
    a, b, c = job(1), job(2, priority=5), job(3, priority=5)
    d = decide([a, b, c], limits=SlotLimits(max_parallel=2))
    assert d.start == [b.id, c.id]
    assert d.waiting[a.id] == "all slots busy"


def test_per_agent_default_limits() -> None:
    claude = [job(i, agent="claude") for i in range(3)]
    bash = [job(10 + i) for i in range(3)]
    d = decide(claude + bash, limits=SlotLimits(max_parallel=4))
    assert d.start == [claude[0].id, *(b.id for b in bash)]  # agents 1 each, bash up to max


def test_agent_and_group_limits_count_running_jobs() -> None:
    running = job(0, state=JobState.RUNNING, agent="codex", group="night")
    queued = [job(1, agent="codex"), job(2, group="night"), job(3, group="day")]
    limits = SlotLimits(max_parallel=10, agents={"codex": 1}, groups={"night": 1})
    assert decide(queued, [running], limits=limits).start == [queued[2].id]


def test_a_job_that_fits_is_not_held_behind_one_that_does_not() -> None:
    big = job(1, agent="claude", priority=9)
    running = job(0, state=JobState.RUNNING, agent="claude")
    small = job(2)
    assert decide([big, small], [running], limits=SlotLimits(max_parallel=4)).start == [small.id]


def test_pause_all_and_pause_group() -> None:
    a, b = job(1, group="x"), job(2, group="y")
    assert decide([a, b], pause=Pause(all=True)).start == []
    d = decide([a, b], pause=Pause(groups=frozenset({"x"})))
    assert d.start == [b.id] and d.paused == {a.id}


def test_retry_backoff_waits() -> None:
    a = job(1, not_before=NOW + timedelta(seconds=5))
    assert decide([a]).start == []
    assert decide([a], now=NOW + timedelta(seconds=6)).start == [a.id]


def test_sessions_run_one_at_a_time_in_claim_order() -> None:
    a, b = job(1, session="s"), job(2, session="s", priority=10)
    first = decide([a, b])
    assert first.start == [a.id]
    assert first.waiting[b.id] == "waiting for session s's turn"
    running = a.model_copy(update={"state": JobState.RUNNING})
    assert decide([b], [running]).start == []
    assert decide([b]).start == [b.id]


def test_a_paused_session_holds_all_its_jobs_and_says_why() -> None:
    a, b, c = job(1, session="s"), job(2, session="s"), job(3, session="t")
    pause = Pause(sessions={"s": "job x failed agent_error/auth (on_error = pause)"})
    d = decide([a, b, c], pause=pause)
    assert d.start == [c.id]
    assert d.paused == {a.id, b.id}  # so `hopper run --until-idle` drains past them
    assert d.waiting[a.id].startswith("session s paused: job x failed agent_error/auth")
    assert d.waiting[b.id] == d.waiting[a.id]


def test_dependency_waits_then_starts() -> None:
    dep = job(1)
    after = job(2, after=["job1"])
    assert decide([dep, after]).start == [dep.id]
    running = dep.model_copy(update={"state": JobState.RUNNING})
    assert decide([after], [running]).waiting[after.id] == "waiting for job1"
    done = KnownJob(dep.id, dep.name, JobState.SUCCEEDED)
    assert decide([after], extra=[done]).start == [after.id]


def test_dependency_failed_names_the_job() -> None:
    after = job(2, after=["job1", "job3"])
    failed = KnownJob("20261122-115900-000-job1-aaaa", "job1", JobState.FAILED)
    ok = KnownJob("20261122-115900-000-job3-aaaa", "job3", JobState.SUCCEEDED)
    (failure,) = decide([after], extra=[failed, ok]).fail
    assert failure.reason is Reason.DEPENDENCY_FAILED
    assert "job1" in failure.detail and failed.id in failure.detail and "job3" not in failure.detail


def test_dependency_by_id() -> None:
    dep = KnownJob("20261122-115900-000-x-aaaa", "x", JobState.ABORTED)
    (failure,) = decide([job(2, after=[dep.id])], extra=[dep]).fail
    assert failure.reason is Reason.DEPENDENCY_FAILED and "aborted" in failure.detail


def test_cycle_fails_every_member() -> None:
    a, b, c = job(1, after=["job2"]), job(2, after=["job1"]), job(3, after=["job3"])
    d = decide([a, b, c])
    assert {(f.job_id, f.reason) for f in d.fail} == {
        (a.id, Reason.DEPENDENCY_CYCLE),
        (b.id, Reason.DEPENDENCY_CYCLE),
        (c.id, Reason.DEPENDENCY_CYCLE),
    }
    assert d.start == []


def test_unknown_dependency_times_out() -> None:
    a = job(1, after=["nope"])
    assert decide([a]).fail == []
    (failure,) = decide([a], now=NOW + timedelta(seconds=61)).fail
    assert failure.reason is Reason.DEPENDENCY_UNKNOWN and "nope" in failure.detail


def test_name_resolves_to_the_active_job_over_an_old_failure() -> None:
    old = KnownJob("20261121-000000-000-m-aaaa", "m", JobState.FAILED)
    new = KnownJob("20261122-000000-000-m-bbbb", "m", JobState.QUEUED)
    assert resolve("m", [old, new]) == new
    assert resolve("m", [old]) == old
    assert resolve("zzz", [old]) is None


def test_cycles_finds_only_loops() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": []}) == set()
    assert cycles({"a": ["b"], "b": ["a"], "c": ["a"]}) == {"a", "b"}
    assert cycles({"a": ["a"]}) == {"a"}


# -- properties -------------------------------------------------------------------

agents = st.sampled_from(["bash", "claude", "codex"])
groups = st.sampled_from([None, "g1", "g2"])
sessions = st.sampled_from([None, None, "s1", "s2"])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[JobRecord], list[JobRecord], SlotLimits, Pause]:
    n = draw(st.integers(0, 12))
    records = []
    for i in range(n):
        after = draw(st.lists(st.integers(0, 14), max_size=2))
        records.append(
            job(
                i,
                agent=draw(agents),
                group=draw(groups),
                session=draw(sessions),
                priority=draw(st.integers(-2, 2)),
                after=[f"job{a}" for a in after if a != i],
                state=draw(st.sampled_from([JobState.QUEUED] * 3 + [JobState.RUNNING])),
            )
        )
    queued = [r for r in records if r.state is JobState.QUEUED]
    running = [r for r in records if r.state is JobState.RUNNING]
    limits = SlotLimits(
        max_parallel=draw(st.integers(1, 6)),
        agents={"claude": draw(st.integers(1, 3))},
        agent_default=draw(st.integers(1, 2)),
        groups={"g1": draw(st.integers(1, 2))},
        group_default=draw(st.sampled_from([None, 1, 3])),
    )
    pause = Pause(groups=draw(st.sampled_from([frozenset(), frozenset({"g2"})])))
    return queued, running, limits, pause


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_properties(world: tuple[list[JobRecord], list[JobRecord], SlotLimits, Pause]) -> None:
    queued, running, limits, pause = world
    everyone = known(*queued, *running)
    d = schedule(queued, running, limits, pause, everyone, NOW, 60.0)
    by_id = {r.id: r for r in queued}
    started = [by_id[i] for i in d.start]
    after = running + started
    # limits are never exceeded (by what starts now)
    if started:
        assert len(after) <= max(limits.max_parallel, len(running))
        for r in started:
            assert sum(x.agent == r.agent for x in after) <= max(
                limits.for_agent(r.agent), sum(x.agent == r.agent for x in running)
            )
            cap = limits.for_group(r.group)
            if cap is not None and r.group is not None:
                assert sum(x.group == r.group for x in after) <= max(
                    cap, sum(x.group == r.group for x in running)
                )
    # no job starts before its dependencies succeed (none have succeeded here)
    assert all(not r.after for r in started)
    # session order: at most one per session, none while one runs, the earliest queued one
    for r in started:
        if r.session:
            assert not any(x.session == r.session for x in running)
            assert [x.id for x in started if x.session == r.session] == [r.id]
            # the earliest queued one that is not being failed in this same pass
            failing = {f.job_id for f in d.fail}
            assert (
                min(x.id for x in queued if x.session == r.session and x.id not in failing) == r.id
            )
    # no paused job starts; failing jobs do not start
    assert not any(pause.covers(r.group) for r in started)
    assert not {f.job_id for f in d.fail} & set(d.start)
    # a higher priority never waits behind a lower one of the same group and agent
    for low in started:
        for high in queued:
            if (
                high.id not in d.start
                and high.id in d.waiting
                and d.waiting[high.id].endswith(("slots busy", "at its limit"))
                and high.group == low.group
                and high.agent == low.agent
            ):
                assert high.priority <= low.priority
    # no eligible job waits while every slot it needs is free
    for r in queued:
        if d.waiting.get(r.id, "").endswith(("slots busy", "at its limit")):
            cap = limits.for_group(r.group)
            full = (
                len(after) >= limits.max_parallel
                or sum(x.agent == r.agent for x in after) >= limits.for_agent(r.agent)
                or (cap is not None and sum(x.group == r.group for x in after) >= cap)
            )
            assert full, r


def test_a_reached_budget_holds_its_scope_agent_jobs_only() -> None:
    zone = ZoneInfo("UTC")
    rule = Rule("group", "app", "day", "usd", 1.0)
    spent = JobSpend("x", NOW, "claude", "app", None, 2.0, None)
    holds = Holds(tuple(assess([rule], [spent], NOW, zone)), zone)
    agent = job(1, agent="claude", group="app")
    script = job(2, agent="bash", group="app")
    other = job(3, agent="claude", group="web")
    first = job(4, agent="codex", group="app", session="s")
    later = job(5, agent="claude", group="web", session="s")  # behind 4 in its session
    d = schedule(
        [agent, script, other, later, first], [], WIDE, NO_PAUSE, [], NOW, 60.0, budgets=holds
    )
    assert d.start == [script.id, other.id]
    assert d.waiting[later.id] == "waiting for session s's turn"
    assert set(d.held) == {agent.id, first.id}
    assert d.held[agent.id].startswith("waiting: group app spent $2.00 of $1.00 today")
    assert d.waiting[agent.id] == d.held[agent.id]
    assert d.paused == frozenset()  # not a PAUSE
