"""A plain batch wrapper around a script file: test support for the Slurm edges.

The executor submits the wrapper of :func:`hopper.executors.slurm.write_job_wrapper`
(the job's argv, its exit status recorded); the tests of sbatch, squeue and
scancel against a real cluster need only a script run in its workdir, which
this writes.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hopper.executors.slurm import BATCH_SCRIPT, NO_WORKDIR_EXIT
from hopper.store.atomic import write_atomic


def _absolute(path: Path, what: str) -> Path:
    if not path.is_absolute():
        raise ValueError(f"{what} must be an absolute path, not {str(path)!r}")
    return path


def batch_script(script_path: Path, workdir: Path) -> str:
    """The wrapper sbatch submits: runs the job's own script with bash, as its process.

    It enters the workdir itself first: Slurm, when ``--chdir`` fails, logs an
    error on the node and runs the job in /tmp, which no one would want.
    """
    script = shlex.quote(str(_absolute(script_path, "the job script")))
    where = shlex.quote(str(_absolute(workdir, "the workdir")))
    return (
        "#!/bin/bash\n"
        "# written by hopper's tests: a script, run under Slurm\n"
        f"cd -- {where} || exit {NO_WORKDIR_EXIT}\n"
        f"exec bash {script}\n"
    )


def write_batch_script(run_dir: Path, script_path: Path, workdir: Path) -> Path:
    """Write the wrapper into the run directory (atomically) and return its path."""
    target = _absolute(run_dir, "the run directory") / BATCH_SCRIPT
    write_atomic(target, batch_script(script_path, workdir).encode())
    return target
