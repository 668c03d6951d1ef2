"""Removing finished jobs from the root: the shell of ``hopper prune`` (core/prune.py decides).

:func:`gather` reads every run directory: its record (or why it cannot be
read) and whether its prompt.md is still there. :func:`measure` counts what a
job holds without following a link. :func:`remove` takes one job away:

1. its record is read again: still terminal and finalized, or nothing is done;
2. ``runs/<id>`` is renamed to ``runs/.pruning-<id>`` (through a descriptor of
   ``runs/`` reached with ``O_NOFOLLOW``): the job leaves every listing at once;
3. its processed prompt is unlinked, only if ``processed_path`` names a place
   below ``processed/`` reached without a link (``layout.open_folder``);
4. the renamed directory is removed with ``shutil.rmtree`` through that
   descriptor, which on Linux walks by descriptors and never follows a link
   (a link planted in a run directory is removed, its target left alone;
   :func:`check_safe_rmtree` refuses to run where Python cannot promise that).

A prune that dies between 2 and 4 leaves ``runs/.pruning-<id>``: the next
prune finishes it (:func:`leftovers`). The status index drops the job's row at
its next refresh (``runs/`` changed); :func:`drop_index_rows` does it at once.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
from dataclasses import dataclass, field

from hopper.core.record import JobRecord
from hopper.core.states import is_terminal
from hopper.errors import HopperError, JobFileCorrupt
from hopper.store.jobfile import PROMPT_FILE, iter_run_dirs, read_record
from hopper.store.layout import Layout, NotARealFolder, PathEscapesRoot, open_folder, parts_below

TRASH_PREFIX = ".pruning-"


class UnsafeRemoval(HopperError):
    """This Python cannot remove a directory tree without following links in it."""


def check_safe_rmtree() -> None:
    if not shutil.rmtree.avoids_symlink_attacks:
        raise UnsafeRemoval(
            "this Python's shutil.rmtree may follow a link planted in a run directory "
            "(shutil.rmtree.avoids_symlink_attacks is False), so nothing was removed",
            hint="run hopper prune on Linux with a Python whose os.open supports dir_fd",
        )


@dataclass
class Gathered:
    records: list[JobRecord] = field(default_factory=list)
    unfiled: set[str] = field(default_factory=set)  # prompt.md still in the run dir
    unreadable: dict[str, str] = field(default_factory=dict)


def gather(layout: Layout) -> Gathered:
    """Every run directory's record, or why it has none usable."""
    out = Gathered()
    for run_dir in iter_run_dirs(layout.runs):
        unfiled = os.path.lexists(run_dir / PROMPT_FILE)  # before the read: finalize's order
        try:
            record = read_record(run_dir)
        except FileNotFoundError:
            out.unreadable[run_dir.name] = "no job.json yet: a claim in progress"
            continue
        except JobFileCorrupt as exc:
            out.unreadable[run_dir.name] = str(exc)
            continue
        out.records.append(record)
        if unfiled:
            out.unfiled.add(record.id)
    return out


@dataclass
class Freed:
    files: int = 0
    bytes: int = 0

    def add(self, other: Freed) -> None:
        self.files += other.files
        self.bytes += other.bytes


def measure(layout: Layout, record: JobRecord) -> Freed:
    """Files and bytes the job holds: its run directory (walked without following a
    link; a link counts as a file of its own size) and its processed prompt."""
    freed = Freed()
    try:
        fd = open_folder(layout.root, ("runs", record.id))
    except (OSError, NotARealFolder, PathEscapesRoot):
        return freed
    try:
        for _top, dirs, files, top_fd in os.fwalk(dir_fd=fd, follow_symlinks=False):
            for name in files + [d for d in dirs if _is_link(name=d, dir_fd=top_fd)]:
                freed.files += 1
                freed.bytes += _size(name, top_fd)
    finally:
        os.close(fd)
    prompt = _processed(layout, record)
    if prompt is not None:
        folder, name = prompt
        try:
            freed.bytes += _size(name, folder, strict=True)
            freed.files += 1
        except OSError:
            pass
        finally:
            os.close(folder)
    return freed


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _size(name: str, dir_fd: int, strict: bool = False) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    except OSError:
        if strict:
            raise
        return 0


