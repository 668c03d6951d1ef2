"""The status index: a derived SQLite cache of every run directory's job.json.

Theory of operation: the run directories are the truth; ``.hopper/index.sqlite``
remembers, per run directory, the ``(inode, mtime_ns, size)`` of the job.json
it last read, the summary fields listings need, and whether the job is
*final* (terminal and finalized: nothing writes its job.json again, see
``store/index_row.py``); the file's text only while the job is not final
(``--json`` of a final job reads its file, which cannot have changed).
:meth:`JobIndex.refresh` then does only what may matter:

* ``runs/`` is listed only when its own ``(inode, mtime_ns)`` changed since the
  last listing (a run directory was made or removed), or when that listing was
  too recent to trust a coarse mtime (:data:`RACY_NS`);
* every job not yet final is ``stat``-ed, and re-read if its job.json changed
  (job.json is always replaced by rename: a change is a new inode or mtime);
* a final job is neither stat-ed nor read again: on 100,000 finished runs a
  refresh costs a ``stat`` of ``runs/`` and of the few live jobs;
* run directories without a usable job.json (a claim in progress, a corrupt
  file) are kept in ``pending`` and looked at again on every refresh.

Listings filter in SQL (:meth:`JobIndex.jobs` with a :class:`JobFilter`), so a
filtered query builds only the rows it returns, and ``hopper status ID`` looks
its reference up (:meth:`JobIndex.named`). A refresh that reads a few files
never loads pydantic unless a file is not in the shape hopper writes; a cold
build (:data:`BULK_READ` files or more) validates every file with the model
and splits the reading over forked workers (``store/index_pool.py``).

The index is disposable: a missing, corrupt, foreign-version or unwritable
index is rebuilt (or, if the root is read-only for us, built in memory), and
it is never consulted without a refresh first.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hopper.core.selection import JobFilter
from hopper.core.states import TERMINAL_STATES, JobState
from hopper.core.summary import JobSummary, UsageFigures
from hopper.store import index_file
from hopper.store.index_file import INDEX_FILE, IndexFile
from hopper.store.index_pool import read_rows
from hopper.store.index_row import RefreshResult, Stat, final_text, finalized, identity
from hopper.store.jobfile import JOB_FILE
from hopper.store.layout import Layout

__all__ = ["INDEX_FILE", "JobIndex", "RefreshResult"]


def _log(level: str, message: str, *args: object) -> None:
    """Rare events (an index rebuilt); logging loads only then: status starts lighter."""
    import logging

    getattr(logging.getLogger(__name__), level)(message, *args)


INDEX_VERSION = 6  # 6: a row's group is the record's scheduling group (was the inbox folder)
# A listing of runs/ within this long of runs/'s mtime is not trusted next time:
# a directory made in the same coarse clock tick would not change the mtime.
RACY_NS = 2_000_000_000
# A refresh with this many job.json files to read (a cold build) validates them with
# the model: loading pydantic costs ~0.3 s, then each file ~30 µs less than the
# standard-library check. Warm refreshes read a few files and never load it.
BULK_READ = 5000

_SCHEMA = (
    """CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    dir_ino INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    final INTEGER NOT NULL,
    processed TEXT,
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
    raw TEXT,  -- null for a final job: its job.json is read when asked for
    name_key TEXT NOT NULL
)""",
    "CREATE INDEX jobs_live ON jobs (final) WHERE final = 0",
    "CREATE INDEX jobs_state ON jobs (state)",
    "CREATE INDEX jobs_name ON jobs (name_key)",  # hopper status NAME: name.casefold()
    "CREATE TABLE pending (id TEXT PRIMARY KEY, dir_ino INTEGER NOT NULL)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
_COLUMNS = (
    "id, name, agent, state, reason, grp, attempt, created_at, started_at,"
    " finished_at, heartbeat_at, duration, has_usage, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, cost_usd"
)
_INSERT = (
    "INSERT OR REPLACE INTO jobs VALUES"
    " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_ACTIVE = tuple(s.value for s in JobState if s not in TERMINAL_STATES)

_STATES = {s.value: s for s in JobState}


class JobIndex:
    """Open with :meth:`open`; call :meth:`refresh` before every query."""

    def __init__(self, conn: sqlite3.Connection, layout: Layout, path: Path | None) -> None:
        self.conn = conn
        self.layout = layout
        self.path = path  # None: an in-memory index (root not writable)
        self._stamp: dict[str, int] = {}  # runs/'s identity at the listing being made

    @classmethod
    def open(cls, layout: Layout) -> JobIndex:
        """The index of ``layout``'s root: its file if that is one hopper made
        (``store/index_file.py``; anything else is moved aside and rebuilt, never
        written through), else in memory."""
        path = layout.state_dir / INDEX_FILE
        try:
            conn, where = _open_file(layout)
        except sqlite3.DatabaseError as exc:
            if not os.path.lexists(path) or not os.access(path.parent, os.W_OK):
                _log("debug", "index %s unusable (%s); using memory", path, exc)
                return cls(_connect(None), layout, None)
            _log("warning", "index %s is corrupt (%s); rebuilding it", path, exc)
            _remove(path)
            conn, where = _open_file(layout)
        except PermissionError:
            return cls(_connect(None), layout, None)
        return cls(conn, layout, where)

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
            _log("warning", "index %s failed (%s); rebuilding it", self.path, exc)
            self.conn.close()
            try:
                _remove(self.path)
                self.conn, self.path = _open_file(self.layout)
            except (OSError, sqlite3.DatabaseError):
                self.path = None  # not ours to rewrite (a read-only root): work in memory
                self.conn = _connect(None)
            return self._refresh(stat)

    def _refresh(self, stat: Stat) -> RefreshResult:
        result = RefreshResult()
        runs = str(self.layout.runs)
        listing = self._listing(runs, stat, result)
        gone: list[str] = []
        if listing is not None:
            known = dict(self.conn.execute("SELECT id, dir_ino FROM jobs"))
            waiting = dict(self.conn.execute("SELECT id, dir_ino FROM pending"))
            gone = [k for k in known if listing.get(k) != known[k]]  # removed or replaced
            gone += [k for k in waiting if k not in listing]
            look = {n: i for n, i in listing.items() if known.get(n) != i}  # new, or pending
        else:
            waiting = dict(self.conn.execute("SELECT id, dir_ino FROM pending"))
            look = dict(waiting)
        skip = set(look)
        root = self.layout.root
        final: list[str] = []  # unchanged, and finalized since it was read
        for job_id, dir_ino, ino, mtime_ns, size, state, processed in self.conn.execute(
            "SELECT id, dir_ino, ino, mtime_ns, size, state, processed FROM jobs WHERE final = 0"
        ):
            if job_id in skip or (listing is not None and listing.get(job_id) != dir_ino):
                continue
            result.stated += 1
            done = finalized(root, runs, job_id, _STATES[state], processed)
            try:
                same = identity(stat(f"{runs}/{job_id}/{JOB_FILE}")) == (ino, mtime_ns, size)
            except OSError:
                same = False  # gone or unreadable: read_row says which
            if not same:
                look[job_id] = dir_ino
            elif done:
                final.append(job_id)
        bulk = len(look) >= BULK_READ
        changed, pending = read_rows(root, runs, look, result, bulk=bulk)
        if changed or gone or pending or final or listing is not None:
            with self.conn:
                self.conn.executemany("DELETE FROM jobs WHERE id = ?", ((g,) for g in gone))
                self.conn.executemany("DELETE FROM pending WHERE id = ?", ((g,) for g in gone))
                self.conn.executemany(
                    "DELETE FROM jobs WHERE id = ?", ((p,) for p in pending)
                )  # job.json vanished or went bad: not a job now
                self.conn.executemany(
                    "DELETE FROM pending WHERE id = ?",
                    ((r[0],) for r in changed if r[0] in waiting),
                )
                self.conn.executemany(
                    "INSERT OR REPLACE INTO pending VALUES (?, ?)", pending.items()
                )
                self.conn.executemany(_INSERT, changed)
                self.conn.executemany(
                    "UPDATE jobs SET final = 1, raw = NULL WHERE id = ?", ((f,) for f in final)
                )
                if listing is not None:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO meta VALUES (?, ?)", self._stamp.items()
                    )
        result.read = len(changed)
        result.removed = len(gone)
        return result

    def _listing(self, runs: str, stat: Stat, result: RefreshResult) -> dict[str, int] | None:
        """``{name: directory inode}`` of every run directory, or None if ``runs/``
        has not changed since the last listing (the rows already say what is there)."""
        now = time.time_ns()
        try:
            st = stat(runs)
        except FileNotFoundError:
            self._stamp = {"runs_ino": 0, "runs_mtime_ns": 0}
            return {}
        before = dict(self.conn.execute("SELECT key, value FROM meta"))
        racy = st.st_mtime_ns >= now - RACY_NS
        self._stamp = {"runs_ino": st.st_ino, "runs_mtime_ns": 0 if racy else st.st_mtime_ns}
        if before == self._stamp and not racy:
            return None
        listing: dict[str, int] = {}
        try:
            with os.scandir(runs) as it:
                for e in it:
                    if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                        continue
                    if e.name.isascii() or _utf8(e.name):
                        listing[e.name] = e.inode()
                    else:
                        result.corrupt.append(_NOT_UTF8.format(path=os.fsencode(e.path)))
        except FileNotFoundError:
            pass
        result.listed = len(listing)
        return listing

    def jobs(self, wanted: JobFilter | None = None) -> list[JobSummary]:
        """The indexed jobs ``wanted`` lets through (all by default), oldest id first."""
        where, params = _where(wanted)
        cur = self.conn.execute(
            f"SELECT {_COLUMNS} FROM jobs{where} ORDER BY id",  # noqa: S608 - our own text
            params,
        )
        rows = [_summary(row) for row in cur]
        if wanted is not None and wanted.names:
            rows = [j for j in rows if wanted.matches(j)]  # globs: fnmatch, any letter case
        return rows

    def named(self, ref: str) -> list[JobSummary]:
        """The jobs a command-line reference names, as ``cli/status.resolve`` picks them
        from every job, but looked up: the job whose id is ``ref`` (any letter case),
        else those whose id starts with it or whose name is it in any letter case
        (``casefold``), oldest id first. Not for globs."""
        key = ref.lower()
        cur = self.conn.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (key,))  # noqa: S608
        exact = [_summary(row) for row in cur]
        if exact:
            return exact
        if not key or ord(key[-1]) >= 0xD7FF:  # no upper bound to give: look at every id
            return [
                j
                for j in self.jobs()
                if j.id.startswith(key) or j.name.casefold() == ref.casefold()
            ]
        above = key[:-1] + chr(ord(key[-1]) + 1)  # every id starting with key sorts below it
        cur = self.conn.execute(
            f"SELECT {_COLUMNS} FROM jobs"  # noqa: S608 - our own text
            " WHERE (id >= ? AND id < ?) OR name_key = ? ORDER BY id",
            (key, above, ref.casefold()),
        )
        return [_summary(row) for row in cur]

    def raw(self, ids: Iterable[str]) -> Iterator[str]:
        """The job.json text of each of ``ids``, in id order, streamed: as last read, or
        for a final job (whose text the index does not keep) as read now."""
        with self.conn:
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (id TEXT PRIMARY KEY)")
            self.conn.execute("DELETE FROM wanted")
            self.conn.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((i,) for i in ids))
        runs = str(self.layout.runs)
        for job_id, text, *stamp in self.conn.execute(
            "SELECT id, raw, ino, mtime_ns, size FROM jobs"
            " WHERE id IN (SELECT id FROM wanted) ORDER BY id"
        ):
            if text is None:
                text = final_text(runs, job_id, tuple(stamp))
            if text is not None:
                yield text

    def stamps(self) -> dict[str, tuple[int, int, int]]:
        """Each job's ``(inode, mtime_ns, size)`` of job.json as last read: compare two to see
        which jobs changed (``hopper web`` pushes only those)."""
        cur = self.conn.execute("SELECT id, ino, mtime_ns, size FROM jobs")
        return {row[0]: (row[1], row[2], row[3]) for row in cur}

    def raw_of(self, ids: Iterable[str]) -> dict[str, str]:
        """The job.json text of each of ``ids`` the index knows (see :meth:`raw`)."""
        runs = str(self.layout.runs)
        out: dict[str, str] = {}
        for job_id in ids:
            row = self.conn.execute(
                "SELECT raw, ino, mtime_ns, size FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                continue
            text = row[0] if row[0] is not None else final_text(runs, job_id, row[1:])
            if text is not None:
                out[job_id] = text
        return out


_NOT_UTF8 = (
    "{path!r}: not a run directory hopper made (its name is not UTF-8), so it is not"
    " listed;  hint: rename or remove it"
)


def _utf8(name: str) -> bool:
    """False for a name with bytes that are not UTF-8 (os.fsdecode's surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _where(wanted: JobFilter | None) -> tuple[str, list[Any]]:
    """The SQL of ``wanted``'s state, agent, group, reason, since and text tests (name globs
    stay in Python, or ``store/index_page.py`` adds them as a function)."""
    if wanted is None:
        return "", []
    clauses: list[str] = []
    params: list[Any] = []
    for column, values in (
        ("state", sorted(s.value for s in wanted.states)),
        ("agent", sorted(wanted.agents)),
        ("grp", sorted(wanted.groups)),
        ("reason", sorted(wanted.reasons)),
    ):
        if values:
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            params.extend(values)
    if wanted.since is not None:  # core/selection.touched_since
        clauses.append(
            f"(state IN ({', '.join('?' * len(_ACTIVE))}) OR created_at >= ? OR finished_at >= ?)"
        )
        params.extend([*_ACTIVE, wanted.since, wanted.since])
    if wanted.text:  # core/selection.contains: name_key is the name casefolded
        clauses.append("(instr(name_key, ?) > 0 OR instr(id, ?) > 0)")
        params.extend([wanted.text.casefold()] * 2)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _open_file(layout: Layout) -> tuple[sqlite3.Connection, Path | None]:
    """A connection to the checked index file and its path; memory (None) when there is
    no file hopper may use. Raises sqlite3.DatabaseError for a corrupt file."""
    target = index_file.checked(layout)
    if target is None:
        return _connect(None), None
    return _connect(target), target.path


def _connect(target: IndexFile | None) -> sqlite3.Connection:
    if target is None:
        conn = sqlite3.connect(":memory:", timeout=30)
    else:
        conn = sqlite3.connect(target.uri(), timeout=30, uri=True)
        try:
            ours = index_file.confirmed(conn, target)
        except sqlite3.DatabaseError:
            conn.close()
            raise
        if not ours:  # swapped for a link since it was checked: not a byte written
            conn.close()
            _log("warning", "index %s changed while being opened; using memory", target.path)
            conn = sqlite3.connect(":memory:", timeout=30)
    try:
        # A derived cache: losing it to a crash costs a rebuild, so skip the fsyncs.
        conn.execute("PRAGMA synchronous = OFF")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != INDEX_VERSION:
            with conn:
                for table in ("jobs", "pending", "meta"):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
        for table in ("jobs", "pending", "meta"):
            conn.execute(f"SELECT count(*) FROM {table} WHERE rowid = 1").fetchone()  # noqa: S608
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
        usage=UsageFigures(
            input_tokens=row[13],
            output_tokens=row[14],
            cache_read_tokens=row[15],
            cache_write_tokens=row[16],
            cost_usd=row[17],
        )
        if row[12]
        else None,
    )
