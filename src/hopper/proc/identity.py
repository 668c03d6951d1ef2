"""Is this the same process? PID plus start time, against PID reuse.

A start time is psutil's ``create_time()`` (the clock ticks since boot of
``/proc/<pid>/stat`` plus the boot time of ``/proc/stat``), read here with
one read of ``/proc/<pid>/stat``: the watcher asks it twice per start and
``psutil.Process(pid).create_time()`` reads that file twice and /proc/stat
twice (~0.1 ms a call here, ~0.03 ms this way). The boot time is read again
at most every :data:`BOOT_TIME_REFRESH`: it moves with the wall clock (NTP),
and a value cached for days would drift from psutil's past the tolerance.
"""

from __future__ import annotations

import os
import time

import psutil

# Start times are compared with this tolerance (seconds): psutil derives them
# from clock ticks since boot, which is exact for one boot.
START_TIME_TOLERANCE = 0.05
BOOT_TIME_REFRESH = 1.0  # seconds (monotonic) a boot time read from /proc/stat is reused
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STATE, STARTTIME = 0, 19  # fields of /proc/<pid>/stat after the command's ")"

_boot: tuple[float, float] | None = None  # (boot time, monotonic time it was read)


def _boot_time() -> float:
    """The boot time in seconds since the epoch (/proc/stat's btime, as psutil's)."""
    global _boot
    now = time.monotonic()
    if _boot is None or now - _boot[1] >= BOOT_TIME_REFRESH:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    _boot = (float(line.split()[1]), now)
                    break
            else:  # not Linux's /proc/stat: psutil knows where else to look
                _boot = (psutil.boot_time(), now)
    return _boot[0]


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name; None if no such
    process. PermissionError if it exists but cannot be read."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        data = os.read(fd, 4096)
    except ProcessLookupError:
        return None  # it exited between the open and the read
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2 :].split()
    return fields if len(fields) > STARTTIME else None


def _started(fields: list[bytes]) -> float:
    return int(fields[STARTTIME]) / CLOCK_TICKS + _boot_time()


def start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch, as psutil's ``create_time``);
    None if there is no such process or it cannot be read."""
    if pid <= 0:
        return None
    try:
        fields = _stat(pid)
    except PermissionError:
        return None
    return None if fields is None else _started(fields)


def is_alive(pid: int | None, started: float | None) -> bool:
    """True if ``pid`` runs and started at ``started`` (a zombie counts as gone)."""
    if pid is None or started is None or pid <= 0:
        return False
    try:
        fields = _stat(pid)
    except PermissionError:
        return True  # exists but not ours to inspect: do not judge it dead
    if fields is None or fields[STATE] == b"Z":
        return False
    return abs(_started(fields) - started) <= START_TIME_TOLERANCE


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
