"""The status index: a derived SQLite cache of every run directory's job.json.

Theory of operation: the run directories are the truth; ``.hopper/index.sqlite``
only remembers, per run directory, the ``(inode, mtime_ns, size)`` of the
job.json it last read, the summary fields listings need, and the file's text.
:meth:`JobIndex.refresh` lists ``runs/`` and stats each job.json (one
``stat(2)`` per job, no reads); only files whose identity changed are read
and parsed again, and rows whose directory is gone are dropped. job.json is
always replaced by rename, so a change always shows as a new inode or mtime.

The index is disposable: a missing, corrupt, foreign-version or unwritable
index is rebuilt (or, if the root is read-only for us, built in memory), and
it is never consulted without a refresh first.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState
from hopper.core.summary import JobSummary, summarize
from hopper.store.jobfile import JOB_FILE
from hopper.store.layout import Layout
from hopper.store.saferead import RECORD_LIMIT, UnreadableFile, read_stat

log = logging.getLogger(__name__)

INDEX_FILE = "index.sqlite"
INDEX_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    ino INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    name TEXT NOT NULL,
    agent TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    grp TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    heartbeat_at REAL,
    duration REAL,
    has_usage INTEGER NOT NULL,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cache_read_tokens INTEGER,
    cache_write_tokens INTEGER,
    cost_usd REAL,
    raw TEXT NOT NULL
)
"""
_COLUMNS = (
    "id, name, agent, state, reason, grp, attempt, created_at, started_at,"
    " finished_at, heartbeat_at, duration, has_usage, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, cost_usd"
)

_STATES = {s.value: s for s in JobState}

Stat = Callable[[str], os.stat_result]


@dataclass
class RefreshResult:
    listed: int = 0
    read: int = 0
    removed: int = 0
    corrupt: list[str] = field(default_factory=list)


