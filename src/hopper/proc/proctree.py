"""The processes below the supervisor, read from /proc: no signals, no writes.

The supervisor is a child subreaper, so every descendant of its job stays
below it; :func:`tree` walks that tree through
``/proc/PID/task/TID/children`` (O(tree), which keeps a thousand supervisors
sampling cheap), :func:`scan` reads all of /proc where the kernel offers no
such file, and :func:`below` picks from a scan what is below this process.
Standard library only, like the supervisor that loads it by path.
"""

from __future__ import annotations

import os

# Fields of /proc/PID/stat after "(comm) ", 0-based: state, ppid, utime, stime,
# cutime, cstime (clock ticks; cutime/cstime: children it has reaped), rss (pages).
STATE, PPID, UTIME, STIME, CUTIME, CSTIME, RSS = 0, 1, 11, 12, 13, 14, 21

Procs = dict[int, list[bytes]]  # pid -> its /proc/PID/stat fields after the command name


def _read(path: str, whole: bool = False) -> bytes:
    """A /proc file: one read (a stat line fits), or with ``whole`` until EOF."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
        while whole and data and (more := os.read(fd, 65536)):
            data += more
        return data
    finally:
        os.close(fd)


def stat_fields(pid: str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name; None if the process is gone."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def scan() -> Procs:
    """Every process's /proc/PID/stat fields after the command name."""
    procs: Procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat_fields(name)) is not None:
            procs[int(name)] = fields
    return procs


def tree() -> Procs | None:
    """The stat fields of every process below us (zombies too), found through
    /proc/PID/task/TID/children: O(tree) instead of O(host), which is what
    keeps a thousand supervisors sampling cheap. None where the kernel has no
    such file (CONFIG_PROC_CHILDREN): then :func:`scan` it is.
    """
    procs: Procs = {}
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                children = _read(f"/proc/{pid}/task/{tid}/children", whole=True).split()
            except OSError:
                if not procs and pid == os.getpid():
                    return None  # our own: the kernel does not offer the file
                continue
            for child in children:
                fields = stat_fields(child.decode())
                if fields is not None and int(child) not in procs:
                    procs[int(child)] = fields
                    todo.append(int(child))
    return procs


def below(procs: Procs, zombies: bool = False) -> list[int]:
    """The processes of ``procs`` below this supervisor (zombies too if asked)."""
    parents: dict[int, list[int]] = {}
    for pid, fields in procs.items():
        if zombies or fields[STATE] != b"Z":
            parents.setdefault(int(fields[PPID]), []).append(pid)
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def descendants() -> list[int]:
    """Every live process below this supervisor, read from /proc."""
    return below(scan())
