"""Global slot and session leases: files under ``<root>/.hopper/slots/<scope>/``.

Theory of operation. A scope is one limit shared by every watcher on the
root: ``all`` (``max_parallel``), ``agent-<name>``, ``group-<name>``, and
``session-<name>`` (limit 1: a session never runs two jobs at once, across
watchers). A scope with limit N has lease files ``0`` … ``N-1``; holding a
lease means having created one of them. Creation is exclusive without
flock: the lease is written complete to a unique temporary name and
``link(2)``-ed to the slot name, which fails with EEXIST if the slot is
taken — atomic on a local filesystem and on NFS (the classic NFS lock
recipe of open(2): if the reply is lost and retransmitted, a link count of 2
on the temporary file says we won after all).

A lease names its job, the watcher (owner) and host that took it. It is
released (unlinked) when the job leaves the running state. The file a lease
was linked from is kept as a hidden *spare* of this watcher
(``.spare.<pid>.<random>``, skipped like every dot-name): once this watcher
has released the lease, the spare is rewritten for its next lease and linked
again, so a watcher makes no new file per lease once it has as many spares as
it holds leases (a new file costs 120-570 µs of CPU on ext4;
docs/performance.md, "New files per job"). A spare whose lease was removed by
another watcher is deleted, not reused; a watcher deletes its spares when it
stops; a crashed one's stay, a few bytes each. Another watcher that read a
released lease an instant before its rewrite may read the new text: a lease
it cannot parse names no job, and its reclaim, rename-first, puts back any
lease it did not mean to take.

A lease that was
never released (a crash, a dead host) goes stale and is reclaimed when a
watcher finds the scope full. Reclaiming renames the lease aside first, so
of two reclaimers only one wins. Counting a scope is one directory listing,
no reads.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from hopper.store.layout import Layout
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_bytes, read_stat

log = logging.getLogger(__name__)

SLOTS_DIR = "slots"


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if no such name exists; True if we made it.

    Complete content under the final name from the first instant (written
    to a temporary name, then hard-linked). Safe on NFS, where O_EXCL is
    not on every version and a retransmitted request can report EEXIST for
    a link that succeeded.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return os.stat(tmp).st_nlink == 2  # NFS: our link landed, the reply was lost
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                return _create_excl_fallback(path, data)  # no hard links here
            if os.stat(tmp).st_nlink == 2:
                return True
            raise
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass


def _create_excl_fallback(path: Path, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def scope_name(kind: str, value: str) -> str:
    """A safe directory name for ``kind``/``value`` (names may hold any character)."""
    safe = quote(value, safe="-_.")
    if len(safe) > 80:
        safe = safe[:60] + "~" + hashlib.sha256(value.encode()).hexdigest()[:16]
    return f"{kind}-{safe}"


@dataclass(frozen=True)
class Scope:
    name: str  # directory name under slots/
    limit: int


@dataclass(frozen=True)
class Lease:
    path: Path
    job_id: str
    owner: str
    host: str
    age: float  # seconds since it was taken (by the file's mtime)


# Is this lease still held by a job that needs it? (The watcher decides.)
Validity = Callable[[Lease], bool]


class SlotLeases:
    """This watcher's side of the leases. Its own bookkeeping is keyed by plain
    ``str`` paths (``<folder>/<name>``): a lease is acquired and released per job,
    and ``pathlib`` objects cost more than the syscalls around them here."""

    def __init__(self, layout: Layout, owner: str, host: str) -> None:
        self.base = layout.state_dir / SLOTS_DIR
        self._base = str(self.base)
        self.owner = owner
        self.host = host
        self._spares: dict[str, list[str]] = {}  # scope folder -> our free spares
        self._spare_of: dict[str, str] = {}  # a lease we hold -> the spare it was linked from
        self._size: dict[str, int] = {}  # a spare -> the length of what it holds
        # a lease we linked -> its job and inode (known without reading it)
        self._job_of: dict[str, tuple[str, int]] = {}

    def _dir(self, scope: str) -> Path:
        return self.base / scope

    def count(self, scope: str) -> int:
        """Leases held in ``scope`` (one listing, no reads)."""
        try:
            with os.scandir(f"{self._base}/{scope}") as it:
                return sum(1 for e in it if not e.name.startswith("."))
        except FileNotFoundError:
            return 0

    def holders(self, scope: str, now: float) -> list[Lease]:
        out: list[Lease] = []
        folder = self._dir(scope)
        try:
            names = [n for n in os.listdir(folder) if not n.startswith(".")]
        except FileNotFoundError:
            return out
        for name in sorted(names):
            lease = _read(folder / name, now)
            if lease is not None:
                out.append(lease)
        return out

    def acquire(
        self, job_id: str, scopes: Iterable[Scope], now: float, valid: Validity
    ) -> list[Path] | None:
        """Take one lease in every scope for ``job_id``, or none at all (None)."""
        taken: list[Path] = []
        for scope in scopes:
            path = self._acquire_one(job_id, scope, now, valid)
            if path is None:
                self.release(taken)
                return None
            taken.append(Path(path))
        return taken

    def _acquire_one(self, job_id: str, scope: Scope, now: float, valid: Validity) -> str | None:
        folder = f"{self._base}/{scope.name}"
        if folder not in self._spares:  # made once: a failing mkdir per lease costs too
            os.makedirs(folder, exist_ok=True)
            self._spares[folder] = []
        used, mine = self._used(folder, job_id, now)
        if mine is not None:
            return mine  # already ours (a start retried after a crash)
        data = json.dumps({"job": job_id, "owner": self.owner, "host": self.host}).encode()
        for attempt in range(2):
            for n in range(scope.limit):
                name = str(n)
                if name in used:
                    continue
                path = f"{folder}/{name}"
                if self._create(path, folder, data, job_id):
                    return path
            held = self.holders(scope.name, now)  # full: every lease read, for the sweep
            if attempt == 0 and not self.sweep(scope.name, now, valid, held):
                return None
            used = {lease.path.name for lease in self.holders(scope.name, now)}
        return None

    def _used(self, folder: str, job_id: str, now: float) -> tuple[set[str], str | None]:
        """The names taken in ``folder``, and ``job_id``'s lease there if it has one.

        One listing. A lease this watcher linked for another job is taken whatever
        became of its file since (nothing read, nothing stat'ed); one it linked for
        ``job_id`` is checked by its inode (one stat); only the others are read
        (:meth:`holders` without the reads this watcher can do without)."""
        try:
            names = [n for n in os.listdir(folder) if not n.startswith(".")]
        except FileNotFoundError:
            return set(), None
        used: set[str] = set()
        for name in names:
            path = f"{folder}/{name}"
            ours = self._job_of.get(path)
            if ours is not None:
                if ours[0] != job_id:
                    used.add(name)
                    continue
                try:  # still the file we linked, not another's after a reclaim
                    if os.stat(path, follow_symlinks=False).st_ino == ours[1]:
                        return used, path
                except FileNotFoundError:
                    continue
            lease = _read(Path(path), now)
            if lease is None:
                continue
            if lease.job_id == job_id:
                return used, path
            used.add(name)
        return used, None

    def sweep(
        self, scope: str, now: float, valid: Validity, held: list[Lease] | None = None
    ) -> int:
        """Reclaim the stale leases of ``scope``; how many."""
        reclaimed = 0
        for lease in held if held is not None else self.holders(scope, now):
            if valid(lease):
                continue
            if _reclaim(lease):
                self._freed(str(lease.path))
                reclaimed += 1
                log.info("reclaimed a stale lease %s (job %s)", lease.path, lease.job_id)
        return reclaimed

    def release(self, paths: Iterable[Path]) -> None:
        for path in paths:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            self._freed(str(path))

    def release_taken(self, job_id: str, paths: Iterable[Path]) -> None:
        """Drop the leases :meth:`acquire` gave ``job_id``, by name: each is removed
        only if it still names the job (:func:`_reclaim`), no other lease is read."""
        for path in paths:
            key = str(path)
            ours = self._job_of.get(key)
            if ours is not None and ours[0] == job_id:
                _reclaim_linked(key, ours[1])  # known by its inode: nothing read
            else:
                _reclaim(Lease(path, job_id, self.owner, self.host, 0.0))
            self._freed(key)

    def release_job(self, job_id: str, scopes: Iterable[str], now: float) -> None:
        """Drop every lease ``job_id`` holds in ``scopes`` (reads at most a limit's files)."""
        for scope in scopes:
            for lease in self.holders(scope, now):
                if lease.job_id == job_id:
                    _reclaim(lease)
                    self._freed(str(lease.path))

    def close(self) -> None:
        """Remove this watcher's spares (the leases still held stay)."""
        for spare in [*self._spare_of.values(), *(p for f in self._spares.values() for p in f)]:
            _unlink(spare)
        self._spares.clear()
        self._spare_of.clear()
        self._size.clear()
        self._job_of.clear()

    def _create(self, path: str, folder: str, data: bytes, job_id: str) -> bool:
        """:func:`create_exclusive` through this watcher's spares: a free one is rewritten
        and linked at ``path`` (in ``folder``); a new file only when none is free. True
        if we made it."""
        free = self._spares.get(folder)
        spare = free.pop() if free else None
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        if spare is not None:
            # Overwritten, never truncated (a truncate waits on ext4's journal):
            # a shorter text is padded with spaces, which JSON ignores.
            data = data.ljust(self._size.pop(spare, 0))
            try:
                fd = os.open(spare, flags)
            except OSError:
                spare = None  # gone, or something else at its name: a new one
        if spare is None:
            spare = f"{folder}/.spare.{os.getpid()}.{secrets.token_hex(6)}"
            fd = os.open(spare, flags | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                os.write(fd, data)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            try:
                os.link(spare, path)
                won = True
            except FileExistsError:
                won = os.stat(spare).st_nlink == 2  # NFS: our link landed, the reply was lost
            except OSError as exc:
                if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    _unlink(spare)
                    return _create_excl_fallback(Path(path), data)  # no hard links here
                if os.stat(spare).st_nlink != 2:
                    raise
                won = True
        except BaseException:
            _unlink(spare)
            raise
        self._size[spare] = len(data)
        if won:
            self._spare_of[path] = spare
            self._job_of[path] = (job_id, inode)
        else:
            self._spares.setdefault(folder, []).append(spare)
        return won

    def _freed(self, path: str) -> None:
        """The lease at ``path`` is no longer ours: its spare is free again if no name
        but the spare's links its file (else another watcher took it over: removed)."""
        spare = self._spare_of.pop(path, None)
        self._job_of.pop(path, None)
        if spare is None:
            return
        try:
            alone = os.stat(spare, follow_symlinks=False).st_nlink == 1
        except FileNotFoundError:
            return
        if alone:
            self._spares.setdefault(os.path.dirname(path), []).append(spare)
        else:
            _unlink(spare)
            self._size.pop(spare, None)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _read(path: Path, now: float) -> Lease | None:
    try:
        data, st = read_stat(path, SMALL_LIMIT)  # no link, FIFO or huge file: see saferead
        raw = json.loads(data or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, UnreadableFile):
        raw = {}
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
    if not isinstance(raw, dict):
        raw = {}
    return Lease(
        path,
        str(raw.get("job", "")),
        str(raw.get("owner", "")),
        str(raw.get("host", "")),
        max(0.0, now - st.st_mtime),
    )


def _reclaim_linked(path: str, inode: int) -> bool:
    """:func:`_reclaim` of a lease this watcher linked from a spare whose inode it
    knows: rename-first as there, then the file set aside is judged by its inode (one
    ``lstat``) instead of being read and parsed."""
    folder, name = os.path.split(path)
    aside = f"{folder}/.{name}.{secrets.token_hex(6)}.reclaim"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False  # another watcher reclaimed it (our job had ended)
    try:
        ours = os.stat(aside, follow_symlinks=False).st_ino == inode
    except FileNotFoundError:
        return False
    if not ours:
        # Reclaimed and retaken between our lookup and our rename: put it back.
        try:
            os.link(aside, path)
        except FileExistsError:
            log.warning("lease %s was retaken twice at once; one slot may be overused", path)
    _unlink(aside)
    return ours


def _reclaim(lease: Lease) -> bool:
    """Remove ``lease`` if it is still the one we judged; rename-first, so one reclaimer wins."""
    aside = lease.path.with_name(f".{lease.path.name}.{secrets.token_hex(6)}.reclaim")
    try:
        os.rename(lease.path, aside)
    except FileNotFoundError:
        return False  # released, or another watcher reclaimed it
    try:
        now_holding = json.loads(read_bytes(aside, SMALL_LIMIT) or b"{}").get("job")
    except (OSError, ValueError, AttributeError, RecursionError, UnreadableFile):
        now_holding = lease.job_id
    if now_holding != lease.job_id:
        # The slot was reclaimed and retaken between our read and our rename:
        # put the new holder's lease back (link never overwrites).
        try:
            os.link(aside, lease.path)
        except FileExistsError:
            log.warning("lease %s was retaken twice at once; one slot may be overused", lease.path)
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    return True
