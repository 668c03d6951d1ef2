"""The complete prompts not yet claimed, and the order they are claimed in.

Theory of operation. Prompts arrive in groups: one per full rescan (the
start-up scan may hold 65,000 of them), one per turn's inotify hints. While
the backlog fits in one claim batch, everything is claimed oldest group
first, as it arrived. When it does not, a batch claims half its share from
the newest groups and half from the oldest: a prompt dropped during a flood
is claimed in the next batch, so its ``priority`` counts at once instead of
after every older prompt (a flood of 65,000 used to hold it for 134 s), and
the oldest prompts still move on every turn, however long new ones keep
coming. Inside a group the order is the order given (the scan's name order).

Pure bookkeeping: no file is read here; the watcher claims what it is given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path


class Backlog:
    """Paths to claim, in groups by arrival; each path at most once."""

    def __init__(self) -> None:
        self._groups: deque[dict[Path, None]] = deque()  # oldest first
        self._where: dict[Path, dict[Path, None]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, path: object) -> bool:
        return path in self._where

    def add(self, paths: Iterable[Path]) -> None:
        """One arrival: ``paths`` not already waiting become the newest group, in this order."""
        group = dict.fromkeys(p for p in paths if p not in self._where)
        if not group:
            return
        self._groups.append(group)
        for path in group:
            self._where[path] = group

    def discard(self, paths: Iterable[Path]) -> None:
        """Take ``paths`` out wherever they wait (written again before their claim)."""
        for path in paths:
            group = self._where.pop(path, None)
            if group is None:
                continue
            del group[path]
            if not group:  # by identity: an emptied group is removed at once, so it is unique
                for i, other in enumerate(self._groups):
                    if other is group:
                        del self._groups[i]
                        break

    def batch(self, limit: int) -> Iterator[Path]:
        """Up to ``limit`` paths, each removed from the backlog as it is yielded.

        The caller may stop early (a time budget): what it did not take stays,
        in its place. If the backlog is larger than ``limit``, the first half
        of the batch comes from the newest groups (newest group first; within
        a group, in order), the rest from the oldest; otherwise all of it,
        oldest group first.
        """
        newest = limit // 2 if len(self) > limit else 0
        for n in range(min(limit, len(self))):
            if not self._groups:
                return
            group = self._groups[-1] if n < newest else self._groups[0]
            path = next(iter(group))
            self._remove(path, group)
            yield path

    def _remove(self, path: Path, group: dict[Path, None]) -> None:
        del group[path]
        del self._where[path]
        if group:
            return
        # batch() takes from either end only, so an emptied group is at one of them.
        if self._groups[0] is group:
            self._groups.popleft()
        else:
            self._groups.pop()
