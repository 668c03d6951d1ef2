"""A live session's limits: ``session_max``, ``session_idle`` and ``memory_max``.

Looked at by the host's loop while no stop is under way: past ``session_max``
seconds the session closes; after ``session_idle`` seconds with no turn and no
message waiting it closes too (the agent's session id is kept: the next message
resumes it in a new host); the RSS of the host's whole tree (its agent and
everything below) is summed every :data:`MEMORY_SCAN` seconds against
``memory_max``. Standard library only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hopper.proc import proctree
from hopper.sessionhost import contract as c
from hopper.sessionhost import messages
from hopper.sessionhost.timing import MEMORY_SCAN

if TYPE_CHECKING:
    from hopper.sessionhost.host import Host


def check(host: Host, now: float) -> None:
    """Close the session if one of its limits is reached."""
    spec = host.spec
    if spec.session_max is not None and now - host.born >= spec.session_max:
        host._close(c.ENDED_MAX_AGE, f"session_max ({spec.session_max:g} s) reached", now)
        return
    idle = host.turn is None and spec.session_idle is not None
    if idle and spec.session_idle is not None and now - host.idle_since >= spec.session_idle:
        if messages.pending(host) is None:
            host._close(c.ENDED_IDLE, f"no message for session_idle ({spec.session_idle:g} s)", now)
            return
        host.idle_since = now
    if spec.memory_max is not None and now >= host.next_memory:
        host.next_memory = now + MEMORY_SCAN
        rss = tree_rss()
        if rss > spec.memory_max:
            host._close(
                c.ENDED_MEMORY,
                f"the session's tree used {rss} bytes, over memory_max {spec.memory_max}",
                now,
            )


def tree_rss() -> int:
    """The resident bytes of every process below the host."""
    procs = proctree.tree()
    if procs is None:
        scan = proctree.scan()
        procs = {pid: scan[pid] for pid in proctree.below(scan)}
    pages = 0
    for fields in procs.values():
        try:
            if fields[proctree.STATE] != b"Z":
                pages += int(fields[proctree.RSS])
        except (IndexError, ValueError):
            continue
    return pages * os.sysconf("SC_PAGE_SIZE")
