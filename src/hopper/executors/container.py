"""The container engine (podman or docker), by argv: find it, ask it, build the run.

Every call is an argv, never a shell string; what a job asks for (image,
network, mounts) arrives validated by core/prompt.py and core/mounts.py.
Environment values never appear here: ``run`` gets ``-e NAME`` for each
variable, and the engine takes its value from its own environment (the
supervisor's, which received it over a pipe). The same adapter serves
podman and docker: both accept every argument used here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hopper.core import mounts
from hopper.core.mounts import MountMap
from hopper.core.record import ContainerJob
from hopper.executors.calls import Answer, run_command

log = logging.getLogger(__name__)

SHIM = Path(__file__).with_name("container_run.py")
STOP_MARGIN = 5.0  # seconds the supervisor waits beyond the engine's own stop grace
ENGINE_TIMEOUT = 60.0  # seconds for one inspect / rm call ([container] command_timeout)
# How a call is run: on the caller's thread, or on an executor's lane (calls.py).
Run = Callable[[Sequence[str], float], Answer]


def _direct(argv: Sequence[str], timeout: float) -> Answer:
    return run_command(argv, timeout)


UNANSWERED = ("cannot connect", "connection refused", "is the docker daemon running")


class ContainerUnavailable(Exception):
    """The engine or the image is missing; ``detail`` says what to do."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def resolve_engine(
    configured: Sequence[str] | None, which: Callable[[str], str | None] = shutil.which
) -> list[str]:
    """The engine's argv prefix with its program made absolute; raises ContainerUnavailable."""
    if configured:
        found = which(configured[0])
        if found is None:
            raise ContainerUnavailable(
                f"the container engine {configured[0]!r} ([container] engine) is not on PATH: "
                "install it (apt-get install podman), or fix [container] engine in the config"
            )
        return [found, *configured[1:]]
    for program in ("podman", "docker"):
        found = which(program)
        if found is not None:
            return [found]
    raise ContainerUnavailable(
        "no container engine: neither podman nor docker is on PATH; install one "
        '(apt-get install podman) or set [container] engine = ["/path/to/engine"] in the config'
    )


def mount_map(job: ContainerJob, workdir: Path, run_dir: Path) -> MountMap:
    """The job's mounts, ``~`` in its ``mounts`` being the watcher's home; raises BadMount."""
    home = os.path.expanduser("~")
    extra = tuple(mounts.parse(text, home=home) for text in job.mounts)
    return mounts.plan(str(workdir), str(run_dir), extra)


def run_argv(
    engine: Sequence[str],
    job: ContainerJob,
    mmap: MountMap,
    env_names: Sequence[str],
    command: Sequence[str],
    *,
    run_args: Sequence[str] = (),
    memory_max: int | None = None,
    interactive: bool = False,
) -> list[str]:
    """``<engine> run …`` for ``command`` (host paths in it translated through ``mmap``)."""
    argv = [
        *engine,
        "run",
        "--name",
        job.name,
        "--pull=never",  # no registry is asked at start; the image check said it is here
        "--log-driver=none",  # the output goes to job.log, not a second copy on disk
        "-w",
        mounts.WORKDIR_IN_CONTAINER,
        *mmap.volume_args(),
    ]
    for name in env_names:
        argv += ["-e", name]  # the value comes from the engine's environment
    if job.network is not None:
        argv.append(f"--network={job.network}")
    if job.cpus is not None:
        argv.append(f"--cpus={job.cpus}")
    if memory_max is not None:
        argv.append(f"--memory={memory_max}b")
    if interactive:
        argv.append("-i")
    return [*argv, *run_args, job.image, *(mmap.translate(a) for a in command)]


def shim_argv(engine: Sequence[str], name: str, grace: float, run: Sequence[str]) -> list[str]:
    """The supervised command: container_run.py around ``run`` (see its docstring)."""
    settings = json.dumps({"engine": list(engine), "name": name, "grace": grace})
    return [sys.executable, "-I", "-S", str(SHIM), settings, *run]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def check_image(
    engine: Sequence[str], image: str, run: Run = _direct, timeout: float = ENGINE_TIMEOUT
) -> str:
    """The image's id; raises ContainerUnavailable unless the engine answers and has it.

    ``run`` runs the call (an executor's lane: off the watcher's loop); a call
    past ``timeout`` seconds is killed and the reason says so.
    """
    done = run([*engine, "image", "inspect", "--format", "{{.Id}}", image], timeout)
    if done.timed_out:
        raise ContainerUnavailable(
            f"the container engine {engine[0]} did not answer `image inspect {image}` within "
            f"{timeout:g}s ([container] command_timeout); it was killed. Check that it runs "
            "(podman info / docker info), then retry the job (hopper retry <id>)"
        )
    if done.returncode is None:
        raise ContainerUnavailable(
            f"the container engine {engine[0]} cannot be asked about image {image!r}: "
            f"{done.error}; check that it runs (podman info / docker info)"
        )
    if done.returncode == 0:
        return done.stdout.strip() or image
    said = _last_line(done.stderr)
    if any(word in said.lower() for word in UNANSWERED):
        raise ContainerUnavailable(
            f"the container engine {engine[0]} does not answer ({said}); start it "
            "(systemctl start docker), or set [container] engine to one that runs"
        )
    program = os.path.basename(engine[0])
    raise ContainerUnavailable(
        f"image {image!r} is not in {program}'s local images ({said}); "
        f"pull or build it first ({program} pull {image}, or {program} build / import), "
        "then submit the job again (hopper retry <id>)"
    )


def remove(
    engine: Sequence[str], name: str, run: Run = _direct, timeout: float = ENGINE_TIMEOUT
) -> bool:
    """``<engine> rm -f NAME``: True if removed or already gone (never raises)."""
    done = run([*engine, "rm", "-f", name], timeout)
    if done.returncode is None:
        log.warning("container=%s cannot be removed: %s", name, done.why())
        return False
    said = done.stderr.lower()
    if done.returncode == 0 or "no such container" in said or "no container with" in said:
        return True
    log.warning("container=%s cannot be removed: %s", name, _last_line(done.stderr))
    return False


@dataclass(frozen=True)
class EngineState:
    """A container as the engine reports it."""

    running: bool
    exit_code: int | None
    oom_killed: bool = False  # the engine's OOM killer ended it (past --memory)


def inspect(
    engine: Sequence[str], name: str, run: Run = _direct, timeout: float = ENGINE_TIMEOUT
) -> EngineState | None:
    """The container's state, or None if the engine knows no container of that name
    (or did not answer within ``timeout`` seconds)."""
    argv = [*engine, "inspect", "--type", "container", "--format", "{{json .State}}", name]
    done = run(argv, timeout)
    if done.returncode != 0:
        return None
    try:
        state = json.loads(done.stdout)
    except ValueError:
        return None
    if not isinstance(state, dict):
        return None
    code = state.get("ExitCode")
    return EngineState(
        running=state.get("Running") is True,
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        oom_killed=state.get("OOMKilled") is True,
    )
