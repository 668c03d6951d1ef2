"""Every job's (id, name, state), for resolving ``after`` dependencies.

Read lazily, only while some queued job has an ``after`` list. A terminal
record never changes again, so it is read once and remembered; the others
(running or queued, perhaps under another watcher) are read again at each
refresh. Unreadable or half-claimed run directories are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from hopper.core.schedule import KnownJob
from hopper.core.states import is_terminal
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout

log = logging.getLogger(__name__)


class KnownJobs:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._final: dict[str, KnownJob] = {}

    def refresh(self, skip: Mapping[str, KnownJob] | None = None) -> list[KnownJob]:
        """Every job; those in ``skip`` (the caller knows them better) are not read."""
        out: list[KnownJob] = []
        for run_dir in iter_run_dirs(self.layout.runs):
            if skip and run_dir.name in skip:
                continue
            job = self._final.get(run_dir.name)
            if job is None:
                try:
                    record = read_record(run_dir)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # a claim in progress
                except (JobFileCorrupt, OSError) as exc:
                    log.debug("dependencies: skipping %s: %s", run_dir, exc)
                    continue
                job = KnownJob(record.id, record.name, record.state)
                if is_terminal(record.state):
                    self._final[job.id] = job
            out.append(job)
        return out
