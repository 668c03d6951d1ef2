"""The owner string of a watcher, ``host:pid:start``: built here, parsed here. Pure.

A watcher names itself by its host, its pid and its process start time (so a
reused pid is not taken for the old watcher). The string is written into
claim.json, job.json, slot leases and heartbeat files, all of which a user can
edit: parsing never trusts it, a malformed one is None.
"""

from __future__ import annotations

from typing import NamedTuple


class WatcherId(NamedTuple):
    """Who this watcher is: its host, and its owner string (:meth:`Owner.text`)."""

    host: str
    owner: str


class Owner(NamedTuple):
    host: str
    pid: int
    start: float  # the process's start time (seconds since the epoch)

    def text(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}"


def parse_owner(text: str | None) -> Owner | None:
    """The owner named by ``text``, or None when there is none or it is malformed."""
    if not text:
        return None
    try:
        host, pid, start = text.rsplit(":", 2)
        return Owner(host, int(pid), float(start))
    except ValueError:
        return None
