"""Scale-out units: host death (core/hosts.py), dead-host recovery decisions,
global schedule counts, exclusive creation, slot leases and takeover markers."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.hosts import Beat, HostView, host_dead, pulse_stale
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import Action, RunSnapshot, decide
from hopper.core.schedule import Elsewhere, Pause, SlotLimits, schedule
from hopper.core.states import JobState
from hopper.store import leases as leases_module
from hopper.store.layout import Layout
from hopper.store.leases import Lease, Scope, SlotLeases, create_exclusive, scope_name
from hopper.store.saferead import read_bytes as real_read
from hopper.store.takeover import effective_owner, try_take

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def beat(host: str, age: float, *, pid: int = 1, stopped: bool = False) -> Beat:
    return Beat(host=host, pid=pid, owner=f"{host}:{pid}:1.0", age=age, stopped=stopped)


def record(state: JobState, n: int = 0, **kw: object) -> JobRecord:
    return JobRecord(
        id=f"20260101-000000-{n:03d}-x-abcd",
        name=f"x{n}",
        state=state,
        agent="bash",
        host="a",
        owner="a:1:1.0",
        inbox_path="inbox/x.prompt.md",
        created_at=NOW,
        **kw,  # type: ignore[arg-type]
    )


# -- which hosts are dead ---------------------------------------------------------
def test_a_host_is_dead_when_every_heartbeat_is_stale() -> None:
    assert not host_dead("a", [beat("a", 1.0)], 60, 1000)
    assert host_dead("a", [beat("a", 61.0)], 60, 1000)
    assert not host_dead("a", [beat("a", 61.0), beat("a", 2.0, pid=2)], 60, 1000)


def test_a_detached_watcher_keeps_its_host_alive() -> None:
    assert not host_dead("a", [beat("a", 9999.0, stopped=True)], 60, 1000)


def test_a_host_without_heartbeats_is_dead_only_after_watching_long_enough() -> None:
    assert not host_dead("a", [beat("b", 0.0)], 60, 10)
    assert host_dead("a", [beat("b", 0.0)], 60, 60)


def test_pulse() -> None:
    assert pulse_stale(None, 60) and pulse_stale(60.0, 60) and not pulse_stale(59.0, 60)


def test_host_view() -> None:
    view = HostView((beat("a", 100.0), beat("b", 1.0)), 60, 1000)
    assert view.dead_hosts("c") == {"a"}
    assert view.owner_alive("b:1:1.0") and not view.owner_alive("a:1:1.0")


# -- recovery of another host's jobs ------------------------------------------------
FOREIGN = RunSnapshot(
    record=record(JobState.RUNNING),
    corrupt=False,
    has_prompt=True,
    exit=None,
    dir_age=1.0,
    owner_alive=False,
    same_host=False,
    supervisor_alive=False,
)


def test_another_live_hosts_job_is_never_touched() -> None:
    assert decide(replace(FOREIGN, pulse_stale=True)) is Action.NOT_MINE
    assert decide(replace(FOREIGN, host_dead=True, owner_alive=True)) is Action.NOT_MINE


def test_a_dead_hosts_job_is_lost_only_once_its_pulse_stops() -> None:
    dead = replace(FOREIGN, host_dead=True)
    assert decide(dead) is Action.NOT_MINE  # its supervisor still writes: wait
    assert decide(replace(dead, pulse_stale=True)) is Action.LOST
    assert decide(replace(dead, supervisor_alive=True, pulse_stale=True)) is Action.LOST


def test_a_dead_hosts_queued_finished_and_claimed_jobs_are_taken() -> None:
    dead = replace(FOREIGN, host_dead=True)
    assert decide(replace(dead, record=record(JobState.QUEUED))) is Action.TAKE_QUEUED
    done = ExitStatus(started=True, exit_code=0, finished_at=NOW)
    assert decide(replace(dead, exit=done)) is Action.FINISH
    assert decide(replace(dead, record=None)) is Action.COMPLETE_CLAIM


# -- global counts in the scheduler -------------------------------------------------
def test_slots_held_elsewhere_count_against_the_limits() -> None:
    queued = [record(JobState.QUEUED, n) for n in range(3)]
    limits = SlotLimits(max_parallel=3)
    common = dict(pause=Pause(), known=[], now=NOW, dependency_timeout=60.0)
    assert len(schedule(queued, [], limits, **common).start) == 3  # type: ignore[arg-type]
    held = schedule(queued, [], limits, elsewhere=Elsewhere(total=2), **common)  # type: ignore[arg-type]
    assert len(held.start) == 1
    s = [record(JobState.QUEUED, 5, session="s")]
    busy = schedule(s, [], limits, elsewhere=Elsewhere(sessions=frozenset({"s"})), **common)  # type: ignore[arg-type]
    assert busy.start == []


# -- exclusive creation, leases, takeover -------------------------------------------
def test_create_exclusive_has_one_winner(tmp_path: Path) -> None:
    target = tmp_path / "lease"
    wins: list[int] = []

    def race(i: int) -> None:
        if create_exclusive(target, str(i).encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert target.read_text() == str(wins[0])
    assert [p.name for p in tmp_path.iterdir()] == ["lease"]  # no temporary left


def test_slot_leases_acquire_sweep_release(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    a = SlotLeases(layout, "h:1:1.0", "h")
    scope = Scope("all", 2)
    always: list[Lease] = []

    def keep(lease: Lease) -> bool:
        always.append(lease)
        return True

    assert a.acquire("j1", [scope], 0.0, keep) is not None
    assert a.acquire("j1", [scope], 0.0, keep) is not None  # idempotent per job
    assert a.acquire("j2", [scope], 0.0, keep) is not None
    assert a.count("all") == 2
    assert a.acquire("j3", [scope], 0.0, keep) is None  # full, nothing stale
    assert a.acquire("j3", [scope], 0.0, lambda lease: lease.job_id != "j1") is not None
    assert a.count("all") == 2
    a.release_job("j2", ["all"], 0.0)
    assert sorted(lease.job_id for lease in a.holders("all", 0.0)) == ["j3"]


def test_a_lease_released_by_name_reads_no_other_and_spares_a_retaken_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    scopes = [Scope("all", 4), Scope(scope_name("agent", "bash"), 4)]
    j1 = leases.acquire("j1", scopes, 0.0, lambda _: True)
    j2 = leases.acquire("j2", scopes, 0.0, lambda _: True)
    assert j1 is not None and j2 is not None

    def no_listing(*_: object) -> list[Lease]:
        raise AssertionError("release by name read the scope's leases")

    monkeypatch.setattr(leases, "holders", no_listing)
    leases.release_taken("j1", j1)
    monkeypatch.undo()
    assert [lease.job_id for lease in leases.holders("all", 0.0)] == ["j2"]
    assert [lease.job_id for lease in leases.holders(scopes[1].name, 0.0)] == ["j2"]
    # j2's slot reclaimed by another watcher and taken by j3: j2's release leaves it
    j2[0].unlink()
    assert create_exclusive(j2[0], b'{"job": "j3", "owner": "other:2:2.0", "host": "other"}')
    leases.release_taken("j2", j2)
    assert [lease.job_id for lease in leases.holders("all", 0.0)] == ["j3"]
    assert leases.count(scopes[1].name) == 0
    left = [n for n in os.listdir(j2[0].parent) if n.startswith(".")]
    assert all(n.startswith(".spare.") for n in left), left  # nothing left aside but spares


def test_a_lease_this_watcher_linked_is_released_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own lease is judged by the inode of the file set aside (its spare's), not
    read and parsed; a lease it cannot vouch for that way is read as before."""
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    scopes = [Scope("all", 4), Scope(scope_name("agent", "bash"), 4)]
    j1 = leases.acquire("j1", scopes, 0.0, lambda _: True)
    j2 = leases.acquire("j2", scopes, 0.0, lambda _: True)
    assert j1 is not None and j2 is not None
    read: list[object] = []

    def reading(path: object, limit: int) -> bytes:
        read.append(path)
        return real_read(path, limit)  # type: ignore[arg-type]

    monkeypatch.setattr(leases_module, "read_bytes", reading)
    leases.release_taken("j1", j1)
    assert read == []
    assert [lease.job_id for lease in leases.holders("all", 0.0)] == ["j2"]
    # not the job this watcher linked the lease for: read, and left alone
    leases.release_taken("j9", j2)
    assert len(read) == 2
    assert [lease.job_id for lease in leases.holders("all", 0.0)] == ["j2"]


