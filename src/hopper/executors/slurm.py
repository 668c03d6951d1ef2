"""The Slurm executor's edge: sbatch, squeue, scancel, with argument vectors only.

Theory of operation: the watcher writes the job's argv (NUL-separated, never
shell text) and a batch wrapper into the run directory
(:func:`write_job_wrapper`: enter the workdir, run the argv as a child, record
its exit status in ``slurm-exit.json``, end the way the job did) and submits
it with the argv from :func:`sbatch_argv`: ``--parsable``, the hopper id as
the job name, ``--chdir``, ``--output``/``--error`` both onto ``job.log`` in
append mode (so ``tail -f`` keeps working), ``--time`` from the timeout,
resources from the front matter, ``--no-requeue`` (hopper's retry policy
decides, Slurm never silently runs a job twice). :func:`query` asks the
controller about many jobs with one call, :func:`list_jobs` lists them all
(recovery finds a job by its name there); :func:`cancel` is ``scancel``.
What the answers mean lives in :mod:`hopper.core.slurm_parse` (pure, tested
on recorded output).

Every file named here must be visible at the same path on the compute node:
the root is on a shared filesystem, as for several hosts on one root.

Nothing from a prompt reaches a shell: values become single argv elements
(``--mem=4G``), validated first so a bad value fails as a clear bad prompt
rather than as an sbatch error.
"""

from __future__ import annotations

import math
import re
import shlex
import signal as signals
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from hopper.core.slurm_parse import (
    SlurmJob,
    SlurmParseError,
    SlurmReportedError,
    SlurmState,
    parse_sbatch,
    parse_scontrol,
    parse_squeue_json,
    states_for,
)
from hopper.core.slurm_resources import resource_args
from hopper.executors.calls import Answer, run_command
from hopper.store.atomic import write_atomic

BATCH_SCRIPT = "slurm.sh"  # the wrapper, in the run directory
ACTIVE_HELD_REASON = "JobHeldUser"  # squeue's reason for a job submitted with --hold
COMMAND_TIMEOUT = 60.0  # seconds for one client call (Slurm's MessageTimeout is 10 s)
# How a call is run: here, or on the executor's lane, off the watcher's loop (calls.py).
Run = Callable[[Sequence[str], float, Mapping[str, str] | None], Answer]


def direct(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> Answer:
    """Run a call on the caller's thread (the CLI, tests); still killed at ``timeout``."""
    return run_command(argv, timeout, env)


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries its stderr."""


class SlurmUnavailable(SlurmError):
    """The controller could not be asked (not: the job is gone)."""


def _absolute(path: Path, what: str) -> Path:
    if not path.is_absolute():
        raise ValueError(f"{what} must be an absolute path, not {str(path)!r}")
    return path


def filename_pattern(path: Path) -> str:
    """A path for ``--output``/``--error``: Slurm expands ``%x`` there, so ``%`` is doubled.

    A backslash would switch all expansion off (and leave ``%%`` doubled), so
    such paths are refused.
    """
    text = str(_absolute(path, "the output path"))
    if "\\" in text:
        raise ValueError(f"Slurm cannot write output to a path with a backslash: {text!r}")
    return text.replace("%", "%%")


def time_limit_minutes(timeout_seconds: float) -> int:
    """``--time`` in whole minutes, rounded up (Slurm's resolution); at least 1."""
    if timeout_seconds <= 0 or math.isnan(timeout_seconds) or math.isinf(timeout_seconds):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout_seconds!r}")
    return max(1, math.ceil(timeout_seconds / 60))


def sbatch_argv(
    job_id: str,
    script_path: Path,
    workdir: Path,
    output_path: Path,
    timeout_seconds: float | None,
    resources: Mapping[str, object],
    *,
    hold: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """The sbatch command line for one hopper job (``extra``: the operator's options).

    ``hold`` submits it held (``--hold``): it cannot start until :func:`release`,
    so the watcher can record the Slurm id in job.json first, the way the
    supervisor's gate holds a local job until its pid is recorded.
    """
    if not re.fullmatch(r"[\w.\-]+", job_id):
        raise ValueError(f"not a hopper job id: {job_id!r}")
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_id}",
        f"--chdir={_absolute(workdir, 'the workdir')}",
        f"--output={filename_pattern(output_path)}",
        f"--error={filename_pattern(output_path)}",
        "--open-mode=append",
        "--no-requeue",
    ]
    if hold:
        argv.append("--hold")
    if timeout_seconds is not None:
        argv.append(f"--time={time_limit_minutes(timeout_seconds)}")
    argv += resource_args(resources)
    argv += list(extra)
    argv.append(str(_absolute(script_path, "the batch script")))
    return argv


