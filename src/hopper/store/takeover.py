"""Exactly-once recovery of a job whose watcher (or whole host) is gone.

Theory of operation. Several watchers may find the same orphaned job at
once — two survivors of a dead host, or two watchers restarted together on
one host. Before any of them changes the job, it must create the job's
takeover marker, ``runs/<id>/.takeover-<digest>``, keyed by the owner it
takes the job from, with :func:`hopper.store.leases.create_exclusive`
(link(2): one creator wins, on NFS too). The winner writes its own owner
into the marker; the losers leave the job alone.

A winner that dies between creating the marker and rewriting job.json
leaves a marker naming itself: the job's *effective* owner is then that
winner, and the next takeover is keyed by the chain (old owner, winner), so
a job is never stuck behind a dead taker and still taken exactly once.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import stat
from pathlib import Path

from hopper.store.leases import create_exclusive

MARKER_PREFIX = ".takeover-"
MAX_CHAIN = 32
MAX_MARKER_BYTES = 4096  # an owner string is host:pid:start; anything longer is not ours


@functools.lru_cache(maxsize=1024)
def _marker_name(chain: str) -> str:
    # Cached: each running job's owner is looked up before each heartbeat.
    return MARKER_PREFIX + hashlib.sha256(chain.encode()).hexdigest()[:20]


def _marker(run_dir: Path, chain: str) -> Path:
    return run_dir / _marker_name(chain)


def effective_owner(run_dir: Path, owner: str) -> tuple[str, str]:
    """(the watcher that holds the job now, the chain key to take it from them)."""
    chain, current = owner, owner
    for _ in range(MAX_CHAIN):
        winner = _read_marker(f"{run_dir}/{_marker_name(chain)}")
        if winner is None:
            return current, chain
        if not winner:
            return current, chain
        current = winner
        chain = f"{chain}|{winner}"
    return current, chain


def try_take(run_dir: Path, chain: str, me: str) -> bool:
    """Create the takeover marker for ``chain``; True if this watcher won it."""
    return create_exclusive(_marker(run_dir, chain), me.encode())


def taken_by(run_dir: Path, owner: str | None, me: str) -> str | None:
    """Who took this job from ``me``, or None while it is still ours.

    ``owner`` is the owner in our copy of the record (ours, or the watcher we
    took it from on this host). Every takeover creates a marker keyed by the
    chain of owners first, so following the chain is enough: a few failed
    opens when nothing happened, no read of job.json.
    """
    if not owner:
        return None
    holder, _ = effective_owner(run_dir, owner)
    return None if holder == me else holder


def _read_marker(path: str) -> str | None:
    """The marker's owner text; None when absent. Never follows a link or blocks on a FIFO.

    A run directory is writable by its job, so a "marker" may be anything. A
    FIFO, a symlink, a directory or an oversized file is not one hopper made
    (markers are complete regular files from their first instant): it is read
    as no takeover, so a planted file cannot make a watcher drop its job.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EACCES):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_MARKER_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_MARKER_BYTES:
        return None
    return data.decode("utf-8", "replace").strip() or None
