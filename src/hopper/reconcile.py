"""Start-up recovery: gather a snapshot per run directory, carry out the decision.

The decisions are core/recovery.py's; this module only looks and acts.

Each run directory is recovered under the loop's guard: one that cannot be
read or acted on (a permission, a file where a directory belongs, a bug) is
logged once and skipped, and the pass goes on. A pass also runs every
``reconcile_interval`` on an idle watcher, so finished runs must cost next to
nothing: :class:`FiledRuns` remembers each run found terminal and filed with
its directory's mtime, and skips it (one ``lstat``, no read) until something
is created, renamed or removed in it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from hopper.clock import Clock
from hopper.core import lifecycle
from hopper.core.hosts import HostView, pulse_stale
from hopper.core.lifecycle import TakenOver
from hopper.core.owner import parse_owner
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import Action, RunSnapshot, decide
from hopper.core.states import JobState, is_terminal
from hopper.errors import JobFileCorrupt
from hopper.executors.protocol import Ended, How, Recovery
from hopper.proc import identity
from hopper.runner import Runner
from hopper.store import ledger, spend
from hopper.store.claim import read_claim, remove_empty_claim
from hopper.store.finalize import move_prompt
from hopper.store.jobfile import (
    EXIT_FILE,
    JOB_FILE,
    PROMPT_FILE,
    RESOURCES_FILE,
    read_exit,
    read_record,
)
from hopper.store.saferead import UnreadableFile, read_bytes
from hopper.store.takeover import effective_owner, try_take

log = logging.getLogger(__name__)


# Actions that change who owns a job: a dead owner's job is taken exactly once.
TAKEOVERS = frozenset(
    {
        Action.COMPLETE_CLAIM,
        Action.TAKE_QUEUED,
        Action.REQUEUE,
        Action.FINISH,
        Action.ADOPT,
        Action.LOST,
    }
)


def _another_supervisors(status: ExitStatus | None, record: JobRecord) -> bool:
    """exit.json written by a supervisor other than the one the record names, as
    an abandoned start's (``started: false``) left beside the start tried after it."""
    mine, theirs = record.supervisor_pid, status.supervisor_pid if status else None
    return mine is not None and theirs is not None and theirs != mine


def _pulse_age(run_dir: Path, now: float) -> float | None:
    """Seconds since job.json or the supervisor's resources.json last changed."""
    times = []
    for name in (JOB_FILE, RESOURCES_FILE):
        try:
            times.append(os.stat(run_dir / name).st_mtime)
        except OSError:
            continue
    return now - max(times) if times else None


def snapshot(
    run_dir: Path,
    host: str,
    me: str,
    now: float,
    hosts: HostView | None = None,
    report: Callable[[JobFileCorrupt], None] | None = None,
) -> RunSnapshot:
    """What recovery needs to know of one run directory. ``report`` is told of a
    corrupt job.json (default: logged; the watcher logs it once while it lasts)."""
    record: JobRecord | None = None
    corrupt = False
    try:
        record = read_record(run_dir)
    except FileNotFoundError:
        pass
    except JobFileCorrupt as exc:
        corrupt = True
        if report is None:
            log.error("%s", exc)
        else:
            report(exc)
    exit_status = None
    if record is not None and not is_terminal(record.state):
        try:
            exit_status = read_exit(run_dir)
        except JobFileCorrupt:
            pass  # the job's own scribble: the runner reports it (once) if it adopts the job
        if _another_supervisors(exit_status, record):
            exit_status = None  # an abandoned start's (its start was tried again): not this one's
    try:
        age = now - os.stat(run_dir).st_mtime
    except FileNotFoundError:
        age = 0.0
    owner_text = record.owner if record else (read_claim(run_dir) or {}).get("owner")
    if owner_text:
        owner_text, _ = effective_owner(run_dir, owner_text)  # a takeover may be under way
    owner = parse_owner(owner_text)
    same_host = owner.host == host if owner else (record is None or record.host == host)
    owner_alive = False
    host_dead = stale = False
    if owner is not None and owner_text != me and owner.host == host:
        owner_alive = identity.is_alive(owner.pid, owner.start)
    elif not same_host and hosts is not None:
        # Another host: judged by files only (its heartbeats, the job's pulse), never by pid.
        other = owner.host if owner else (record.host if record else "")
        owner_alive = bool(owner_text) and hosts.owner_alive(str(owner_text))
        host_dead = hosts.host_dead(other)
        stale = pulse_stale(_pulse_age(run_dir, now), hosts.dead_after)
    sup_alive = (
        same_host
        and record is not None
        and identity.is_alive(record.supervisor_pid, record.supervisor_start_time)
    )
    return RunSnapshot(
        record=record,
        corrupt=corrupt,
        has_prompt=os.path.lexists(run_dir / PROMPT_FILE),
        exit=exit_status,
        dir_age=age,
        owner_alive=owner_alive,
        same_host=same_host,
        supervisor_alive=sup_alive,
        host_dead=host_dead,
        pulse_stale=stale,
        judged_owner=owner_text,
    )