def _processed(layout: Layout, record: JobRecord) -> tuple[int, str] | None:
    """A descriptor of the folder holding the job's processed prompt and its name, if
    ``processed_path`` lies below processed/ and that folder is reached without a link."""
    parts = parts_below(record.processed_path or "", "processed")
    if parts is None:
        return None
    try:
        return open_folder(layout.root, parts[:-1]), parts[-1]
    except (OSError, NotARealFolder, PathEscapesRoot):
        return None


class NotPrunable(HopperError):
    """A job chosen to prune changed before it was removed (or is not a job any more)."""


def remove(layout: Layout, record: JobRecord) -> None:
    """Remove a finished job: run directory, processed prompt (see the module doc).

    Raises :class:`NotPrunable` if the job is no longer terminal and finalized (or
    its run directory is not a real folder); ``OSError`` as the system gave it."""
    run_dir = layout.run_dir(record.id)
    if os.path.lexists(run_dir / PROMPT_FILE):
        raise NotPrunable(
            "its prompt.md is back in the run directory: a watcher is working on it",
            path=run_dir,
        )
    try:
        again = read_record(run_dir)
    except (FileNotFoundError, JobFileCorrupt) as exc:
        raise NotPrunable(f"its job.json cannot be read now ({exc})", path=run_dir) from None
    if not is_terminal(again.state):
        raise NotPrunable(f"it is {again.state} now: only a finished job is pruned", path=run_dir)
    runs = open_folder(layout.root, ("runs",))
    try:
        if not stat.S_ISDIR(os.stat(record.id, dir_fd=runs, follow_symlinks=False).st_mode):
            raise NotPrunable("is not a real folder (a link?): left alone", path=run_dir)
        trash = TRASH_PREFIX + record.id
        os.rename(record.id, trash, src_dir_fd=runs, dst_dir_fd=runs)
        try:
            _finish(layout, runs, trash, again)
        except OSError as exc:
            raise _incomplete(layout, trash, exc) from None
    finally:
        os.close(runs)


class PruneIncomplete(HopperError):
    """A job's removal began (its folder renamed out of runs/) and could not finish."""


def _incomplete(layout: Layout, trash: str, exc: OSError) -> PruneIncomplete:
    return PruneIncomplete(
        f"could not be removed completely ({exc.strerror or exc}"
        f"{': ' + str(exc.filename) if exc.filename else ''}); the job is out of every "
        "listing, what is left stays here",
        path=layout.runs / trash,
        hint="fix the cause (permissions, an immutable file: lsattr -R) and run hopper "
        "prune again: it finishes this first",
    )


def _finish(layout: Layout, runs: int, trash: str, record: JobRecord | None) -> None:
    if record is not None:
        prompt = _processed(layout, record)
        if prompt is not None:
            folder, name = prompt
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=folder)  # a link is unlinked, never followed
            except FileNotFoundError:
                pass
            finally:
                os.close(folder)
    shutil.rmtree(trash, dir_fd=runs)


def leftovers(layout: Layout) -> list[str]:
    """Job ids a prune began to remove and did not finish (``runs/.pruning-<id>``)."""
    try:
        with os.scandir(layout.runs) as it:
            return sorted(
                e.name[len(TRASH_PREFIX) :]
                for e in it
                if e.name.startswith(TRASH_PREFIX) and e.is_dir(follow_symlinks=False)
            )
    except FileNotFoundError:
        return []


def finish_leftover(layout: Layout, job_id: str) -> None:
    """Finish removing ``runs/.pruning-<job_id>`` (and its processed prompt); raises
    :class:`PruneIncomplete` if it still cannot be removed."""
    trash = TRASH_PREFIX + job_id
    try:
        record: JobRecord | None = read_record(layout.runs / trash)
    except (FileNotFoundError, JobFileCorrupt):
        record = None
    runs = open_folder(layout.root, ("runs",))
    try:
        _finish(layout, runs, trash, record)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise _incomplete(layout, trash, exc) from None
    finally:
        os.close(runs)


def drop_index_rows(layout: Layout) -> None:
    """Bring the status index up to date now, so the pruned jobs' rows go at once.
    The index is disposable: a failure here is left to the next refresh."""
    from hopper.store.index import JobIndex

    try:
        with JobIndex.open(layout) as index:
            index.refresh()
    except (OSError, sqlite3.Error):  # a derived cache: the next status rebuilds it
        return
