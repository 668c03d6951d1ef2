"""Ending every process of a job (or a hook) whose supervisor is gone.

While a job's supervisor lives it ends the job's tree itself (it is a
subreaper, so every orphan of the job stays below it; see proc/supervise.py).
Once it is dead (``kill -9``, OOM killer) the job's processes are orphans of
init: a process that called ``setsid`` is in no group and no session of the
job, and its parent chain no longer leads anywhere. What still ties it to the
job is its environment: every job starts with ``HOPPER_JOB_TOKEN=<job id>:<nonce>``
(and every hook with ``HOPPER_HOOK_TOKEN``), which ``/proc/PID/environ``
shows for as long as the process lives, whatever it does to its own
environment later (the kernel keeps the initial block).

:func:`kill_until_gone` SIGKILLs every process that carries the token or
descends from a given live root, scans again, and repeats until a scan finds
none, so a process that keeps forking cannot stay one step ahead. A process
that cleared its environment with ``execve`` *and* left the tree is the one
thing this cannot find; the supervisor, while alive, still can.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass

JOB_TOKEN_ENV = "HOPPER_JOB_TOKEN"  # noqa: S105 - a variable name, not a secret
HOOK_TOKEN_ENV = "HOPPER_HOOK_TOKEN"  # noqa: S105
KILL_BUDGET = 10.0  # seconds of SIGKILL rounds before giving up on a process
ENVIRON_CAP = 1 << 20  # bytes of /proc/PID/environ read per process
_STATE, _PPID, _PGRP, _SESSION = 0, 1, 2, 3  # /proc/PID/stat fields after "(comm) "


def job_token(job_id: str) -> str:
    """The marker put into a job's environment: its id (for recovery) and a nonce."""
    return f"{job_id}:{secrets.token_hex(6)}"


@dataclass(frozen=True)
class Marks:
    """What makes a process one of ours.

    ``env``: name of the token variable; ``prefix``: what its value starts
    with (``"<job id>:"`` for any attempt of a job, or a whole token);
    ``roots``: pids, already checked to be the right processes, whose
    descendants count; ``session``: a session id whose members count (only
    for a session whose leader is still ours to vouch for, e.g. a running hook).
    """

    env: str
    prefix: str
    roots: frozenset[int] = frozenset()
    session: int | None = None


def _stat(pid: int) -> list[bytes] | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[data.rfind(b")") + 2 :].split()


def _carries(pid: int, needle: bytes) -> bool:
    """True if ``pid``'s initial environment has a variable starting with ``needle``."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # gone, or not ours to read (another user): not ours to kill
    try:
        chunks: list[bytes] = []
        size = 0
        while size < ENVIRON_CAP:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return False
    finally:
        os.close(fd)
    return any(entry.startswith(needle) for entry in b"".join(chunks).split(b"\0"))


def find(marks: Marks) -> set[int]:
    """Live (non-zombie) processes that are ``marks``'s, never this process or init."""
    needle = f"{marks.env}={marks.prefix}".encode()
    stats: dict[int, list[bytes]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields is not None and len(fields) > _SESSION:
                stats[int(name)] = fields
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[_PPID]), []).append(pid)
    ours: set[int] = set()
    todo = [r for r in marks.roots if r in stats]
    ours.update(todo)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    for pid, fields in stats.items():
        if pid in ours:
            continue
        in_session = marks.session is not None and int(fields[_SESSION]) == marks.session
        if in_session or _carries(pid, needle):
            ours.add(pid)
    me = os.getpid()
    return {p for p in ours if p not in (me, 1) and stats[p][_STATE] != b"Z"}


def kill_until_gone(marks: Marks, budget: float = KILL_BUDGET) -> tuple[int, int]:
    """SIGKILL the processes of ``marks`` until a scan finds none.

    Returns (distinct processes signalled, processes still alive when
    ``budget`` seconds ran out: normally 0; a process in uninterruptible
    sleep can outlast it).
    """
    killed: set[int] = set()
    last: set[int] = set()
    end = time.monotonic() + budget
    while True:
        victims = find(marks)
        if not victims or time.monotonic() >= end:
            return len(killed), len(victims)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed |= victims
        if victims <= last:  # the same ones: dying, or stuck in the kernel; let them go
            time.sleep(0.01)
        last = victims


def end_job(job_id: str, roots: frozenset[int] = frozenset()) -> int:
    """End every process of any attempt of ``job_id`` (its supervisor is gone).

    ``roots``: the job's own pid if it is still the job's process (start time
    checked by the caller). Returns how many processes were signalled.
    """
    killed, _ = kill_until_gone(Marks(JOB_TOKEN_ENV, f"{job_id}:", roots=roots))
    return killed