# The wrapper's exit status when the workdir is missing on the compute node
# (Slurm itself would run the job in /tmp instead, with only a log line).
NO_WORKDIR_EXIT = 97


def _run(argv: Sequence[str], env: Mapping[str, str] | None, timeout: float, run: Run) -> Answer:
    done = run(argv, timeout, env)
    if done.timed_out:
        raise SlurmUnavailable(done.why())
    if done.returncode is None:
        raise SlurmUnavailable(f"{argv[0]} is not installed or cannot run: {done.error}")
    return done


def _failure(argv: Sequence[str], done: Answer) -> SlurmError:
    text = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
    cls = SlurmUnavailable if _unreachable(text) else SlurmError
    return cls(f"{argv[0]} failed: {text}")


def _unreachable(text: str) -> bool:
    lowered = text.lower()
    return any(
        words in lowered
        for words in (
            "unable to contact slurm controller",
            "socket timed out",
            "connection refused",
            "could not establish a configuration source",
            "zero bytes were transmitted or received",
        )
    )


def submit(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = COMMAND_TIMEOUT,
    run: Run = direct,
) -> str:
    """Run sbatch; return the Slurm job id. Raises SlurmError (sbatch said no), or
    SlurmUnavailable (it could not be asked, or did not answer in ``timeout`` s)."""
    done = _run(argv, env, timeout, run)
    if done.returncode != 0:
        raise _failure(argv, done)
    try:
        return parse_sbatch(done.stdout)
    except SlurmParseError as err:
        raise SlurmError(str(err)) from None


def query(
    slurm_ids: Iterable[str],
    env: Mapping[str, str] | None = None,
    timeout: float = COMMAND_TIMEOUT,
    run: Run = direct,
) -> dict[str, SlurmState]:
    """Ask the controller about these jobs in one call; an id it does not list is not found.

    ``squeue --json`` (22.05+; it ignores filters, so all jobs come back and are
    picked here); where it is missing, ``scontrol show job -o``. Raises
    SlurmUnavailable when the controller cannot be asked: never read that as lost.
    """
    ids = list(dict.fromkeys(slurm_ids))
    if not ids:
        return {}
    return states_for(ids, _all_jobs(env, timeout, run))


def _all_jobs(env: Mapping[str, str] | None, timeout: float, run: Run) -> list[SlurmJob]:
    """Every job the controller lists: ``squeue --json``, else ``scontrol show job -o``."""
    argv = ["squeue", "--json"]
    done = _run(argv, env, timeout, run)
    if done.returncode == 0:
        try:
            return parse_squeue_json(done.stdout)
        except SlurmReportedError as err:
            # 22.05 prints {"errors": [slurm_load_jobs ...]} and exits 0 when the
            # controller does not answer: an empty list then is not "all lost"
            raise SlurmUnavailable(str(err)) from None
        except SlurmParseError as err:
            raise SlurmError(str(err)) from None
    failure = _failure(argv, done)
    if isinstance(failure, SlurmUnavailable):
        raise failure
    # an squeue without --json (older, or built without the JSON plugin)
    argv = ["scontrol", "show", "job", "-o"]
    done = _run(argv, env, timeout, run)
    if done.returncode != 0:
        raise _failure(argv, done)
    try:
        return parse_scontrol(done.stdout)
    except SlurmParseError as err:
        raise SlurmError(str(err)) from None


def _checked_id(slurm_id: str) -> str:
    if not re.fullmatch(r"\d+(_\d+)?", slurm_id):
        raise ValueError(f"not a Slurm job id: {slurm_id!r}")
    return slurm_id


def release(
    slurm_id: str,
    env: Mapping[str, str] | None = None,
    timeout: float = COMMAND_TIMEOUT,
    run: Run = direct,
) -> None:
    """``scontrol release``: let a job submitted with ``hold=True`` start."""
    argv = ["scontrol", "release", _checked_id(slurm_id)]
    done = _run(argv, env, timeout, run)
    if done.returncode != 0:
        raise _failure(argv, done)


_GONE = ("already completing or completed", "invalid job id specified")


