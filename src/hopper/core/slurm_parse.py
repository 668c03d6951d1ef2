"""Slurm's answers, read; and a Slurm job's end, mapped to a hopper outcome. Pure.

Three readers, no processes: ``parse_sbatch`` (the ``--parsable`` line),
``parse_squeue_json`` (``squeue --json``; the 22.05 shape, where
``exit_code`` is a raw wait status, and the 23.02+ shape, where it is an
object) and ``parse_scontrol`` (``scontrol show job -o``, one line per job).
Each gives :class:`SlurmJob` records; :func:`states_for` turns "the
controller answered and this id is not in its list" into ``found=False``.

:func:`slurm_outcome` decides how a finished Slurm job ends in hopper's terms
(reason, exit code, signal, a sentence), given what hopper itself asked for,
the way :func:`hopper.core.outcome.classify` does for local jobs. It returns
None while the job is still pending or running.
"""

from __future__ import annotations

import json
import re
import signal as signals
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hopper.core.outcome import signal_name
from hopper.core.states import Reason

# Base states after which Slurm does nothing more with the job.
TERMINAL = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
# Still queued or running (or finishing: COMPLETING waits for the epilog).
ACTIVE = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "UPDATE_DB",
        "POWER_UP_NODE",
    }
)


class SlurmParseError(ValueError):
    """Slurm printed something these readers do not understand."""


