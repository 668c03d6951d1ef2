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

import hashlib
from pathlib import Path

from hopper.store.leases import create_exclusive

MARKER_PREFIX = ".takeover-"
MAX_CHAIN = 32


def _marker(run_dir: Path, chain: str) -> Path:
    return run_dir / (MARKER_PREFIX + hashlib.sha256(chain.encode()).hexdigest()[:20])


def effective_owner(run_dir: Path, owner: str) -> tuple[str, str]:
    """(the watcher that holds the job now, the chain key to take it from them)."""
    chain, current = owner, owner
    for _ in range(MAX_CHAIN):
        try:
            winner = _marker(run_dir, chain).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return current, chain
        if not winner:
            return current, chain
        current = winner
        chain = f"{chain}|{winner}"
    return current, chain


def try_take(run_dir: Path, chain: str, me: str) -> bool:
    """Create the takeover marker for ``chain``; True if this watcher won it."""
    return create_exclusive(_marker(run_dir, chain), me.encode())
