"""Is this the same process? PID plus start time, against PID reuse."""

from __future__ import annotations

import os

import psutil

# Start times are compared with this tolerance (seconds): psutil derives them
# from clock ticks since boot, which is exact for one boot.
START_TIME_TOLERANCE = 0.05


def start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def is_alive(pid: int | None, started: float | None) -> bool:
    """True if ``pid`` runs and started at ``started`` (a zombie counts as gone)."""
    if pid is None or started is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(abs(proc.create_time() - started) <= START_TIME_TOLERANCE)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # exists but not ours to inspect: do not judge it dead


def send(pid: int, sig: int) -> bool:
    """Signal ``pid``; False if it is already gone (ESRCH is not an error)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


SUPERVISOR_SCRIPTS = ("supervise.py", "forkserver.py")  # a forked one shows its server's argv


def _by_run_dir() -> dict[str, list[psutil.Process]]:
    """Every live supervisor process, by the run directory it serves (its last
    argument, or its cwd if forked): one pass over the process table."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmd = proc.info["cmdline"] or []
        if not any(part.endswith(SUPERVISOR_SCRIPTS) for part in cmd[-2:]):
            continue
        for key in {cmd[-1], proc.info["cwd"]}:
            if key:
                found.setdefault(key, []).append(proc)
    return found


def supervisors_of(run_dir: str) -> list[psutil.Process]:
    """Live supervisor processes serving ``run_dir`` (by argv, or by cwd if forked)."""
    return _by_run_dir().get(run_dir, [])


class Supervisors:
    """The supervisors of many run directories, from one pass over the process
    table made at the first question: a recovery pass over thousands of queued
    jobs a crashed watcher left lists the processes once, not once per job.
    Supervisors that start after that pass are not seen, so it lives for one
    recovery pass, in which nothing starts a supervisor for the jobs it asks about."""

    def __init__(self) -> None:
        self._found: dict[str, list[psutil.Process]] | None = None

    def of(self, run_dir: str) -> list[psutil.Process]:
        if self._found is None:
            self._found = _by_run_dir()
        return self._found.get(run_dir, [])


def end_stale_supervisors(
    run_dir: str, timeout: float = 5.0, among: Supervisors | None = None
) -> int:
    """Wait for (then kill) supervisors of ``run_dir`` left by a crashed watcher.

    A supervisor whose watcher died before releasing the job notices the
    closed pipe at once, kills the gated job and exits; this only waits for
    that, so a new start cannot race the old one's exit record. ``among``:
    the supervisors listed once for a whole recovery pass (else listed now).
    """
    procs = among.of(run_dir) if among is not None else supervisors_of(run_dir)
    if not procs:
        return 0
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=timeout)
    return len(procs)
