"""Start-up recovery: gather a snapshot per run directory, carry out the decision.

The decisions are core/recovery.py's; this module only looks and acts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hopper.clock import Clock
from hopper.core.record import JobRecord
from hopper.core.recovery import Action, RunSnapshot, decide
from hopper.core.states import JobState, is_terminal
from hopper.errors import JobFileCorrupt
from hopper.proc import identity
from hopper.runner import Runner, Running
from hopper.store.claim import read_claim
from hopper.store.finalize import move_prompt
from hopper.store.jobfile import (
    CLAIM_FILE,
    EXIT_FILE,
    JOB_FILE,
    PROMPT_FILE,
    append_event,
    iter_run_dirs,
    read_exit,
    read_record,
)

log = logging.getLogger(__name__)


def parse_owner(owner: str | None) -> tuple[str, int, float] | None:
    if not owner:
        return None
    try:
        host, pid, start = owner.rsplit(":", 2)
        return host, int(pid), float(start)
    except ValueError:
        return None


def snapshot(run_dir: Path, host: str, me: str, now: float) -> RunSnapshot:
    record: JobRecord | None = None
    corrupt = False
    try:
        record = read_record(run_dir)
    except FileNotFoundError:
        pass
    except JobFileCorrupt as exc:
        corrupt = True
        log.error("%s", exc)
    exit_status = None
    if record is not None and not is_terminal(record.state):
        try:
            exit_status = read_exit(run_dir)
        except JobFileCorrupt as exc:
            log.error("%s", exc)
    try:
        age = now - os.stat(run_dir).st_mtime
    except FileNotFoundError:
        age = 0.0
    owner_text = record.owner if record else (read_claim(run_dir) or {}).get("owner")
    owner = parse_owner(owner_text)
    same_host = owner[0] == host if owner else (record is None or record.host == host)
    owner_alive = False
    if owner is not None and owner_text != me and owner[0] == host:
        owner_alive = identity.is_alive(owner[1], owner[2])
    sup_alive = record is not None and identity.is_alive(
        record.supervisor_pid, record.supervisor_start_time
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
    )


def reconcile(runner: Runner, clock: Clock, queued: dict[str, JobRecord]) -> dict[Action, int]:
    """Walk every run directory once; returns how many of each action were taken."""
    counts: dict[Action, int] = {}
    ident = runner.intake.ident
    for run_dir in iter_run_dirs(runner.layout.runs):
        if run_dir.name in runner.running or run_dir.name in queued:
            continue
        if _finished_fast(run_dir):
            continue
        snap = snapshot(run_dir, ident.host, ident.owner, clock.time())
        action = decide(snap)
        counts[action] = counts.get(action, 0) + 1
        try:
            _apply(action, snap, run_dir, runner, clock, queued)
        except (OSError, JobFileCorrupt) as exc:
            log.error("recovery of %s (%s) failed: %s", run_dir, action, exc)
    return counts


def _finished_fast(run_dir: Path) -> bool:
    """Cheap pre-check: filed jobs (terminal, prompt moved) need no parsing."""
    if os.path.lexists(run_dir / PROMPT_FILE):
        return False
    try:
        with open(run_dir / JOB_FILE, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        return False
    return any(
        f'"state": "{s}"'.encode() in head
        for s in (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED)
    )


def _apply(
    action: Action,
    snap: RunSnapshot,
    run_dir: Path,
    runner: Runner,
    clock: Clock,
    queued: dict[str, JobRecord],
) -> None:
    record = snap.record
    if action is Action.REMOVE_EMPTY_CLAIM:
        (run_dir / CLAIM_FILE).unlink(missing_ok=True)
        try:
            run_dir.rmdir()
        except OSError:
            log.warning("left %s: not an empty claim directory", run_dir)
    elif action is Action.COMPLETE_CLAIM:
        rec = runner.intake.resume_claim(run_dir)
        if rec.state is JobState.QUEUED:
            queued[rec.id] = rec
    elif action is Action.COMPLETE_FINALIZE:
        assert record is not None and record.processed_path is not None
        move_prompt(runner.layout, run_dir, record.processed_path)
        append_event(
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
        identity.end_stale_supervisors(str(run_dir))
        (run_dir / EXIT_FILE).unlink(missing_ok=True)  # a start abandoned by a crash
        queued[record.id] = record
    elif action is Action.REQUEUE:
        assert record is not None
        identity.end_stale_supervisors(str(run_dir))
        rec = runner.requeue(record)
        queued[rec.id] = rec
    elif action is Action.FINISH:
        assert record is not None and snap.exit is not None
        runner.finish(Running(record, run_dir, None), snap.exit)
    elif action is Action.ADOPT:
        assert record is not None
        runner.adopt(record)
    elif action is Action.LOST:
        assert record is not None
        runner.lose(Running(record, run_dir, None))
