"""ABORT markers of running jobs, through inotify: one watch per run directory.

Theory of operation. ``touch runs/<id>/ABORT`` must stop a running job well
within a second. Stat-ing every running job's marker on every 0.5 s sweep
costs O(running) Python calls and syscalls twice a second, whether anyone
aborts anything or not; so each running job's run directory is watched
instead (``IN_CREATE | IN_MOVED_TO``, one inotify descriptor for all of them),
and the descriptor is read without blocking once a turn. A marker created or
renamed into place names its job, and only that job's marker is stat-ed.
Events are hints; the marker on disk is the truth:

* a new watch is followed by one stat (a marker made before the watch was);
* a job whose watch could not be added (``fs.inotify.max_user_watches``, its
  directory gone) or was lost (its directory moved or deleted: ``IN_IGNORED``,
  ``IN_MOVE_SELF``) is stat-ed on every sweep, as before this module;
* a queue overflow (``IN_Q_OVERFLOW``) stats every job at the next check;
* every ``FULL_SWEEP`` seconds every job is stat-ed anyway (belt and braces);
* with no inotify at all, or with ``runs/`` on a network file system (NFS,
  CIFS, FUSE …: inotify there sees only this host's own changes), every job
  is stat-ed on every sweep: the behaviour before this module.

The run directories' other files raise events too (job.json at each
heartbeat, the supervisor's resources.json every second: ~2,000 events a
second at 1,000 jobs). The descriptor is not in the loop's ``select``, so they
wake nothing; they are read in a few ``read(2)`` calls a turn and dropped by
name.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

from hopper.store.jobfile import ABORT_FILE

log = logging.getLogger(__name__)

FULL_SWEEP = 5.0  # seconds between stats of every running job's marker while inotify is trusted

# inotify(7); the same numbers as watchdog's InotifyConstants.
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
MASK = IN_CREATE | IN_MOVED_TO | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
GONE = IN_IGNORED | IN_MOVE_SELF | IN_DELETE_SELF | IN_UNMOUNT  # the watch no longer sees the dir

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
_MARKER = ABORT_FILE.encode() + b"\0"
_READ_SIZE = 64 * 1024

# Where inotify cannot be trusted: changes made by other hosts raise no event here.
SHARED_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs"}
    | {"afs", "ocfs2", "gfs2", "beegfs", "virtiofs", "fuse", "fuseblk"}
)


def _inotify() -> tuple[
    Callable[[], int], Callable[[int, bytes, int], int], Callable[[int, int], int]
]:
    """watchdog's libc bindings: (init, add_watch, rm_watch). Raises ImportError/OSError."""
    from watchdog.observers import inotify_c

    rm: Callable[[int, int], int] = inotify_c.inotify_rm_watch  # type: ignore[assignment]
    return inotify_c.inotify_init, inotify_c.inotify_add_watch, rm


