"""After ``hopper submit``: say when no watcher serves the root, and ``--wait`` /
``--follow`` the job just submitted.

A watcher serves the root only if its heartbeat file there is fresh (what
``hopper doctor`` and ``hopper watchers`` judge, cli/watcherlist.py). The job
is found by the prompt file it was claimed from: the oldest run directory
since the submit whose record's ``inbox_path`` is the prompt's — not by name,
which an older job may share. Waiting and following are ``hopper wait``'s and
``hopper logs -f``'s own code, with their exit codes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from hopper.cli import logs, wait
from hopper.cli.common import EXIT_TIMEOUT, warn
from hopper.core.jobid import prompt_stem, slugify
from hopper.errors import JobFileCorrupt, JobNotFound
from hopper.store.claim import read_claim
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.jobread import read_view
from hopper.store.layout import Layout
from hopper.store.lookup import JobNotClaimed

if TYPE_CHECKING:
    from hopper.config import Config
    from hopper.core.record import JobRecord


def run_dirs(layout: Layout) -> frozenset[str]:
    """The run directories there are now (before the submit: none of them is its job)."""
    return frozenset(d.name for d in iter_run_dirs(layout.runs))


def warn_if_unserved(layout: Layout, config: Config) -> None:
    """A warning on stderr when no watcher's heartbeat under the root is fresh."""
    from hopper.cli.doctor.watcher import MIN_STALE_SECONDS, STALE_HEARTBEATS, served_by
    from hopper.cli.watcherlist import watcher_rows

    try:
        rows = watcher_rows(layout, time.time(), config.host_dead_after)
    except OSError:
        rows = []
    stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
    served = served_by(rows, stale_after, config.heartbeat_interval)
    if served.status != "ok":
        warn(
            f"warning: {served.message}; the prompt waits in {layout.inbox} until one does "
            f"(start one: systemctl start hopper, or hopper run --root {layout.root}; "
            "hopper watchers lists them)"
        )


def until_ended(
    layout: Layout,
    target: Path,
    inbox_rel: str,
    before: frozenset[str],
    follow: bool,
    timeout: float | None,
) -> int:
    """Wait for (or follow the output of) the job claimed from ``target``; ``before``
    are the run directories there were before it was written."""
    deadline = None if timeout is None else time.monotonic() + timeout
    slug = slugify(prompt_stem(PurePosixPath(inbox_rel).name))

    def mine(layout: Layout, _ref: str) -> JobRecord:
        return submitted_job(layout, target, inbox_rel, slug, before)

    try:
        job_id = wait.claimed_id(layout, inbox_rel, deadline, find=mine)
    except JobNotClaimed as exc:
        warn(f"timed out waiting for a watcher to claim it: {exc}")
        return EXIT_TIMEOUT
    run_dir = layout.run_dir(job_id)
    if not follow:
        return wait.verdict(wait.wait_ids(layout, [job_id], deadline), timeout, quiet=False)
    if logs.follow(run_dir, threading.Event(), deadline):
        return logs.outcome(run_dir)
    return logs.timed_out(read_view(run_dir), timeout or 0)


def submitted_job(
    layout: Layout, target: Path, inbox_rel: str, slug: str, before: frozenset[str]
) -> JobRecord:
    """The job claimed from ``target``; JobNotClaimed while it waits in the inbox or is
    being claimed, JobNotFound when it is nowhere (the watcher's claim in between)."""
    if target.exists():
        raise JobNotClaimed(f"{inbox_rel} waits in the inbox")
    for run_dir in iter_run_dirs(layout.runs):
        if run_dir.name in before or f"-{slug}-" not in run_dir.name:
            continue
        try:
            record = read_record(run_dir)
        except FileNotFoundError:
            if (read_claim(run_dir) or {}).get("inbox_path") == inbox_rel:
                raise JobNotClaimed(f"{inbox_rel} is being claimed into {run_dir}") from None
            continue
        except JobFileCorrupt:
            continue
        if record.inbox_path == inbox_rel:
            return record
    raise JobNotFound(
        f"no job was claimed from {inbox_rel} (removed from the inbox by hand?)",
        hint=f"hopper status lists the jobs; look in {layout.runs}",
    )
