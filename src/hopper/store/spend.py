"""The root's spend ledger: what each finished agent job spent, seen by every watcher.

Layout: ``<root>/.hopper/spend/<YYYY-MM-DD>/<job_id>.json``, one small file
per finished job that reported usage, in the folder of the UTC day it
finished. The budgets (core/budgets.py) are summed from these files.

Why one file per job, like the slot leases (store/leases.py), rather than
one-line records appended to a file per period:

* **Once per job, for free.** The file's name is the job id and it is
  created exclusively (written complete under a temporary name, fsynced,
  then ``link(2)``-ed to its name): a job's end filed twice (a crash
  between the terminal record and the prompt's move, then recovery) finds
  the name taken and adds nothing. Appended lines would need deduplicating
  on every read.
* **Race-safe without a server, on NFS too.** Every watcher on the root
  (and any host sharing it) files its own jobs' spend; ``link`` is atomic
  there, where ``O_APPEND`` is not (two clients' appends can interleave or
  overwrite each other).
* **Complete or absent.** A reader never sees half an entry, so an entry it
  cannot parse was planted or damaged, and is skipped with a warning.
* **Cheap to keep up with.** Entries never change once made, so a reader
  keeps what it parsed and, per day folder, re-lists only when the folder's
  mtime moved (a new entry) or is too fresh to tell (two entries within one
  tick of the kernel's clock): a watcher checks the budgets every turn at the
  cost of a ``stat`` per day of its longest budget period.

An entry is derived from the job's terminal record alone (:func:`entry_of`):
its id, when it finished, its agent, group, session and ``usage``. So the
ledger can be rebuilt from ``runs/`` (:func:`rebuild`) and gives the same
figures as ``hopper usage``. Entries are filed after the terminal record is
durable and before the prompt moves to processed/ (store/finalize.py), and
again by recovery when it completes a finalize; a job's spend is counted
once whatever crashes in between. ``hopper prune`` leaves the ledger alone:
pruning old runs never lowers what a period has spent.

The folder is under the root, where jobs can write: entries are read without
following links or blocking, with a size cap, and validated (store/saferead.py).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hopper.core.budgets import JobSpend
from hopper.core.prices import job_spend
from hopper.core.record import JobRecord, Usage
from hopper.core.states import is_terminal
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.store.saferead import UnreadableFile, parse_model, read_bytes

log = logging.getLogger(__name__)

SPEND_DIR = "spend"
ENTRY_LIMIT = 64 << 10  # bytes: an entry is ~300
RACY = 2.0  # seconds: a folder's mtime this fresh is not trusted to show every change
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SpendEntry(BaseModel):
    """``.hopper/spend/<day>/<job_id>.json``: one finished job's spend, as its record says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    finished_at: datetime
    agent: str
    group: str | None = None
    session: str | None = None
    usage: Usage


def entry_of(record: JobRecord) -> SpendEntry | None:
    """The entry a terminal record makes (None: not finished, or no usage reported)."""
    if not is_terminal(record.state) or record.usage is None or record.finished_at is None:
        return None
    return SpendEntry(
        job_id=record.id,
        finished_at=record.finished_at.astimezone(UTC),
        agent=record.agent,
        group=record.group,
        session=record.session,
        usage=record.usage,
    )


def spend_of(entry: SpendEntry) -> JobSpend:
    """The budgets' view of an entry: tokens and cost as core/prices.py reckons them
    (the one home of that arithmetic; a cost the agent did not report is unknown)."""
    priced = job_spend(entry.usage.model_dump(), None, {})
    return JobSpend(
        entry.job_id,
        # the stdlib's UTC, as the budgets' bounds carry: comparing datetimes of one tzinfo
        # is a plain compare (pydantic's own UTC tzinfo costs a Python call per compare)
        datetime.fromtimestamp(entry.finished_at.timestamp(), UTC),
        entry.agent,
        entry.group,
        entry.session,
        priced.cost_usd,
        priced.tokens,
    )


