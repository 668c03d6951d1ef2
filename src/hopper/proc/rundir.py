"""The supervisor's files: written relative to the run directory's descriptor.

Nothing the job can reach steers these writes. The descriptor is taken at
start, so a run directory swapped for a symlink changes nothing; a file is
never opened through a symlink (``O_NOFOLLOW``), and a link, FIFO or
directory planted at one of the supervisor's names is moved aside to a
hidden name. A run directory deleted under a running job shows as
:meth:`RunDir.gone` (its ``st_nlink`` drops to 0). Standard library only,
like the supervisor that loads it by path.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from hopper.proc.writeall import write_all
else:  # run by path under -I -S: a sibling (supervise.py put this directory on sys.path)
    from writeall import write_all

Stamp = tuple[int, int, int]  # (inode, size, mtime ns): which file, as we left it


class RunDir:
    def __init__(self, path: str) -> None:
        self.path = path
        # Every write goes through this descriptor: a run directory replaced by a
        # symlink after the start cannot redirect them.
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def gone(self) -> bool:
        """True once the run directory was deleted (its last link is gone)."""
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return True

    def open_regular(self, name: str, flags: int) -> int:
        """Open ``name`` in the run directory as a regular file, never through a link.

        Whatever else sits at the name (a symlink, a FIFO, a directory) is
        renamed aside to a hidden name and a fresh file is created; O_NONBLOCK
        keeps a FIFO from blocking the open.
        """
        base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(3):
            try:
                fd = os.open(name, base, 0o644, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR):
                    raise
            else:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.set_blocking(fd, True)
                    return fd
                os.close(fd)
            aside = f".{name}.displaced.{os.getpid()}.{time.monotonic_ns()}"
            os.rename(name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        raise OSError(errno.EEXIST, f"{name}: cannot be opened as a regular file")

    def open_log(self, log: str) -> int:
        """job.log: in the run directory through its descriptor (else the given path)."""
        if os.path.dirname(log) == self.path.rstrip("/"):
            return self.open_regular(os.path.basename(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def append(self, name: str, data: bytes) -> None:
        """Append ``data`` to ``name`` (a line of events.jsonl) with one write."""
        fd = self.open_regular(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def create_temp(self, name: str) -> int:
        """A new file at ``name`` (whatever the job planted there is removed first)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, 0o644, dir_fd=self.fd)
        except FileExistsError:
            os.unlink(name, dir_fd=self.fd)  # a link or file planted at our temp name
            return os.open(name, flags, 0o644, dir_fd=self.fd)

    def replace(self, name: str, data: bytes, durable: bool) -> Stamp:
        """Replace ``name`` with ``data`` atomically: a temp name, then a rename.

        ``durable``: the file and then the directory are fsynced, so after a
        crash the new file is there (exit.json); otherwise not (resources.json,
        refreshed anyway). On failure the temp file is removed and the error
        raised; ``name`` keeps its old content. Returns the new file's
        :data:`Stamp`, for :meth:`touch`.
        """
        tmp = f".{name}.{os.getpid()}.tmp"
        fd = self.create_temp(tmp)
        try:
            try:
                write_all(fd, data)
                if durable:
                    os.fsync(fd)
                made = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise
        if durable:
            os.fsync(self.fd)
        return _stamp(made)

    def put(self, name: str, data: bytes) -> None:
        """``name`` holding ``data`` (a job's script.sh, written while the watcher
        commits the start, before the release): :meth:`replace` without an fsync, a
        directory planted at the name moved aside first. Raises OSError naming the
        file (ENOSPC …)."""
        try:
            try:
                self.replace(name, data, durable=False)
            except IsADirectoryError:
                aside = f".{name}.displaced.{os.getpid()}.{time.monotonic_ns()}"
                os.rename(name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
                self.replace(name, data, durable=False)
        except OSError as exc:
            why = f"cannot write {name} in {self.path}: {exc.strerror}"
            raise OSError(exc.errno, why) from None

    def make_dir(self, name: str) -> None:
        """The directory ``name`` (a job's ``work/``), made while the watcher commits
        the start: one already there is kept (an earlier attempt's, a run directory
        from before the supervisor made it); a link or anything else planted at the
        name is moved aside to a hidden name, never followed. Raises OSError naming
        the directory (EACCES, ENOSPC …)."""
        try:
            for _ in range(3):
                try:
                    os.mkdir(name, dir_fd=self.fd)
                    return
                except FileExistsError:
                    if stat.S_ISDIR(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode):
                        return
                aside = f".{name}.displaced.{os.getpid()}.{time.monotonic_ns()}"
                os.rename(name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST))
        except OSError as exc:
            why = f"cannot make {name}/ in {self.path}: {exc.strerror}"
            raise OSError(exc.errno, why) from None

    def touch(self, name: str, left: Stamp | None) -> Stamp | None:
        """Move ``name``'s mtime to now if it is still the file we left (``left``,
        from :meth:`replace` or the last touch); its new stamp, or None: rewrite it.

        Unchanged content is kept fresh this way (its mtime is a sign of life,
        reconcile.py's ``_pulse_age``) without a new inode, a rename, or an
        inotify ``IN_CREATE``/``IN_MOVED_TO`` in the run directory (only
        ``IN_ATTRIB``, which no watch of hopper's asks for). Anything else at
        the name (the job replaced, removed or edited it: another inode, size
        or mtime) gives None, so the caller writes the file again.
        """
        if left is None:
            return None
        try:
            now = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISREG(now.st_mode) or _stamp(now) != left:
                return None
            os.utime(name, dir_fd=self.fd, follow_symlinks=False)
            return _stamp(os.stat(name, dir_fd=self.fd, follow_symlinks=False))
        except OSError:
            return None


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns)
