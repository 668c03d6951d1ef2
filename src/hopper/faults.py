"""Named crash points for fault-injection tests.

Set ``HOPPER_CRASH_AT=claim.after_rename`` (a comma-separated list works too)
and the watcher SIGKILLs itself when it reaches that point, exactly as an
OOM kill or a power cut would stop it there. Unset, a crash point costs one
set lookup.
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = (
    "claim.after_mkdir",
    "claim.after_rename",
    "claim.after_record",
    "start.after_spawn",
    "start.after_record",
    "finalize.after_record",
    "finalize.after_move",
)
# Refusals, not crashes: honoured by the fork server (proc/forkserver.py), which gets
# HOPPER_CRASH_AT (and HOPPER_FAULT_TOKENS: a directory; each file in it fires once)
# from the watcher: its own fork refused (a request's and the spare's), and a
# supervisor's fork of its job refused before it reports the job's pid.
FORK_FAULTS = ("forkserver.fork", "supervisor.fork")
# executor = "slurm" (tests/slurm/test_slurm_jobs.py): after sbatch --hold, after job.json
SLURM_CRASH_POINTS = ("slurm.after_submit", "slurm.after_record")

_ARMED = frozenset(p for p in os.environ.get("HOPPER_CRASH_AT", "").split(",") if p)


def crash_point(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
