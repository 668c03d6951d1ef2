"""What a watcher heartbeat file says about its watcher, for people. Pure.

``hopper watchers`` lists every file under ``<root>/.hopper/watchers/`` and
``hopper doctor`` says whether a watcher serves the root; both judge a file
here, from values the caller gathered (the file as read, whether its process
still runs when that can be told, who owns the jobs it listed):

- ``alive``: beat within ``host_dead_after`` and its process is not known gone;
- ``stopped``: it exited on purpose leaving its jobs running (``on_stop =
  "detach"``) for that host's next watcher;
- ``dead``: no beat for ``host_dead_after``, or its process is gone (told only
  on the host it ran on); its counts are those of its last beat;
- ``taken_over``: dead, and none of the jobs it ran is still its own — other
  watchers took them over (or they ended).

A dead or taken-over watcher's file is *stale* once it is :func:`keep_after`
old and none of the jobs it listed still names it as owner: nothing is left
for it to tell, and the live watchers (and ``hopper watchers --prune``)
remove it. A stopped watcher's file is never stale: it holds that host's jobs
back from a takeover until the host's next watcher starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from hopper.core.hosts import Beat
from hopper.core.owner import parse_owner

KEEP_DEAD = 3600.0  # seconds a dead watcher's file stays listed, at least (keep_after)


def keep_after(dead_after: float) -> float:
    """How old a dead watcher's heartbeat file is before the live watchers remove it:
    an hour, or twice ``host_dead_after`` if that is longer."""
    return max(KEEP_DEAD, 2 * dead_after)


def stale(beat: Beat, older_than: float, job_owners: Mapping[str, str | None]) -> bool:
    """May ``beat``'s file go? Not stopped, not beating for ``older_than`` seconds, and
    none of its jobs still names it (``job_owners``: who holds each job it listed now,
    None when it ended)."""
    if beat.stopped or beat.age < older_than:
        return False
    return not any(job_owners.get(job) == beat.owner for job in beat.jobs)


class WatcherState(StrEnum):
    ALIVE = "alive"
    STOPPED = "stopped"
    DEAD = "dead"
    TAKEN_OVER = "taken_over"


@dataclass(frozen=True)
class Verdict:
    state: WatcherState
    detail: str  # one line for a person: why this state


def judge(
    beat: Beat,
    dead_after: float,
    *,
    process_alive: bool | None,
    job_owners: Mapping[str, str | None],
) -> Verdict:
    """``beat``'s watcher. ``process_alive`` is None when its process cannot be looked
    at (another host); ``job_owners`` maps each job it listed to the watcher that
    holds it now, None when the job ended (or is gone)."""
    age = _age(beat.age)
    if beat.stopped:
        return Verdict(
            WatcherState.STOPPED,
            f"exited {age} ago leaving {beat.running} job(s) running for that host's next watcher",
        )
    gone = process_alive is False
    if not gone and beat.age < dead_after:
        return Verdict(WatcherState.ALIVE, f"beat {age} ago")
    why = f"its process {beat.pid} is gone" if gone else f"no heartbeat for {age}"
    if not beat.jobs:
        return Verdict(WatcherState.DEAD, why)
    still_mine = [j for j in beat.jobs if job_owners.get(j) == beat.owner]
    if still_mine:
        return Verdict(
            WatcherState.DEAD,
            f"{why}; {len(still_mine)} of its jobs still name it as owner (not taken over yet)",
        )
    takers = sorted(
        {
            owner.host if (owner := parse_owner(text)) else text
            for text in job_owners.values()
            if text and text != beat.owner
        }
    )
    by = f"taken over by {', '.join(takers)}" if takers else "ended"
    return Verdict(WatcherState.TAKEN_OVER, f"{why}; its {len(beat.jobs)} job(s) {by}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"
