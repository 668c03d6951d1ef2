"""The ledger: the one writer of job.json and events.jsonl, and where durability lives.

A loop turn decides (core/lifecycle.py returns a :class:`Step` per job: the
new record and its events); the ledger commits those steps as a batch, in
this order, before anything acts on them:

1. each record is written to a file beside its job.json: the run
   directory's standby (store/standby.py: the previous record's inode,
   rewritten only under a write lease, so no reader sees it change), or a
   fresh temporary file;
2. each of those files of a durable entry is fsynced;
3. each is exchanged with its job.json (renamed over it where that cannot
   be done, and always for a terminal record);
4. each run directory touched is fsynced once (the renames are durable);
5. a crash point, if the caller named one (faults.py: "the record is
   durable, nothing acted on it yet");
6. each entry's events are appended to its events.jsonl, all of them with
   one open and one write(2) through the directory descriptor of step 1
   (not fsynced: a lost event is noted again by recovery or is history only).

A file a finished job no longer needs (its record before last) is kept in
the watcher's spares (store/record_spares.py, when the watcher gave the
ledger some with :func:`use_spares`) and a new job's first record is written
into one of them instead of a new file.

A batch of one is exactly the old write-temp-fsync-replace-fsync-dir; a
batch of many pays one fsync per file and one per directory, the group
commit of a database, and issues each phase's fsyncs concurrently (a few
threads; fsync releases the GIL), so the filesystem's journal folds them
into one commit instead of one commit per call (ext4 here: 20 records in
~0.5–1.5 ms each instead of 3–5 ms one after another).

Files are reached through a descriptor of the run directory opened with
``O_NOFOLLOW`` and temporary files are made with ``O_EXCL``
(store/atomic.py): a run directory swapped for a link, or a link planted at
job.json, is refused or replaced, never written through.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from hopper.core.lifecycle import Event, Step
from hopper.core.record import JobRecord
from hopper.core.states import is_terminal
from hopper.faults import crash_point
from hopper.proc.writeall import write_all
from hopper.store import standby
from hopper.store.atomic import displace, open_dir, temp_name_of
from hopper.store.jobfile import JOB_FILE, append_event, append_events, event_line
from hopper.store.record_spares import RecordSpares

_spares: RecordSpares | None = None  # the running watcher's (None: a file made, one freed)


def use_spares(spares: RecordSpares | None) -> RecordSpares | None:
    """Recycle finished jobs' record files through ``spares`` from now on (None: stop);
    the spares used before, for the caller to put back or close."""
    global _spares
    before, _spares = _spares, spares
    return before


@dataclass(frozen=True)
class Entry:
    """One job's step to commit; ``durable=False`` skips the fsyncs (the caller says why)."""

    run_dir: Path
    step: Step
    durable: bool = True
    dir_fd: int | None = None  # run_dir opened O_NOFOLLOW by the caller, who closes it


@dataclass
class Failed:
    """An entry the batch could not commit, and why (ENOSPC, EIO, ELOOP …)."""

    entry: Entry
    error: OSError


@dataclass
class _Staged:
    entry: Entry
    dir_fd: int
    tmp: str
    fd: int | None = None  # the temporary file, open until it is fsynced
    swap: bool = False  # tmp is the standby: exchanged with job.json, not renamed over it
    error: OSError | None = field(default=None)


def commit(
    run_dir: Path,
    step: Step,
    *,
    durable: bool = True,
    crash: str | None = None,
    dir_fd: int | None = None,
) -> JobRecord:
    """Commit one job's step; its record. Raises the OSError that stopped it.
    ``dir_fd``: the run directory opened O_NOFOLLOW by the caller (who closes it)."""
    failed = commit_batch([Entry(run_dir, step, durable, dir_fd)], crash=crash)
    if failed:
        raise failed[0].error
    return step.record


def commit_batch(entries: Sequence[Entry], *, crash: str | None = None) -> list[Failed]:
    """Commit every entry (see the module docstring); those that failed, in order.

    An entry that fails leaves its job.json as it was (the temporary file is
    removed) and appends none of its events; the others are committed. A
    failed directory fsync fails every entry of that directory: their records
    are in place but not known to be durable, so nothing may act on them.
    """
    # run dirs the callers hold open (O_NOFOLLOW) and close themselves
    held = {str(e.run_dir): e.dir_fd for e in entries if e.dir_fd is not None}
    dirs: dict[str, int] = dict(held)
    staged: list[_Staged] = []
    standing: set[str] = set()  # run dirs whose standby this batch already writes
    failed: list[Failed] = []
    try:
        try:
            for entry in entries:
                item = _stage(entry, dirs, standing)
                if item.error is not None:
                    failed.append(Failed(entry, item.error))
                else:
                    staged.append(item)
            _each(_sync_file, staged)
            for item in staged:
                if item.error is None:
                    _rename(item)
            _sync_dirs(staged, dirs)
            for item in staged:
                if item.error is not None:
                    failed.append(Failed(item.entry, item.error))
        finally:
            for item in staged:
                if item.fd is not None:
                    os.close(item.fd)
        if crash is not None and any(item.error is None for item in staged):
            crash_point(crash)
        for item in staged:
            if item.error is None and item.entry.step.events:
                try:  # through the directory descriptor the record went through
                    append_events(item.dir_fd, [_line(e) for e in item.entry.step.events])
                except OSError as exc:
                    failed.append(Failed(item.entry, exc))
    finally:
        for key, fd in dirs.items():
            if key not in held:
                os.close(fd)
    order = {id(e): i for i, e in enumerate(entries)}
    return sorted(failed, key=lambda f: order[id(f.entry)])