SETTLED_SECONDS = 2.0  # a directory mtime this old is trusted (coarse timestamps)
KEEPALIVE_EVERY = 256  # run directories between keep-alive calls in a long pass


class FiledRuns:
    """Run directories found terminal and filed, by name, with their directory's mtime.

    Finalizing and every later change hopper or a person makes to a run's
    records (an atomic replace, a new ABORT, a prompt put back) creates or
    renames an entry in the run directory, which moves its mtime; until then
    the run is still filed and needs no reading.
    """

    def __init__(self) -> None:
        self._mtimes: dict[str, int] = {}

    def unchanged(self, name: str, mtime_ns: int) -> bool:
        return self._mtimes.get(name) == mtime_ns

    def remember(self, name: str, mtime_ns: int, now: float) -> None:
        if now - mtime_ns / 1e9 >= SETTLED_SECONDS:
            self._mtimes[name] = mtime_ns

    def forget_missing(self, names: set[str]) -> None:
        if len(names) < len(self._mtimes) or not self._mtimes.keys() <= names:
            self._mtimes = {n: m for n, m in self._mtimes.items() if n in names}

    def __len__(self) -> int:
        return len(self._mtimes)


def reconcile(
    runner: Runner,
    clock: Clock,
    queued: dict[str, JobRecord],
    hosts: HostView | None = None,
    *,
    keepalive: Callable[[], None] | None = None,
    filed: FiledRuns | None = None,
) -> dict[Action, int]:
    """Walk every run directory once; returns how many of each action were taken.

    Never raises for one run directory: its error is logged once (the
    runner's guard) and the pass goes on. ``keepalive`` is called every few
    hundred directories so a long pass still sends heartbeats.
    """
    counts: dict[Action, int] = {}
    # What each executor learns once per pass (Slurm: asked once, only if a record needs it).
    passes = {name: executor.recovery() for name, executor in runner.executors.items()}
    runs = runner.layout.runs
    names = _run_names(runs)
    if filed is not None:
        filed.forget_missing({name for name, _ in names})
        names = [(name, m) for name, m in names if not filed.unchanged(name, m)]
    now = time.time()
    stale = identity.Supervisors()  # listed once, at the first job that needs it
    for n, (name, mtime_ns) in enumerate(sorted(names)):  # oldest id first
        if keepalive is not None and n % KEEPALIVE_EVERY == KEEPALIVE_EVERY - 1:
            keepalive()
        if runner.is_tracking(name) or name in queued:
            continue
        run_dir = runs / name
        settled: list[bool] = []
        runner.guard.step(
            f"recover:{name}",
            lambda run_dir=run_dir, settled=settled: settled.append(  # type: ignore[misc]
                _recover_one(run_dir, runner, clock, queued, hosts, counts, stale, passes)
            ),
            what=f"recovery of {run_dir}",
        )
        if filed is not None and settled == [True]:
            filed.remember(name, mtime_ns, now)
    return counts


def _recovery(runner: Runner, passes: Mapping[str, Recovery], record: JobRecord) -> Recovery:
    """This pass's questions to the record's executor (ValueError: none of that name here)."""
    runner.executor_for(record)  # the error that names the executors this watcher has
    return passes[record.executor]


def _run_names(runs: Path) -> list[tuple[str, int]]:
    """Run directory names with their mtimes (in no order); hidden names skipped."""
    out: list[tuple[str, int]] = []
    try:
        with os.scandir(runs) as it:
            for entry in it:
                if entry.name.startswith("."):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                if stat.S_ISDIR(st.st_mode):
                    out.append((entry.name, st.st_mtime_ns))
    except FileNotFoundError:
        return []
    return out


def _recover_one(
    run_dir: Path,
    runner: Runner,
    clock: Clock,
    queued: dict[str, JobRecord],
    hosts: HostView | None,
    counts: dict[Action, int],
    stale: identity.Supervisors,
    passes: Mapping[str, Recovery],
) -> bool:
    """Recover one run directory; True if it is settled (filed, or corrupt: left for a person)."""
    if _finished_fast(run_dir):
        return True
    ident = runner.intake.ident
    key = f"record:{run_dir.name}"

    def corrupt(exc: JobFileCorrupt) -> None:
        runner.guard.report(key, exc, what="left for a person")

    snap = snapshot(run_dir, ident.host, ident.owner, clock.time(), hosts, corrupt)
    if not snap.corrupt:
        runner.guard.clear(key)
    if snap.record is not None:
        snap = _recovery(runner, passes, snap.record).observe(snap, run_dir)  # Slurm: its state
    action = decide(snap)
    if action is Action.NOTHING and snap.corrupt:
        return True  # logged once; looked at again when something in it changes
    if action in TAKEOVERS:
        taken = _take_over(snap, run_dir, runner, clock)
        if taken is None:
            action = Action.NOT_MINE  # another watcher took it first
        else:
            snap = taken
    counts[action] = counts.get(action, 0) + 1
    if action is not Action.NOT_MINE:
        _apply(action, snap, run_dir, runner, clock, queued, stale, passes)
    return False