def test_acquiring_reads_only_the_leases_other_watchers_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope's leases this watcher linked for other jobs are taken names, neither
    read nor stat'ed; another watcher's is read (it might be this job's, after a
    restart); a lease this watcher holds for the job is found again by its inode."""
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    scope = [Scope("all", 8)]
    held = [leases.acquire(f"j{i}", scope, 0.0, lambda _: True) for i in range(3)]
    assert all(h is not None for h in held)
    folder = held[0][0].parent  # type: ignore[index]
    assert create_exclusive(folder / "3", b'{"job": "x", "owner": "o:2:2.0", "host": "o"}')
    read: list[Path] = []
    real_read = leases_module._read

    def reading(path: Path, now: float) -> Lease | None:
        read.append(path)
        return real_read(path, now)

    stats: list[str] = []
    real_stat = os.stat

    def counting_stat(path: object, *args: object, **kw: object) -> os.stat_result:
        if os.path.dirname(str(path)) == str(folder):
            stats.append(os.path.basename(str(path)))
        return real_stat(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(leases_module, "_read", reading)
    monkeypatch.setattr(os, "stat", counting_stat)
    j4 = leases.acquire("j4", scope, 0.0, lambda _: True)
    assert j4 is not None and j4[0].name == "4"  # 0-2 ours, 3 the other watcher's
    assert read == [folder / "3"]
    ours = {"0", "1", "2"}
    assert [n for n in stats if n in ours] == []  # ours: not even a stat
    again = leases.acquire("j1", scope, 0.0, lambda _: True)  # a start retried
    assert again == held[1]
    assert [n for n in stats if n in ours] == ["1"]  # found by its inode
    monkeypatch.undo()
    assert sorted(h.job_id for h in leases.holders("all", 0.0)) == ["j0", "j1", "j2", "j4", "x"]


def test_a_released_lease_file_is_reused_for_the_next_lease_not_made_anew(
    tmp_path: Path,
) -> None:
    """A lease's file is kept as this watcher's spare once released: the next lease
    rewrites it in place (padded if shorter, still a readable lease) and links it;
    close() removes the spares, and the leases still held stay."""
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    scopes = [Scope("all", 2)]
    first = leases.acquire("a-long-job-id", scopes, 0.0, lambda _: True)
    assert first is not None
    inode = first[0].stat().st_ino
    leases.release_taken("a-long-job-id", first)
    assert leases.count("all") == 0
    again = leases.acquire("j2", scopes, 0.0, lambda _: True)
    assert again is not None
    assert again[0].stat().st_ino == inode  # the same file, no new inode
    assert [(h.job_id, h.owner) for h in leases.holders("all", 0.0)] == [("j2", "h:1:1.0")]
    spares = [n for n in os.listdir(again[0].parent) if n.startswith(".spare.")]
    assert len(spares) == 1
    leases.close()
    assert not [n for n in os.listdir(again[0].parent) if n.startswith(".spare.")]
    assert [h.job_id for h in leases.holders("all", 0.0)] == ["j2"]


def test_a_spare_still_linked_elsewhere_is_removed_not_rewritten(tmp_path: Path) -> None:
    """A lease our release could not remove (it names another job now: reclaimed and
    retaken, or put back) keeps its file: our spare of it is dropped, never rewritten."""
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    held = leases.acquire("j1", [Scope("all", 1)], 0.0, lambda _: True)
    assert held is not None
    other = held[0].with_name("kept")
    os.link(held[0], other)  # a second name for the lease's file (as a reclaim aside is)
    leases.release_taken("j1", held)
    assert not [n for n in os.listdir(held[0].parent) if n.startswith(".spare.")]
    assert json.loads(other.read_bytes())["job"] == "j1"  # untouched


def test_a_lease_in_every_scope_or_none(tmp_path: Path) -> None:
    leases = SlotLeases(Layout(tmp_path), "h:1:1.0", "h")
    busy = scope_name("session", "s/1")
    assert leases.acquire("j1", [Scope(busy, 1)], 0.0, lambda _: True)
    assert leases.acquire("j2", [Scope("all", 4), Scope(busy, 1)], 0.0, lambda _: True) is None
    assert leases.count("all") == 0


def test_takeover_is_won_once_and_chains_past_a_dead_taker(tmp_path: Path) -> None:
    assert effective_owner(tmp_path, "a:1:1") == ("a:1:1", "a:1:1")
    assert try_take(tmp_path, "a:1:1", "b:2:2")
    assert not try_take(tmp_path, "a:1:1", "c:3:3")
    current, chain = effective_owner(tmp_path, "a:1:1")
    assert current == "b:2:2"
    assert try_take(tmp_path, chain, "c:3:3")  # b died mid-takeover: c takes it from b
    assert effective_owner(tmp_path, "a:1:1")[0] == "c:3:3"


def test_a_takeover_won_after_the_snapshot_judged_the_owner_is_left_to_its_winner(
    tmp_path: Path,
) -> None:
    """Two survivors judge a dead host's job at once; one wins the takeover marker
    before the other reaches it. The other must not take the job from the winner
    (alive) by the chain key: it leaves it (CI found both filing it lost)."""
    from types import SimpleNamespace

    from hopper.reconcile import _take_over, snapshot
    from hopper.store.jobfile import JOB_FILE
    from inprocess import FakeClock

    run_dir = tmp_path / "runs" / "job"
    run_dir.mkdir(parents=True)
    dead = record(JobState.RUNNING).model_copy(update={"host": "h1", "owner": "h1:1:1.0"})
    (run_dir / JOB_FILE).write_text(dead.model_dump_json())
    me = "h3:3:3.0"
    runner = SimpleNamespace(intake=SimpleNamespace(ident=SimpleNamespace(owner=me)))
    snap = snapshot(run_dir, "h3", me, NOW.timestamp(), None, None)
    assert snap.judged_owner == "h1:1:1.0"
    assert try_take(run_dir, "h1:1:1.0", "h2:2:2.0")  # h2 wins, after our snapshot
    assert _take_over(snap, run_dir, runner, FakeClock()) is None  # type: ignore[arg-type]
    assert effective_owner(run_dir, "h1:1:1.0")[0] == "h2:2:2.0"
    # Without a winner in between, the same call takes the job (the control).
    other = tmp_path / "runs" / "job2"
    other.mkdir()
    (other / JOB_FILE).write_text(
        dead.model_copy(update={"id": dead.id[:-4] + "efgh"}).model_dump_json()
    )
    snap2 = snapshot(other, "h3", me, NOW.timestamp(), None, None)
    taken = _take_over(snap2, other, runner, FakeClock())  # type: ignore[arg-type]
    assert taken is not None and taken.record is not None and taken.record.owner == me
