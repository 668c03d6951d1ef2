"""One container run, as the command a supervisor (or the agent driver) runs. Stdlib only.

Run by path as ``python -I -S container_run.py SETTINGS RUN_ARGV...``, where
SETTINGS is a JSON object ``{"engine": [...], "name": "hopper-<id>", "grace": 10}``
and RUN_ARGV the whole ``<engine> run --name hopper-<id> … <image> <command>``
(names of environment variables only; their values come from this process's
environment, never a command line).

Why a process between the supervisor and ``<engine> run``:

- a stop (SIGTERM from the supervisor's ladder or the driver) becomes the
  engine's own ``stop -t <grace>``: the container's stop signal, the job's
  grace, then SIGKILL, done by the engine, which also reaches a container
  that is not a descendant of ours (docker's, under its daemon);
- podman's ``conmon`` daemonizes; this process is a child subreaper, so
  conmon is re-parented here and reaped once the container ended, rather
  than left for the supervisor to count as leftovers;
- a container of that name left by an earlier attempt (a crash between its
  creation and the record, an agent's earlier turn) is removed first, so the
  job runs once, in a fresh container.

Exits with ``<engine> run``'s status: the container's exit code, or the
engine's own (125: the engine failed; 126/127: the command could not run).
A ``run`` ended by a signal it was not sent by us (SIGKILL, the OOM killer)
has the container stopped by the engine, then this process ends by the same
signal, so the supervisor records the signal.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
REAP_WAIT = 5.0  # seconds to wait for conmon after the run ended
ENGINE_CALL_TIMEOUT = 60.0  # seconds for one rm / stop call beyond the grace

_stop: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    _stop.append(signum)


def _ignore(_signum: int, _frame: object) -> None:
    """Caught, not SIG_IGN: an ignored signal would stay ignored in ``run`` after exec."""


def _subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: conmon goes to init instead; nothing else changes


def _quiet(argv: list[str], timeout: float) -> None:
    try:
        subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass


def _reap_others(until: float) -> None:
    """Reap re-parented children (conmon) until none is left or ``until`` passes."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= until:
                return
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1])
    engine = [str(a) for a in settings["engine"]]
    name = str(settings["name"])
    grace = max(0, math.ceil(float(settings["grace"])))
    run = argv[2:]
    _subreaper()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    # SIGINT reaches `run` too (same process group); it passes it on to the container.
    signal.signal(signal.SIGINT, _ignore)
    _quiet([*engine, "rm", "-f", name], ENGINE_CALL_TIMEOUT)
    try:
        proc = subprocess.Popen(run, restore_signals=True)
    except OSError as exc:
        print(f"[hopper] cannot start {run[0]}: {exc}", file=sys.stderr, flush=True)
        return 127
    stopper: subprocess.Popen[bytes] | None = None
    while True:
        try:
            status = proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if stopper is not None and stopper.poll() not in (None, 0):
            stopper = None  # the container did not exist yet (a stop right at the start)
            time.sleep(0.5)
        if _stop and stopper is None:
            stopper = subprocess.Popen(
                [*engine, "stop", "-t", str(grace), name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    if stopper is not None:
        try:
            stopper.wait(timeout=grace + ENGINE_CALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            stopper.kill()
            stopper.wait()
    if status < 0 and stopper is None:
        # `run` itself was killed (SIGKILL, the OOM killer), not stopped by us: the
        # container runs on under conmon, unwatched. The engine stops it first.
        _quiet([*engine, "stop", "-t", str(grace), name], grace + ENGINE_CALL_TIMEOUT)
    _reap_others(time.monotonic() + REAP_WAIT)
    if status < 0:
        return _end_by(-status)
    return status


def _end_by(signum: int) -> int:
    """End this process by ``signum``, as `run` ended: the supervisor records the signal.

    SIGKILL (and SIGSTOP) take no handler, so only the others are reset to the default.
    Returns 128 + ``signum`` for a signal whose default does not end a process.
    """
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # not a signal this process may handle: its default already applies
    os.kill(os.getpid(), signum)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main(sys.argv))
