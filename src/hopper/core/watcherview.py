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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from hopper.core.hosts import Beat
from hopper.core.owner import parse_owner


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