def fs_type(path: Path, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the file system ``path`` is on (``ext4``, ``nfs4`` …); None if unknown."""
    real = os.path.realpath(path)
    best, found = -1, None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.readlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mount = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= best:  # the deepest mount; the last of a stack of them
            best, found = len(mount), right.split()[0]
    return found


def shared(fstype: str | None) -> bool:
    """Is this a file system other hosts change (so inotify misses their changes)?"""
    return fstype is None or fstype.split(".")[0] in SHARED_FS


class AbortWatch:
    """Which running jobs' ABORT markers to stat now; see the module doc."""

    def __init__(self, runs: Path) -> None:
        self._fd: int | None = None
        self._rm: Callable[[int, int], int] | None = None
        self._add: Callable[[int, bytes, int], int] | None = None
        self._wd: dict[str, int] = {}  # job id -> its watch
        self._ids: dict[int, str] = {}  # watch -> job id
        self._check: set[str] = set()  # stat these at the next check: new watches, hits
        self._unwatched: set[str] = set()  # no watch: stat on every sweep
        self._overflow = False
        self._next_full = 0.0  # monotonic time of the next stat of every job's marker
        self._warned = False
        self.why_not = self._open(runs)  # None: inotify in use; else why every sweep stats all

    def _open(self, runs: Path) -> str | None:
        kind = fs_type(runs)
        if shared(kind):
            where = kind or "an unknown file system"
            return f"{runs} is on {where}, where inotify misses other hosts' changes"
        try:
            init, self._add, self._rm = _inotify()
            fd = init()
            if fd < 0:
                raise OSError(_errno(), os.strerror(_errno()))
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        except (ImportError, OSError) as exc:
            return f"no inotify ({exc})"
        self._fd = fd
        return None

    @property
    def live(self) -> bool:
        return self._fd is not None

    def add(self, job_id: str, run_dir: Path) -> None:
        """Watch ``job_id``'s run directory from now on; its marker is stat-ed at the next check."""
        self._check.add(job_id)
        if self._fd is None or self._add is None or job_id in self._wd:
            return
        wd = self._add(self._fd, os.fsencode(run_dir), MASK)
        if wd < 0:
            err = _errno()
            self._unwatched.add(job_id)
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot watch %s for ABORT with inotify (%s); such jobs' markers are "
                    "checked every half second instead (raise fs.inotify.max_user_watches "
                    "if it says no space)",
                    run_dir,
                    os.strerror(err),
                )
            return
        self._unwatched.discard(job_id)
        old = self._ids.get(wd)
        if old is not None and old != job_id:  # the kernel reused a watch we thought gone
            self._wd.pop(old, None)
            self._unwatched.add(old)
        self._wd[job_id] = wd
        self._ids[wd] = job_id

    def remove(self, job_id: str) -> None:
        """``job_id`` runs here no more."""
        self._check.discard(job_id)
        self._unwatched.discard(job_id)
        wd = self._wd.pop(job_id, None)
        if wd is None:
            return
        self._ids.pop(wd, None)
        if self._fd is not None and self._rm is not None:
            self._rm(self._fd, wd)  # fails only if the directory is gone: the watch is too

    def due(self, now: float, *, sweep: bool) -> set[str] | None:
        """The jobs whose marker to stat now (``now``: monotonic seconds); None: every one.

        ``sweep``: the runner's half-second sweep (the jobs without a watch
        are due then); every FULL_SWEEP seconds, or after an overflow, all are.
        """
        if self._fd is None:
            self._check.clear()
            return None if sweep else set()
        self._read()
        if self._fd is None or self._overflow or now >= self._next_full:
            self._next_full = now + FULL_SWEEP
            self._overflow = False
            self._check.clear()
            return None
        due = self._check
        self._check = set()
        if sweep:
            due |= self._unwatched
        return due

    def _read(self) -> None:
        assert self._fd is not None
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:  # not expected from an inotify descriptor: stop trusting it
                log.error("inotify read failed (%s); ABORT markers are checked by sweeps", exc)
                self.close()
                return
            self._parse(data)
            if len(data) < _READ_SIZE // 2:
                return  # drained (a full read is at least half a buffer): no extra syscall

    def _parse(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            wd, mask, _, size = _EVENT.unpack_from(data, pos)
            name = pos + _EVENT.size
            pos = name + size
            if mask & IN_Q_OVERFLOW:
                self._overflow = True
            elif mask & GONE:
                self._lost(wd)
            elif data.startswith(_MARKER, name):
                job_id = self._ids.get(wd)
                if job_id is not None:
                    self._check.add(job_id)

    def _lost(self, wd: int) -> None:
        """The watch no longer sees the job's directory: sweep it, and look now."""
        job_id = self._ids.pop(wd, None)
        if job_id is None:
            return
        self._wd.pop(job_id, None)
        self._unwatched.add(job_id)
        self._check.add(job_id)
        if self._fd is not None and self._rm is not None:
            self._rm(self._fd, wd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._unwatched.update(self._wd)
        self._wd.clear()
        self._ids.clear()


def _errno() -> int:
    return ctypes.get_errno()
