"""Reading many run directories into index rows, split over forked workers.

A cold build of the status index reads every job.json under ``runs/``: on
100,000 runs that is ~100 µs of one core's time per file (read, validate,
summarize, check finality), and the files are independent. So when there are
at least :data:`MIN_SHARE` files per extra worker, :func:`read_rows` forks
workers (up to the cores this process may run on, at most :data:`MAX_WORKERS`);
each reads one contiguous slice of the sorted names and sends its rows back
through a pipe in one ``marshal`` blob (rows hold only strings, numbers and
None), while the parent reads the first slice itself. Then the parent alone
writes the index, in id order. Each reader reads ahead with threads when its
reads are seen to wait on the disk (``store/index_ahead.py``).

Nothing here is trusted more than in one process: each worker reads through
``index_row.read_row`` (saferead's rules; a bad file is reported, never fatal).
A worker that dies, or sends something unreadable, costs only time: its slice
is read again by the parent. Workers are forked only from a process with one
thread (``hopper status``; ``hopper web`` reads its index from a worker
thread and so reads serially), share nothing writable with the parent (they
never touch the SQLite connection) and leave with ``os._exit``.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path
from typing import Any

from hopper.store.index_ahead import Ahead
from hopper.store.index_row import RefreshResult, prepare, read_row

MIN_SHARE = 2000  # files a worker must have to be worth a fork (~2 ms)
MAX_WORKERS = 4
# This process reads this much of a worker's share: writing the rows costs it ~1/5
# of reading them (tuned on 100,000 runs, 2 cores).
OWN_SHARE = 0.6

Row = tuple[Any, ...]
# (rows, names without a usable job.json, problems reported)
Slice = tuple[list[Row], list[str], list[str]]


def read_rows(
    root: Path, runs: str, look: dict[str, int], result: RefreshResult, *, bulk: bool
) -> tuple[list[Row], dict[str, int]]:
    """Rows of the run directories ``look`` names (``{name: directory inode}``), in name
    order, and ``{name: inode}`` of those without a usable job.json (problems go to
    ``result.corrupt``)."""
    names = sorted(look)  # id order: the primary key's b-tree is appended to
    slices = _split(names, workers(len(names)) if bulk else 1)
    if len(slices) > 1:
        prepare()  # the model loads once, here, not in every worker
    children: list[tuple[int, int, list[str]]] = []
    try:
        for part in slices[1:]:
            children.append(_fork(root, runs, part, look, bulk))
        rows, pending, corrupt = _read(root, runs, slices[0], look, bulk)
        while children:
            pid, fd, part = children[0]
            got = _collect(pid, fd)
            children.pop(0)
            if got is None:  # the worker failed: read its slice here
                got = _read(root, runs, part, look, bulk)
            rows += got[0]
            pending += got[1]
            corrupt += got[2]
    finally:
        for pid, fd, _ in children:  # interrupted: our workers go too
            _kill(pid, fd)
    result.corrupt += corrupt
    return rows, {name: look[name] for name in pending}


def workers(files: int) -> int:
    """How many processes should read ``files`` job.json files (1: this one alone)."""
    if not hasattr(os, "fork") or _threaded():
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS, files // MIN_SHARE))


def _threaded() -> bool:
    """True if this process runs other threads (forking it could copy a held lock)."""
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def _split(names: list[str], n: int) -> list[list[str]]:
    """``n`` contiguous slices; the first (this process's) :data:`OWN_SHARE` of the others,
    as this process also lists runs/ before and writes every row after."""
    if n == 1:
        return [names]
    own = round(len(names) * OWN_SHARE / (OWN_SHARE + n - 1))
    size = -(-(len(names) - own) // (n - 1))
    return [names[:own]] + [names[own + i * size : own + (i + 1) * size] for i in range(n - 1)]


def _read(root: Path, runs: str, names: list[str], look: dict[str, int], bulk: bool) -> Slice:
    """Rows of ``names``, read in order; in bulk, read ahead by threads if the disk is slow
    (``store/index_ahead.py``)."""
    result = RefreshResult()
    rows: list[Row] = []
    pending: list[str] = []
    with Ahead(str(root), runs, names if bulk else []) as ahead:
        for name in names:
            ahead.step()
            row = read_row(root, runs, name, look[name], result, bulk=bulk)
            if row is not None:
                rows.append(row)
            else:
                pending.append(name)
    return rows, pending, result.corrupt


def _fork(
    root: Path, runs: str, names: list[str], look: dict[str, int], bulk: bool
) -> tuple[int, int, list[str]]:
    """A worker reading ``names``; (its pid, the read end of its pipe, the names)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker's lines run in the child (coverage misses them)
        code = 1
        try:
            import signal  # here: `hopper status` starts without it

            for signum in (signal.SIGINT, signal.SIGTERM):  # not the parent's handlers
                signal.signal(signum, signal.SIG_DFL)
            os.close(r)
            blob = marshal.dumps(_read(root, runs, names, look, bulk))
            with os.fdopen(w, "wb") as out:
                out.write(blob)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r, names


def _collect(pid: int, fd: int) -> Slice | None:
    """A worker's slice (read to the end of its pipe, the worker reaped), or None if
    it failed. A blob that unmarshals whole is the worker's full answer, written once
    at its end; a worker killed while writing leaves one that does not."""
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    try:
        _, status = os.waitpid(pid, 0)
        failed = not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0
    except ChildProcessError:  # reaped by someone else's SIGCHLD handler: judge the blob
        failed = False
    try:
        # our own worker's blob, through a pipe only it and we hold
        rows, pending, corrupt = marshal.loads(b"".join(chunks))  # noqa: S302
    except (EOFError, ValueError, TypeError):
        return None
    return None if failed else (rows, pending, corrupt)


def _kill(pid: int, fd: int) -> None:
    import signal

    try:
        os.close(fd)
    except OSError:
        pass  # closed before the interruption
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
