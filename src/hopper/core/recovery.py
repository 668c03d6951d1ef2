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
from hopper.core.slurm_parse import SlurmExitFile, SlurmState
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
    owner_alive: bool  # the owning watcher still runs (same host: its pid; else its heartbeat)
    same_host: bool
    supervisor_alive: bool
    # Another host's job (docs/scale-out.md): that host has no fresh watcher
    # heartbeat, and the job itself shows no sign of life (job.json and the
    # supervisor's resources.json unchanged) for host_dead_after.
    host_dead: bool = False
    pulse_stale: bool = False
    # The owner judged above: the record's, or the watcher that won a takeover
    # marker for it (store/takeover.py's effective owner) as the snapshot was taken.
    judged_owner: str | None = None
    # executor = "slurm" (a RUNNING record with slurm_job_id): Slurm's view of the
    # job (None: the controller did not answer) and the wrapper's exit record.
    slurm: SlurmState | None = None
    slurm_exit: SlurmExitFile | None = None


def decide(snap: RunSnapshot) -> Action:
    record = snap.record
    if record is None:
        if snap.corrupt:
            return Action.NOTHING  # left for a person: never guess over a corrupt record
        if snap.owner_alive or not (snap.same_host or snap.host_dead):
            return Action.NOT_MINE  # a claim in progress by a live watcher, or another host's
        if snap.has_prompt:
            return Action.COMPLETE_CLAIM
        return Action.REMOVE_EMPTY_CLAIM if snap.dir_age >= STALE_CLAIM_SECONDS else Action.NOTHING
    if is_terminal(record.state):
        return Action.COMPLETE_FINALIZE if snap.has_prompt else Action.NOTHING
    if snap.owner_alive or not (snap.same_host or snap.host_dead):
        return Action.NOT_MINE
    if record.state is JobState.QUEUED:
        return Action.TAKE_QUEUED
    if record.slurm_job_id is not None:
        return decide_slurm(snap.slurm, snap.slurm_exit)
    # RUNNING
    if snap.exit is not None:
        if not snap.exit.started and snap.exit.error is None:
            return Action.REQUEUE
        return Action.FINISH
    if not snap.same_host:
        # A dead host's job: its processes cannot be judged from here, only its files.
        return Action.LOST if snap.pulse_stale else Action.NOT_MINE
    if snap.supervisor_alive:
        return Action.ADOPT
    return Action.LOST


def decide_slurm(state: SlurmState | None, exit_file: SlurmExitFile | None) -> Action:
    """A recorded Slurm job: re-attach by id, whichever host the watcher runs on.

    Still pending or running (or the controller did not answer: never read as
    lost) -> ADOPT, the poll loop takes it from there (and releases a job left
    held by a crash before ``release``). Ended in Slurm's record, or forgotten
    by Slurm but recorded by the wrapper (``slurm-exit.json``) -> FINISH.
    Forgotten with no record at all -> LOST (retried or failed per policy).
    """
    if state is None or (state.found and not state.terminal):
        return Action.ADOPT
    if state.found or (exit_file is not None and exit_file.slurm_id == state.slurm_id):
        return Action.FINISH
    return Action.LOST
