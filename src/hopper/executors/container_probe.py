"""Whether an image has the program a job's command starts with (bash), asked once per image.

A bash job runs ``bash --noprofile --norc script.sh`` in its container; in an
image without bash (busybox, alpine, distroless) the OCI runtime's error
would be the job's only output, as ``exit_nonzero`` 127. The probe is one
``<engine> run --rm --entrypoint PROGRAM <image> -c :`` (the entrypoint set,
so an image's own entrypoint never runs for it) with the job's ``run_args``;
its answer is kept per image id, so a rebuilt image is asked again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from hopper.executors.calls import Answer, run_command

PROBE_TIMEOUT = 60.0  # seconds for the one probe run
NOT_FOUND = ("executable file not found", "no such file or directory", "not found")


def _direct(argv: Sequence[str], timeout: float) -> Answer:
    return run_command(argv, timeout)


def has_program(
    engine: Sequence[str],
    image: str,
    program: str,
    run_args: Sequence[str] = (),
    run: Callable[[Sequence[str], float], Answer] = _direct,
    timeout: float = PROBE_TIMEOUT,
) -> bool | None:
    """True if ``program`` runs in ``image``, False if the engine says it is not there,
    None if the engine could not tell (the job then runs and reports its own error).

    ``run`` runs the probe (the container executor's lane: off the watcher's loop),
    killed past ``timeout`` seconds (then: None)."""
    argv = [
        *engine,
        "run",
        "--rm",
        "--pull=never",
        "--network=none",
        "--log-driver=none",
        *run_args,
        "--entrypoint",
        program,
        image,
        "-c",
        ":",
    ]
    done = run(argv, timeout)
    if done.returncode is None:
        return None  # it could not run, or did not answer in time
    if done.returncode == 0:
        return True
    said = done.stderr.lower()
    if done.returncode == 127 and any(words in said for words in NOT_FOUND):
        return False
    return None


def missing_program(engine: Sequence[str], image: str, program: str) -> str:
    """The reason a job whose command is ``program`` cannot start in ``image``, and the fix."""
    tool = os.path.basename(engine[0])
    return (
        f"image {image!r} has no {program} ({tool} run --entrypoint {program} says: executable "
        f'file not found); a bash job runs its script as "{program} --noprofile --norc '
        f'script.sh": use an image with {program} (alpine: RUN apk add bash in its '
        "Containerfile), then retry the job (hopper retry <id>)"
    )