def _line(event: Event) -> bytes:
    return event_line(event.name, event.at, event.fields)


def note(run_dir: Path, name: str, at: datetime, **fields: object) -> None:
    """Append one event that changes no record: ``{"ts": at, "event": name, **fields}``."""
    append_event(run_dir, name, at, **fields)


def note_in(dir_fd: int, name: str, at: datetime, **fields: object) -> None:
    """:func:`note` through a descriptor of the run directory the caller holds
    (opened ``O_NOFOLLOW``): no second open of the directory by name."""
    append_events(dir_fd, [event_line(name, at, fields)])


def _stage(entry: Entry, dirs: dict[str, int], standing: set[str]) -> _Staged:
    """Open the run directory (once per batch) and write the record to its standby
    (store/standby.py), or a fresh file where there is none to reuse."""
    key = str(entry.run_dir)
    item = _Staged(entry, -1, temp_name_of(JOB_FILE))
    try:
        if key not in dirs:
            dirs[key] = open_dir(entry.run_dir, follow=False)  # a link here: ELOOP
        item.dir_fd = dirs[key]
        data = entry.step.record.model_dump_json(indent=2).encode() + b"\n"
        leased = False
        if key not in standing:  # a job twice in one batch: its second record in a fresh file
            standing.add(key)
            found = standby.open_standby(item.dir_fd)
            if found is None and _spares is not None and _spares.take(item.dir_fd, standby.STANDBY):
                # A finished job's file: under a write lease like any standby (refused,
                # someone still reads the old record: cleared away, a fresh one below).
                found = standby.open_standby(item.dir_fd)
            if found is not None:
                item.fd, size = found
                data, leased = standby.padded(data, size), True
            if item.fd is None:
                item.fd = _fresh(standby.STANDBY, item.dir_fd)
            if item.fd is not None:
                item.tmp, item.swap = standby.STANDBY, True
        if item.fd is None:
            item.fd = _fresh(item.tmp, item.dir_fd)
            if item.fd is None:
                raise FileExistsError(errno.EEXIST, "a file sits at a fresh name", item.tmp)
        try:
            write_all(item.fd, data)
        finally:
            if leased:
                standby.release(item.fd)
        if not entry.durable:
            os.close(item.fd)
            item.fd = None
    except OSError as exc:
        item.error = exc
        _discard(item)
    return item


def _fresh(name: str, dir_fd: int) -> int | None:
    """A new file at ``name`` (O_EXCL: never through a link); None if the name is taken."""
    try:
        return os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
        )
    except FileExistsError:
        return None


def _sync_file(item: _Staged) -> None:
    if item.fd is None:
        return
    try:
        os.fsync(item.fd)
    except OSError as exc:
        item.error = exc
        _discard(item)
    finally:
        if item.fd is not None:
            os.close(item.fd)
            item.fd = None


def _rename(item: _Staged) -> None:
    try:
        terminal = is_terminal(item.entry.step.record.state)
        if (
            item.swap
            and (not terminal or _spares is not None)
            and standby.exchange(item.dir_fd, item.tmp, JOB_FILE)
        ):
            if terminal:  # a finished job keeps no standby: the next job's first record
                _retire(item.dir_fd)
            return
        try:
            os.replace(item.tmp, JOB_FILE, src_dir_fd=item.dir_fd, dst_dir_fd=item.dir_fd)
        except IsADirectoryError:
            displace(JOB_FILE, item.dir_fd)  # a directory planted at job.json: moved aside
            os.replace(item.tmp, JOB_FILE, src_dir_fd=item.dir_fd, dst_dir_fd=item.dir_fd)
    except OSError as exc:
        item.error = exc
        _discard(item)


def _retire(dir_fd: int) -> None:
    """The standby of a finished job into the spares, or removed (no room for it)."""
    if _spares is not None and _spares.keep(dir_fd, standby.STANDBY):
        return
    try:
        os.unlink(standby.STANDBY, dir_fd=dir_fd)
    except OSError:
        pass  # gone, or a directory a job planted after the exchange: the record stands


def _sync_dirs(staged: list[_Staged], dirs: dict[str, int]) -> None:
    """fsync each directory with a durable, renamed record once; its entries fail with it."""
    wanted = {str(i.entry.run_dir) for i in staged if i.error is None and i.entry.durable}

    def sync(key: str) -> OSError | None:
        try:
            os.fsync(dirs[key])
        except OSError as exc:
            return exc
        return None

    keys = sorted(wanted)
    for key, error in zip(keys, _each(sync, keys), strict=True):
        if error is not None:
            for item in staged:
                if str(item.entry.run_dir) == key and item.error is None:
                    item.error = error


_T = TypeVar("_T")
_R = TypeVar("_R")
FSYNC_THREADS = 8  # concurrent fsyncs of one phase of a batch
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _each(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``fn`` over ``items``, concurrently when there are several (each call is an
    fsync, which waits on the disk with the GIL released); results in order.

    The first runs on this thread while the pool runs the rest: one hand-off to a
    pool thread (a Future, a queue, a wake-up and the GIL passed back) fewer per
    batch, the same number of fsyncs in flight."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="hopper-fsync")
        pool = _pool
    rest = [pool.submit(fn, item) for item in items[1:]]
    try:
        first = fn(items[0])
    finally:
        results = [future.result() for future in rest]  # never left running unseen
    return [first, *results]


def _discard(item: _Staged) -> None:
    """Remove the temporary file of an entry that failed (its job.json stays as it was)."""
    if item.fd is not None:
        os.close(item.fd)
        item.fd = None
    if item.dir_fd < 0:
        return
    try:
        os.unlink(item.tmp, dir_fd=item.dir_fd)
    except OSError:
        pass
