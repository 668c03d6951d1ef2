"""job.json revised without a new inode: a standby file, rewritten only when no one holds it.

Theory of operation. Creating a file is the dearest thing the ledger does on
this project's ext4 (120–570 µs of CPU: the allocator skips every recently
freed inode), and a running job's record is revised several times (queued,
running, heartbeats, terminal). So each run directory keeps one standby
file, ``.job.json.standby``, and a revision is:

1. the standby opened (``O_NOFOLLOW``; anything but a regular file with one
   link is set aside and a fresh standby made) and a **write lease** taken
   on it (``F_SETLEASE``, ``F_WRLCK``). The kernel grants a write lease only
   when no other descriptor of the file is open anywhere, and while it is
   held any open(2) of the file waits until it is given back. So the old
   record it holds is rewritten only when no reader has it open, and a
   reader that opens it meanwhile (one that looked job.json up just before
   the last exchange) sees the whole new record, never a mix. A lease
   refused (a reader has it open, a filesystem without leases such as NFS,
   a file we do not own) costs a fresh file instead, as before;
2. overwritten from its start under the lease, never truncated (a
   truncate waits on ext4's journal: 2-3 ms of wall time and ~200 µs of CPU
   when other fsyncs are in flight, against ~0.1 ms and ~10 µs for the
   write): a record shorter than the old one is padded with spaces before
   its final newline, which JSON ignores. Then the lease is given back and
   the file fsynced (for a durable entry) by the ledger;
3. exchanged with job.json in one ``renameat2(RENAME_EXCHANGE)``: readers
   of job.json see the old record or the new, as with a rename, and the old
   record's inode becomes the next standby. Where the exchange is not
   supported (no job.json yet, an older kernel, a filesystem without it), a
   plain rename as before. A terminal record is renamed, not exchanged: a
   finished job keeps no standby.

So a job's records cost two new inodes (its first record and the first
standby) however often they are revised. The lease's break signal is
SIGURG (ignored by default), set before every lease: the kernel's default,
SIGIO, would end the watcher.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import stat

STANDBY = ".job.json.standby"
_RENAME_EXCHANGE = 2
_NOT_A_FILE = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR})
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP})
_libc: ctypes.CDLL | None = None
_no_exchange = False  # renameat2 missing from the C library: never asked again


def open_standby(dir_fd: int) -> tuple[int, int] | None:
    """The standby open for writing under a write lease, and its size (what a new
    record must at least fill: :func:`padded`); None if there is none to reuse (the
    caller makes a fresh file). Anything odd at the name is cleared away."""
    try:
        fd = os.open(
            STANDBY, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in _NOT_A_FILE:
            raise
        clear(dir_fd)
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and _lease(fd):
            return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    clear(dir_fd)
    return None


def padded(data: bytes, size: int) -> bytes:
    """``data`` (JSON and a newline) at least ``size`` bytes long: spaces before the newline."""
    if len(data) >= size:
        return data
    return data[:-1] + b" " * (size - len(data)) + data[-1:]


def _lease(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)  # reset by every F_UNLCK: set each time
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError:
        return False  # held open elsewhere (EAGAIN), no leases here (EINVAL), not ours
    return True


def release(fd: int) -> None:
    """Give the write lease back (the rewrite is complete): waiting openers go on."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    except OSError:
        pass


def clear(dir_fd: int) -> None:
    """Remove what sits at the standby's name: a directory is set aside, never removed."""
    try:
        st = os.stat(STANDBY, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            os.rename(STANDBY, _aside(), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            os.unlink(STANDBY, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _aside() -> str:
    return f".job.json.displaced.{os.urandom(4).hex()}"


def exchange(dir_fd: int, name: str, target: str) -> bool:
    """Swap ``name`` and ``target`` atomically; False where that cannot be done (no
    ``target`` yet, or no RENAME_EXCHANGE here): the caller renames instead.

    What was at ``target`` is at ``name`` afterwards; if it was not a regular file
    (a link or a directory a job planted at job.json), it is removed or, a
    directory, set aside as ``.job.json.displaced.*``, as a rename over it would.
    """
    global _libc, _no_exchange
    if _no_exchange:
        return False
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(_libc, "renameat2"):
            _no_exchange = True
            return False
    old, new = os.fsencode(name), os.fsencode(target)
    if _libc.renameat2(dir_fd, old, dir_fd, new, _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOENT or err in _UNSUPPORTED:
            return False
        raise OSError(err, os.strerror(err), target)
    try:  # the record is in place: what is left is tidying the old one's name
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            os.rename(name, _aside(), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        elif not stat.S_ISREG(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass  # the next revision clears it (open_standby)
    return True
