"""Recovery decisions for one run directory after a crash or restart. Pure.

The watcher gathers a :class:`RunSnapshot` per run directory (what files
exist, the records, whether the owning watcher and the supervisor live) and
carries out the :class:`Action` this module returns. Every crash point named
in store/claim.py, store/finalize.py and watcher start-up maps to exactly one
action here; tests/test_recovery.py walks them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hopper.core.record import ExitStatus, JobRecord
from hopper.core.states import JobState, is_terminal

STALE_CLAIM_SECONDS = 60.0


class Action(StrEnum):
    NOTHING = "nothing"  # finished and filed, or being claimed right now
    NOT_MINE = "not_mine"  # owned by a live watcher, or by another host
    REMOVE_EMPTY_CLAIM = "remove_empty_claim"  # mkdir done, prompt never arrived
    COMPLETE_CLAIM = "complete_claim"  # prompt arrived, job.json never written
    COMPLETE_FINALIZE = "complete_finalize"  # terminal job.json, prompt not yet moved
    TAKE_QUEUED = "take_queued"  # queued job: keep it queued, under us
    REQUEUE = "requeue"  # "running" but never released: back to queued
    FINISH = "finish"  # the supervisor recorded an exit: finalize from it
    ADOPT = "adopt"  # still running under a live supervisor: monitor it
    LOST = "lost"  # gone with no exit recorded


@dataclass(frozen=True)
class RunSnapshot:
    record: JobRecord | None
    corrupt: bool  # job.json exists but does not parse
    has_prompt: bool
    exit: ExitStatus | None
    dir_age: float  # seconds since the run directory last changed
    owner_alive: bool  # the owning watcher (same host) still runs
    same_host: bool
    supervisor_alive: bool


def decide(snap: RunSnapshot) -> Action:
    record = snap.record
    if record is None:
        if snap.corrupt:
            return Action.NOTHING  # left for a person: never guess over a corrupt record
        if snap.owner_alive or not snap.same_host:
            return Action.NOT_MINE  # a claim in progress by a live watcher, or another host's
        if snap.has_prompt:
            return Action.COMPLETE_CLAIM
        return Action.REMOVE_EMPTY_CLAIM if snap.dir_age >= STALE_CLAIM_SECONDS else Action.NOTHING
    if is_terminal(record.state):
        return Action.COMPLETE_FINALIZE if snap.has_prompt else Action.NOTHING
    if not snap.same_host or snap.owner_alive:
        return Action.NOT_MINE
    if record.state is JobState.QUEUED:
        return Action.TAKE_QUEUED
    # RUNNING
    if snap.exit is not None:
        if not snap.exit.started and snap.exit.error is None:
            return Action.REQUEUE
        return Action.FINISH
    if snap.supervisor_alive:
        return Action.ADOPT
    return Action.LOST