def cancel(
    slurm_id: str,
    signal: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = COMMAND_TIMEOUT,
    run: Run = direct,
) -> bool:
    """``scancel`` a job; with ``signal``, send only that signal to all its processes.

    Returns False if Slurm says the job has already ended or is unknown (nothing
    to cancel), True if the request was accepted.
    """
    argv = ["scancel"]
    if signal is not None:
        # --full: the batch shell too (by default only its steps get the signal)
        argv += [f"--signal={signals.Signals(signal).name.removeprefix('SIG')}", "--full"]
    argv.append(_checked_id(slurm_id))
    done = _run(argv, env, timeout, run)
    text = (done.stderr + done.stdout).lower()
    if any(phrase in text for phrase in _GONE):
        return False
    if done.returncode != 0:
        raise _failure(argv, done)
    return True


# --- the watcher's wrapper: any argv, with its own exit record -------------------------

ARGV_FILE = "slurm.argv"  # the job's argv, NUL-separated (data, never shell text)
EXIT_STATUS_FILE = "slurm-exit.json"  # written by the wrapper as the job ends
NO_ARGV_EXIT = 96


def job_wrapper(run_dir: Path, workdir: Path) -> str:
    """The batch script for a watcher-run job: argv from a file, exit status recorded.

    The argv is read with ``mapfile -d ''`` from :data:`ARGV_FILE`, so nothing
    from the prompt is ever shell text. The job runs as a child (stdin
    /dev/null); the wrapper passes SIGTERM/SIGINT on, waits, then writes
    :data:`EXIT_STATUS_FILE` (atomically: temp name, ``mv``) with
    ``$SLURM_JOB_ID``, so a watcher that was down longer than Slurm's
    ``MinJobAge`` can still finalize. It then ends the way the job did (the
    same exit code, or the same signal), so Slurm's own record agrees.
    A status of 129-192 is read as a signal (bash cannot tell ``exit 143``
    from SIGTERM).
    """
    run = shlex.quote(str(_absolute(run_dir, "the run directory")))
    where = shlex.quote(str(_absolute(workdir, "the workdir")))
    return (
        "#!/bin/bash\n"
        "# written by hopper: runs the job's argv (slurm.argv) under Slurm and records\n"
        "# its exit status in slurm-exit.json, as the local supervisor writes exit.json\n"
        f"run={run}\n"
        "record() {\n"
        f'    local tmp="$run/.{EXIT_STATUS_FILE}.$$"\n'
        '    printf \'{"slurm_job_id": "%s", "exit_code": %s, "signal": %s, '
        '"finished_at": "%s"}\\n\' \\\n'
        '        "${SLURM_JOB_ID:-}" "$1" "$2" "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)" >"$tmp" \\\n'
        f'        && mv -f -- "$tmp" "$run/{EXIT_STATUS_FILE}"\n'
        "}\n"
        f"cd -- {where} || {{ record {NO_WORKDIR_EXIT} null; exit {NO_WORKDIR_EXIT}; }}\n"
        f"mapfile -d '' -t argv <\"$run/{ARGV_FILE}\" && [ ${{#argv[@]}} -gt 0 ] "
        f"|| {{ record {NO_ARGV_EXIT} null; exit {NO_ARGV_EXIT}; }}\n"
        "child=\n"
        'trap \'[ -n "$child" ] && kill -TERM "$child" 2>/dev/null\' TERM\n'
        'trap \'[ -n "$child" ] && kill -INT "$child" 2>/dev/null\' INT\n'
        '"${argv[@]}" </dev/null &\n'
        "child=$!\n"
        "while :; do\n"
        '    wait "$child"; rc=$?\n'
        '    [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null && continue\n'
        "    break\n"
        "done\n"
        "trap - TERM INT\n"
        'if [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then\n'
        "    record null $((rc - 128))\n"
        "    kill -n $((rc - 128)) $$\n"
        "else\n"
        '    record "$rc" null\n'
        "fi\n"
        'exit "$rc"\n'
    )


def write_job_wrapper(run_dir: Path, argv: Sequence[str], workdir: Path) -> Path:
    """Write :data:`ARGV_FILE` and the wrapper into the run directory; the wrapper's path."""
    if not argv or any("\0" in arg for arg in argv):
        raise ValueError("the job's argv is empty or holds a NUL byte")
    run = _absolute(run_dir, "the run directory")
    write_atomic(run / ARGV_FILE, b"".join(arg.encode() + b"\0" for arg in argv))
    target = run / BATCH_SCRIPT
    write_atomic(target, job_wrapper(run, workdir).encode())
    return target


def list_jobs(
    env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT, run: Run = direct
) -> list[SlurmJob]:
    """Every job the controller lists (one call), e.g. for recovery's look at many ids."""
    return _all_jobs(env, timeout, run)