class JobIndex:
    """Open with :meth:`open`; call :meth:`refresh` before every query."""

    def __init__(self, conn: sqlite3.Connection, layout: Layout, path: Path | None) -> None:
        self.conn = conn
        self.layout = layout
        self.path = path  # None: an in-memory index (root not writable)

    @classmethod
    def open(cls, layout: Layout) -> JobIndex:
        path = layout.state_dir / INDEX_FILE
        try:
            layout.state_dir.mkdir(parents=True, exist_ok=True)
            return cls(_connect(path), layout, path)
        except sqlite3.DatabaseError as exc:
            if not path.exists() or not os.access(path.parent, os.W_OK):
                log.debug("index %s unusable (%s); using memory", path, exc)
                return cls(_connect(None), layout, None)
            log.warning("index %s is corrupt (%s); rebuilding it", path, exc)
            _remove(path)
            return cls(_connect(path), layout, path)
        except PermissionError:
            return cls(_connect(None), layout, None)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> JobIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def refresh(self, stat: Stat = os.stat) -> RefreshResult:
        """Bring the index up to date with the run directories; see the module doc."""
        try:
            return self._refresh(stat)
        except sqlite3.DatabaseError as exc:
            if self.path is None:
                raise
            log.warning("index %s failed (%s); rebuilding it", self.path, exc)
            self.conn.close()
            try:
                _remove(self.path)
                self.conn = _connect(self.path)
            except (OSError, sqlite3.DatabaseError):
                self.path = None  # not ours to rewrite (a read-only root): work in memory
                self.conn = _connect(None)
            return self._refresh(stat)

    def _refresh(self, stat: Stat) -> RefreshResult:
        result = RefreshResult()
        runs = str(self.layout.runs)
        try:
            with os.scandir(runs) as it:
                names = [
                    e.name
                    for e in it
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                ]
        except FileNotFoundError:
            names = []
        result.listed = len(names)
        known = {
            row[0]: (row[1], row[2], row[3])
            for row in self.conn.execute("SELECT id, ino, mtime_ns, size FROM jobs")
        }
        changed: list[tuple[Any, ...]] = []
        gone: list[str] = []
        for name in names:
            path = f"{runs}/{name}/{JOB_FILE}"
            try:
                st = stat(path)
            except (FileNotFoundError, NotADirectoryError):
                if name in known:
                    gone.append(name)  # job.json vanished (a claim in progress, or removed)
                continue
            if known.get(name) == (st.st_ino, st.st_mtime_ns, st.st_size):
                continue
            row = _read_row(path, name, result)
            if row is not None:
                changed.append(row)
            elif name in known:
                gone.append(name)
        listed = set(names)
        gone.extend(k for k in known if k not in listed)
        if changed or gone:
            with self.conn:
                self.conn.executemany("DELETE FROM jobs WHERE id = ?", ((g,) for g in gone))
                self.conn.executemany(
                    "INSERT OR REPLACE INTO jobs VALUES"
                    " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    changed,
                )
        result.read = len(changed)
        result.removed = len(gone)
        return result

    def jobs(self) -> list[JobSummary]:
        """Every indexed job, oldest id first."""
        cur = self.conn.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY id")  # noqa: S608
        return [_summary(row) for row in cur]

    def raw(self, ids: Iterable[str]) -> Iterator[str]:
        """The job.json text (as last read) of each of ``ids``, in id order, streamed."""
        keep = set(ids)
        for job_id, text in self.conn.execute("SELECT id, raw FROM jobs ORDER BY id"):
            if job_id in keep:
                yield text

    def stamps(self) -> dict[str, tuple[int, int, int]]:
        """Each job's ``(inode, mtime_ns, size)`` of job.json as last read: compare two to see
        which jobs changed (``hopper web`` pushes only those)."""
        cur = self.conn.execute("SELECT id, ino, mtime_ns, size FROM jobs")
        return {row[0]: (row[1], row[2], row[3]) for row in cur}

    def raw_of(self, ids: Iterable[str]) -> dict[str, str]:
        """The job.json text (as last read) of each of ``ids`` the index knows."""
        out: dict[str, str] = {}
        for job_id in ids:
            row = self.conn.execute("SELECT raw FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                out[job_id] = row[0]
        return out


def _connect(path: Path | None) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:" if path is None else str(path), timeout=30)
    try:
        # A derived cache: losing it to a crash costs a rebuild, so skip the fsyncs.
        conn.execute("PRAGMA synchronous = OFF")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != INDEX_VERSION:
            with conn:
                conn.execute("DROP TABLE IF EXISTS jobs")
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
        conn.execute("SELECT count(*) FROM jobs WHERE rowid = 1").fetchone()
    except sqlite3.DatabaseError:
        conn.close()
        raise
    return conn


def _remove(path: Path) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _read_row(path: str, name: str, result: RefreshResult) -> tuple[Any, ...] | None:
    """Read one job.json; its stat is taken from the open file, so it matches the text."""
    try:
        data, st = read_stat(Path(path), RECORD_LIMIT)  # no link, FIFO, huge file: saferead
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        result.corrupt.append(exc.render().replace("\n", ";"))
        return None
    try:
        record = JobRecord.model_validate_json(data)
    except ValidationError as exc:
        result.corrupt.append(f"{path}: not a valid job record: {exc.errors()[0]['msg']}")
        return None
    if record.id != name:
        result.corrupt.append(f"{path}: records id {record.id!r}, not its directory's name")
    s = summarize(record)
    u = s.usage
    return (
        name,
        st.st_ino,
        st.st_mtime_ns,
        st.st_size,
        s.name,
        s.agent,
        s.state.value,
        s.reason,
        s.group,
        s.attempt,
        s.created_at,
        s.started_at,
        s.finished_at,
        s.heartbeat_at,
        s.duration_seconds,
        u is not None,
        u.input_tokens if u else None,
        u.output_tokens if u else None,
        u.cache_read_tokens if u else None,
        u.cache_write_tokens if u else None,
        u.cost_usd if u else None,
        data.decode("utf-8", "replace"),
    )


def _summary(row: tuple[Any, ...]) -> JobSummary:
    return JobSummary(
        id=row[0],
        name=row[1],
        agent=row[2],
        state=_STATES[row[3]],
        reason=row[4],
        group=row[5],
        attempt=row[6],
        created_at=row[7],
        started_at=row[8],
        finished_at=row[9],
        heartbeat_at=row[10],
        duration_seconds=row[11],
        usage=Usage.model_construct(
            input_tokens=row[13],
            output_tokens=row[14],
            cache_read_tokens=row[15],
            cache_write_tokens=row[16],
            cost_usd=row[17],
        )
        if row[12]
        else None,
    )