class SlurmReportedError(SlurmParseError):
    """The output says the command failed (``squeue --json`` exits 0 with ``errors``)."""


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm says about one job."""

    slurm_id: str
    state: str  # the base state, e.g. "RUNNING", "FAILED"
    name: str = ""
    reason: str = ""  # Slurm's state reason, e.g. "NonZeroExitCode", "TimeLimit"
    exit_code: int | None = None  # set when the batch script exited
    signal: int | None = None  # set when it was killed by a signal


@dataclass(frozen=True)
class SlurmState:
    """A queried id: the job as Slurm knows it, or ``found=False`` if it does not."""

    slurm_id: str
    found: bool
    job: SlurmJob | None = None

    @property
    def terminal(self) -> bool:
        return not self.found or (self.job is not None and self.job.state not in ACTIVE)


@dataclass(frozen=True)
class SlurmOutcome:
    reason: Reason
    detail: str
    exit_code: int | None = None
    signal: int | None = None


# --- readers -------------------------------------------------------------------------


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;CLUSTER``)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError("sbatch printed no job id")
    job_id = lines[-1].split(";", 1)[0]
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise SlurmParseError(f"sbatch printed {lines[-1]!r}, not a job id")
    return job_id


def base_state(raw: object) -> str:
    """``"CANCELLED by 0"`` / ``["RUNNING", "COMPLETING"]`` / ``"RUNNING+"`` -> the base state."""
    if isinstance(raw, list):
        names = [str(x).upper() for x in raw]
        for name in names:
            if name in TERMINAL or name in ACTIVE:
                # COMPLETING is a flag on a finished job: the base state comes first
                return name
        return names[0] if names else ""
    text = str(raw).strip().upper()
    return re.split(r"[\s+]", text, maxsplit=1)[0] if text else ""


def split_wait_status(status: int) -> tuple[int | None, int | None]:
    """A raw wait status (what 22.05's JSON calls ``exit_code``) -> (exit code, signal)."""
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def split_exit_pair(text: str) -> tuple[int | None, int | None]:
    """``scontrol``'s ``ExitCode=3:0`` -> (3, None); ``0:15`` -> (None, 15)."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        raise SlurmParseError(f"unreadable ExitCode {text!r}")
    code, sig = int(match.group(1)), int(match.group(2))
    if sig:
        return None, sig
    return code, None


def _number(value: object) -> int | None:
    """A JSON number, or 23.02+'s ``{"set": true, "number": N}``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        return _number(value.get("number"))
    return None


def _json_exit(value: object) -> tuple[int | None, int | None]:
    if isinstance(value, Mapping):  # 23.02+: {"status": ..., "return_code": .., "signal": ..}
        status = value.get("status")
        statuses = [str(s).upper() for s in (status if isinstance(status, list) else [status])]
        sig_field = value.get("signal")
        sig = _number(sig_field.get("id") if isinstance(sig_field, Mapping) else sig_field)
        if sig is None and isinstance(sig_field, Mapping):
            sig = _number(sig_field.get("signal_id"))
        code = _number(value.get("return_code"))
        if "SIGNALED" in statuses and sig:
            return None, sig
        if "PENDING" in statuses:
            return None, None
        return code, None
    number = _number(value)
    if number is None:
        return None, None
    return split_wait_status(number)


def job_from_json(entry: Mapping[str, Any]) -> SlurmJob:
    try:
        slurm_id = str(_number(entry["job_id"]))
        state = base_state(entry["job_state"])
    except KeyError as missing:
        raise SlurmParseError(f"squeue --json job without {missing}") from None
    exit_code, sig = _json_exit(entry.get("exit_code"))
    array_task = _number(entry.get("array_task_id"))
    array_job = _number(entry.get("array_job_id"))
    if array_job and array_task is not None:
        slurm_id = f"{array_job}_{array_task}"
    return SlurmJob(
        slurm_id=slurm_id,
        state=state,
        name=str(entry.get("name") or ""),
        reason=str(entry.get("state_reason") or ""),
        exit_code=exit_code,
        signal=sig,
    )


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Every job in ``squeue --json`` output (it ignores filters: all jobs are there)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"squeue --json printed invalid JSON: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmParseError("squeue --json output has no jobs list")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmReportedError(f"squeue --json reported errors: {errors}")
    return [job_from_json(entry) for entry in doc["jobs"] if isinstance(entry, dict)]


# Key=Value tokens; a value runs up to the next " Key=" (values may hold spaces).
_SCONTROL_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/]*)=")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """One ``scontrol show job -o`` line -> {key: value}."""
    fields: dict[str, str] = {}
    matches = list(_SCONTROL_KEY.finditer(line))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        key = match.group(1)
        if key not in fields:  # the first wins: later values may repeat a key inside text
            fields[key] = line[match.end() : end].strip()
    return fields


def job_from_scontrol(fields: Mapping[str, str]) -> SlurmJob:
    try:
        slurm_id = fields["JobId"]
        state = base_state(fields["JobState"])
    except KeyError as missing:
        raise SlurmParseError(f"scontrol job line without {missing}") from None
    array_job, array_task = fields.get("ArrayJobId"), fields.get("ArrayTaskId")
    if array_job and array_task and array_task.isdigit():
        slurm_id = f"{array_job}_{array_task}"
    exit_code, sig = split_exit_pair(fields.get("ExitCode", "0:0"))
    return SlurmJob(
        slurm_id=slurm_id,
        state=state,
        name=fields.get("JobName", ""),
        reason=fields.get("Reason", ""),
        exit_code=exit_code,
        signal=sig,
    )


def parse_scontrol(text: str) -> list[SlurmJob]:
    """Every job in ``scontrol show job -o`` output ("No jobs in the system" -> [])."""
    jobs = []
    for line in text.splitlines():
        if line.startswith("JobId="):
            jobs.append(job_from_scontrol(parse_scontrol_line(line)))
    return jobs


def states_for(slurm_ids: Iterable[str], jobs: Iterable[SlurmJob]) -> dict[str, SlurmState]:
    """Each asked-for id -> its job, or ``found=False`` when the controller does not list it.

    Call this only with a complete answer from a controller that responded:
    "not listed" means Slurm forgot the job (purged after ``MinJobAge``, or lost
    with the controller's state), never "could not ask".
    """
    by_id = {job.slurm_id: job for job in jobs}
    return {
        sid: SlurmState(sid, True, by_id[sid]) if sid in by_id else SlurmState(sid, False)
        for sid in slurm_ids
    }


# --- the mapping ----------------------------------------------------------------------

_STOPPED_BY_HOPPER = {
    Reason.ABORTED: "stopped: an ABORT marker was found (scancel)",
    Reason.SHUTDOWN: "stopped: the watcher was shut down (on_stop = abort; scancel)",
    Reason.TIMEOUT: "stopped: it ran past its timeout (scancel)",
    Reason.BUDGET_EXCEEDED: "stopped: a budget of its scope was reached (on_budget; scancel)",
}


def slurm_outcome(state: SlurmState, stop_requested: Reason | None = None) -> SlurmOutcome | None:
    """How a Slurm job ended, in hopper's terms; None while it is still active.

    As for local jobs, what hopper asked for wins over how the job died: a job
    hopper cancelled for ABORT is ``aborted`` even though Slurm says CANCELLED
    with signal 15. A CANCELLED hopper did not ask for (someone else's
    ``scancel``) is ``signaled``. Slurm's own failures that say nothing about
    the script (NODE_FAIL, PREEMPTED, a purged record) are ``lost``, which
    the retry policy may run again; the job is submitted ``--no-requeue`` so
    Slurm never silently runs it twice.
    """
    if not state.found or state.job is None:
        return SlurmOutcome(
            Reason.LOST,
            f"Slurm no longer knows job {state.slurm_id} "
            "(its record was purged after MinJobAge, or the controller lost its state)",
        )
    job = state.job
    if job.state in ACTIVE or job.state not in TERMINAL:
        return None
    code, sig = job.exit_code, job.signal
    sid = job.slurm_id
    if job.state == "COMPLETED":
        return SlurmOutcome(Reason.COMPLETED, "exited 0", exit_code=code if code is not None else 0)
    if job.state in ("TIMEOUT", "DEADLINE"):
        what = "its time limit" if job.state == "TIMEOUT" else "its deadline"
        return SlurmOutcome(
            Reason.TIMEOUT,
            f"stopped by Slurm: job {sid} ran past {what}",
            exit_code=code if sig is None else None,
            signal=sig,
        )
    if stop_requested in _STOPPED_BY_HOPPER:
        return SlurmOutcome(stop_requested, _STOPPED_BY_HOPPER[stop_requested], code, sig)
    if job.state == "CANCELLED":
        sig = sig if sig is not None else int(signals.SIGTERM)
        return SlurmOutcome(
            Reason.SIGNALED,
            f"cancelled outside hopper (scancel of Slurm job {sid}; {signal_name(sig)})",
            signal=sig,
        )
    if job.state == "OUT_OF_MEMORY":
        return SlurmOutcome(
            Reason.SIGNALED,
            f"killed by Slurm: job {sid} ran out of memory (raise mem in the front matter)",
            signal=int(signals.SIGKILL),
        )
    if job.state in ("NODE_FAIL", "PREEMPTED", "REVOKED"):
        why = {
            "NODE_FAIL": "its node failed",
            "PREEMPTED": "it was preempted",
            "REVOKED": "it was revoked (federation)",
        }[job.state]
        return SlurmOutcome(
            Reason.LOST, f"Slurm job {sid} ended without an exit status: {why}", code, sig
        )
    if job.state == "BOOT_FAIL":
        return SlurmOutcome(
            Reason.SPAWN_FAILED, f"Slurm job {sid} never started: its node failed to boot"
        )
    # FAILED, SPECIAL_EXIT
    if sig is not None:
        return SlurmOutcome(Reason.SIGNALED, f"killed by {signal_name(sig)}", signal=sig)
    if code:
        return SlurmOutcome(Reason.EXIT_NONZERO, f"exited {code}", exit_code=code)
    reason = f" ({job.reason})" if job.reason and job.reason != "None" else ""
    return SlurmOutcome(
        Reason.SPAWN_FAILED,
        f"Slurm could not run job {sid}{reason}: check the workdir and the run directory "
        "exist on the compute node",
        exit_code=code,
    )


# --- the wrapper's own exit record --------------------------------------------------


@dataclass(frozen=True)
class SlurmExitFile:
    """``runs/<id>/slurm-exit.json``: what the batch wrapper recorded as the job ended."""

    slurm_id: str
    exit_code: int | None
    signal: int | None
    finished_at: str  # UTC ISO-8601, as ``date -u`` printed it


def parse_exit_file(text: str) -> SlurmExitFile:
    """The wrapper's record; raises SlurmParseError for anything else."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"slurm-exit.json is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise SlurmParseError("slurm-exit.json is not an object")
    code, sig = doc.get("exit_code"), doc.get("signal")
    for value in (code, sig):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SlurmParseError(f"slurm-exit.json holds {value!r}, not a number")
    return SlurmExitFile(
        slurm_id=str(doc.get("slurm_job_id") or ""),
        exit_code=code,
        signal=sig,
        finished_at=str(doc.get("finished_at") or ""),
    )


def outcome_from_exit_file(
    record: SlurmExitFile, stop_requested: Reason | None = None
) -> SlurmOutcome:
    """The end the wrapper recorded, when Slurm itself no longer remembers the job."""
    if record.exit_code == 0 and record.signal is None:
        return SlurmOutcome(Reason.COMPLETED, "exited 0", exit_code=0)
    if stop_requested in _STOPPED_BY_HOPPER:
        return SlurmOutcome(
            stop_requested, _STOPPED_BY_HOPPER[stop_requested], record.exit_code, record.signal
        )
    if record.signal is not None:
        return SlurmOutcome(
            Reason.SIGNALED, f"killed by {signal_name(record.signal)}", signal=record.signal
        )
    return SlurmOutcome(
        Reason.EXIT_NONZERO, f"exited {record.exit_code}", exit_code=record.exit_code
    )


def settle(
    state: SlurmState, exit_file: SlurmExitFile | None, stop_requested: Reason | None = None
) -> SlurmOutcome | None:
    """A Slurm job's end from everything known; None while it is still active.

    Slurm's record wins (it knows TIMEOUT, NODE_FAIL, a cancel); when Slurm
    has forgotten the job, the wrapper's exit record (for this Slurm id) is
    read instead; with neither, the job is ``lost``.
    """
    if not state.found and exit_file is not None and exit_file.slurm_id == state.slurm_id:
        return outcome_from_exit_file(exit_file, stop_requested)
    return slurm_outcome(state, stop_requested)