def day_name(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def file_spends(layout: Layout, records: Iterable[JobRecord]) -> int:
    """File the spend of each finished ``record`` that reported usage; how many were
    new. Idempotent: a job already filed is left as it is. Durable when it returns
    (each entry and its folder fsynced). Raises the OSError that stopped it."""
    by_day: dict[str, list[SpendEntry]] = {}
    for record in records:
        entry = entry_of(record)
        if entry is not None:
            by_day.setdefault(day_name(entry.finished_at), []).append(entry)
    made = 0
    for day, entries in by_day.items():
        fd = _open_day(layout, day, create=True)
        try:
            for entry in entries:
                made += _create(fd, f"{entry.job_id}.json", entry.model_dump_json().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return made


def _open_day(layout: Layout, day: str, *, create: bool) -> int:
    """The day's folder, opened without following a link (made as needed)."""
    base = layout.state_dir / SPEND_DIR
    if create:
        base.mkdir(parents=True, exist_ok=True)
    top = os.open(base, DIR_FLAGS)
    try:
        if create:
            try:
                os.mkdir(day, 0o755, dir_fd=top)
                os.fsync(top)
            except FileExistsError:
                pass
        return os.open(day, DIR_FLAGS, dir_fd=top)
    finally:
        os.close(top)


def _create(dir_fd: int, name: str, data: bytes) -> int:
    """Create ``name`` holding ``data`` unless it exists: 1 if made, 0 if it was there.

    Written and fsynced under a temporary name, then hard-linked: complete from
    its first instant under its name, and exclusive on NFS (a link count of 2 on
    the temporary file says a retransmitted link landed after all)."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dir_fd,
    )
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            return 1
        except FileExistsError:
            return int(os.stat(tmp, dir_fd=dir_fd).st_nlink == 2)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):  # no hard links
                return _create_in_place(dir_fd, name, data)
            raise
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _create_in_place(dir_fd: int, name: str, data: bytes) -> int:
    try:
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=dir_fd,
        )
    except FileExistsError:
        return 0
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return 1


@dataclass
class _Day:
    stamp: tuple[int, int] = (0, 0)  # the folder's (inode, mtime_ns) when last listed
    spends: dict[str, JobSpend | None] = field(default_factory=dict)  # name -> entry (None: bad)


class SpendLedger:
    """A reader of the ledger that keeps what it has parsed (entries never change)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._days: dict[str, _Day] = {}
        self.version = 0  # moves whenever an entry is added or goes: sums over it may be kept

    def spends(self, since: datetime, until: datetime) -> list[JobSpend]:
        """Every filed spend of a job that finished in [since, until]."""
        days = list(_days_between(since, until))
        for stale in set(self._days) - set(days):
            del self._days[stale]
            self.version += 1
        out: list[JobSpend] = []
        for day in days:
            for spend in self._read_day(day).spends.values():
                if spend is not None and since <= spend.finished_at <= until:
                    out.append(spend)
        return out

    def _read_day(self, day: str) -> _Day:
        known = self._days.setdefault(day, _Day())
        try:
            fd = _open_day(self.layout, day, create=False)
        except FileNotFoundError:
            self.version += bool(known.spends)
            known.spends.clear()
            return known
        except OSError as exc:  # a link or a file planted in the folder's place
            log.warning("spend ledger: %s/%s unreadable: %s", SPEND_DIR, day, exc.strerror)
            self.version += bool(known.spends)
            known.spends.clear()
            return known
        try:
            st = os.fstat(fd)
            stamp = (st.st_ino, st.st_mtime_ns)
            # A folder changed within RACY seconds may change again within the same
            # mtime tick (the kernel's coarse clock): listed again until it is older.
            if stamp == known.stamp and time.time() - st.st_mtime > RACY:
                return known
            names = [n for n in os.listdir(fd) if n.endswith(".json") and not n.startswith(".")]
            for name in names:
                if name not in known.spends:
                    known.spends[name] = _read_entry(self.layout, day, name, fd)
                    self.version += 1
            for gone in set(known.spends) - set(names):
                del known.spends[gone]
                self.version += 1
            known.stamp = stamp
        finally:
            os.close(fd)
        return known


def _read_entry(layout: Layout, day: str, name: str, dir_fd: int) -> JobSpend | None:
    path = layout.state_dir / SPEND_DIR / day / name
    try:
        data = read_bytes(Path(name), ENTRY_LIMIT, dir_fd=dir_fd)
        entry = parse_model(SpendEntry, data, path)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.warning("spend ledger: ignored %s: %s", path, exc.message)
        return None
    if f"{entry.job_id}.json" != name or day_name(entry.finished_at) != day:
        log.warning("spend ledger: ignored %s: it is not where job %s belongs", path, entry.job_id)
        return None
    return spend_of(entry)


def _days_between(since: datetime, until: datetime) -> Iterator[str]:
    first: date = since.astimezone(UTC).date()
    last: date = until.astimezone(UTC).date()
    while first <= last:
        yield first.isoformat()
        first += timedelta(days=1)


def rebuild(layout: Layout) -> list[SpendEntry]:
    """The entries the job records in ``runs/`` make, by job id: what the ledger
    holds for every job not pruned (``hopper budgets --check`` compares them)."""
    out: list[SpendEntry] = []
    for run_dir in iter_run_dirs(layout.runs):
        try:
            entry = entry_of(read_record(run_dir))
        except (OSError, JobFileCorrupt):  # a record that cannot be read makes none
            continue
        if entry is not None:
            out.append(entry)
    return sorted(out, key=lambda e: e.job_id)


def missing(layout: Layout, entries: Sequence[SpendEntry]) -> list[str]:
    """The ids among ``entries`` with no entry in the ledger."""
    absent: list[str] = []
    for entry in entries:
        path = layout.state_dir / SPEND_DIR / day_name(entry.finished_at) / f"{entry.job_id}.json"
        if not os.path.lexists(path):
            absent.append(entry.job_id)
    return absent