def _take_over(
    snap: RunSnapshot, run_dir: Path, runner: Runner, clock: Clock
) -> RunSnapshot | None:
    """Win the job's takeover marker (exactly one watcher does); None if we lost.

    Our own jobs (after a SIGHUP re-exec) need no marker. A job of another
    host is then re-owned by us before anything else happens to it, so a
    crash from here on leaves it to the next takeover, keyed by us.
    """
    me = runner.intake.ident
    record = snap.record
    owner_text = record.owner if record else (read_claim(run_dir) or {}).get("owner")
    if not owner_text or owner_text == me.owner:
        return snap
    effective, chain = effective_owner(run_dir, owner_text)
    if effective == me.owner:
        return snap
    if effective != snap.judged_owner:
        # Another watcher won a takeover marker after the snapshot judged the owner
        # dead: it holds the job now, alive for all we know; the next pass judges it.
        return None
    if not try_take(run_dir, chain, me.owner):
        return None
    if record is not None and not snap.same_host:
        try:
            current = read_record(run_dir)
        except (OSError, JobFileCorrupt):
            return None
        if current.state != record.state or current.owner != record.owner:
            return None  # changed under us after all: leave it
        fact = TakenOver(clock.now(), me.owner, owner_text)
        mine = ledger.commit(run_dir, lifecycle.taken_over(current, fact))
        log.warning("job=%s taken over from dead host %s", record.id, record.host)
        return replace(snap, record=mine)
    return snap


# A filed job's state in job.json's raw bytes, whatever the spacing around the colon
# (an escaped quote inside a string value cannot match: it is preceded by a backslash).
FINISHED_STATE = re.compile(
    rb'"state"\s*:\s*"(?:%s)"'
    % b"|".join(s.value.encode() for s in (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED))
)


def _finished_fast(run_dir: Path) -> bool:
    """Cheap pre-check: filed jobs (terminal, prompt moved) need no parsing.

    job.json is opened without following links or blocking (a job may have
    put a FIFO there); anything but a regular file is "not known finished".
    """
    if os.path.lexists(run_dir / PROMPT_FILE):
        return False
    try:
        head = read_bytes(run_dir / JOB_FILE, 4096, truncate=True)
    except (FileNotFoundError, UnreadableFile):
        return False
    return FINISHED_STATE.search(head) is not None


def _apply(
    action: Action,
    snap: RunSnapshot,
    run_dir: Path,
    runner: Runner,
    clock: Clock,
    queued: dict[str, JobRecord],
    stale: identity.Supervisors,
    passes: Mapping[str, Recovery],
) -> None:
    record = snap.record
    if action is Action.REMOVE_EMPTY_CLAIM:
        if not remove_empty_claim(run_dir):
            log.warning("left %s: not an empty claim directory", run_dir)
    elif action is Action.COMPLETE_CLAIM:
        rec = runner.intake.resume_claim(run_dir)
        if rec.state is JobState.QUEUED:
            queued[rec.id] = rec
        else:  # rejected at claim: filed already; its hooks run
            runner.ended(Ended(rec, run_dir, How.FILED))
    elif action is Action.COMPLETE_FINALIZE:
        assert record is not None and record.processed_path is not None
        spend.file_spends(runner.layout, [record])  # once per job: filed before a crash or now
        move_prompt(runner.layout, run_dir, record.processed_path)
        ledger.note(
            run_dir,
            "finalized",
            clock.now(),
            state=record.state,
            reason=record.reason,
            processed_path=record.processed_path,
            recovered=True,
        )
    elif action is Action.TAKE_QUEUED:
        assert record is not None
        if snap.same_host:
            identity.end_stale_supervisors(str(run_dir), among=stale)
        if not _recovery(runner, passes, record).clear(record, run_dir, snap.same_host):
            return  # Slurm did not answer: a submitted, unrecorded job may exist; next time
        (run_dir / EXIT_FILE).unlink(missing_ok=True)  # a start abandoned by a crash
        queued[record.id] = record
    elif action is Action.REQUEUE:
        assert record is not None
        if snap.same_host:
            identity.end_stale_supervisors(str(run_dir), among=stale)
        if not _recovery(runner, passes, record).clear(record, run_dir, snap.same_host):
            return
        rec = runner.requeue(record)
        queued[rec.id] = rec
    elif action in (Action.FINISH, Action.LOST):
        # Finished while no watcher looked: ended the way a poll ends a job
        # (retry or filed, leases, worktree, hooks) in Runner.ended.
        assert record is not None
        lost = action is Action.LOST
        end = _recovery(runner, passes, record).settle(snap, run_dir, lost)
        if end is not None:
            runner.ended(end)
    elif action is Action.ADOPT:
        assert record is not None
        runner.adopt(record)
