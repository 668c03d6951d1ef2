"""Which hosts are alive, judged from watcher heartbeats and job pulses. Pure.

Every watcher rewrites ``<root>/.hopper/watchers/<host>--<pid>.json`` each
``heartbeat_interval`` (store/watchers.py). A host is **dead** when it has
no fresh heartbeat file: every file of that host is older than
``host_dead_after`` (or there is none), and none was left by a watcher that
stopped on purpose while its jobs kept running (``on_stop = "detach"``: that
host's next watcher adopts them). A watcher never judges a process on
another host; it only reads files.

A job of a dead host is taken over only when its own **pulse** is stale too:
neither its job.json (the watcher's heartbeat) nor its resources.json (the
supervisor's measurement, written every ``sample_interval`` whether or not
a watcher runs) changed for ``host_dead_after``. A watcher that crashed on a
live host therefore never loses its jobs to another host while their
supervisors still run.

Ages compare file times with this host's clock, so clocks (and the file
server's) must agree to well within ``host_dead_after`` minus the
heartbeat interval; docs/scale-out.md has the figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Beat:
    """One watcher's heartbeat file, as read."""

    host: str
    pid: int
    owner: str  # host:pid:start
    age: float  # seconds since it was written (file mtime, this host's clock)
    stopped: bool = False  # a clean exit that left jobs running (detach)
    running: int = 0
    queued: int = 0
    boot_id: str | None = None
    version: str | None = None
    jobs: tuple[str, ...] = ()


def fresh(beat: Beat, dead_after: float) -> bool:
    return beat.age < dead_after


def host_dead(host: str, beats: Iterable[Beat], dead_after: float, watching_for: float) -> bool:
    """Has ``host`` no live watcher, judged from its heartbeat files?

    ``watching_for`` is how long this watcher has been reading heartbeats:
    a host with no file at all counts as dead only after that long, so a
    watcher that just started (and wrote its file) is not misjudged.
    """
    mine = [b for b in beats if b.host == host]
    if any(b.stopped for b in mine):
        return False  # detached on purpose: its next watcher adopts the jobs
    if not mine:
        return watching_for >= dead_after
    return not any(fresh(b, dead_after) for b in mine)


def pulse_stale(pulse_age: float | None, dead_after: float) -> bool:
    """No sign of life from a job for ``dead_after`` (None: no file to judge, stale)."""
    return pulse_age is None or pulse_age >= dead_after


def owner_alive(owner: str, beats: Iterable[Beat], dead_after: float) -> bool:
    """Is the watcher ``owner`` (host:pid:start) still beating?"""
    return any(b.owner == owner and fresh(b, dead_after) for b in beats)


@dataclass(frozen=True)
class HostView:
    """What one reconcile pass knows of the other watchers (read once per pass)."""

    beats: tuple[Beat, ...]
    dead_after: float
    watching_for: float  # seconds this watcher has been reading heartbeats

    def host_dead(self, host: str) -> bool:
        return host_dead(host, self.beats, self.dead_after, self.watching_for)

    def owner_alive(self, owner: str) -> bool:
        return owner_alive(owner, self.beats, self.dead_after)

    def dead_hosts(self, me: str) -> set[str]:
        return {b.host for b in self.beats if b.host != me and self.host_dead(b.host)}
