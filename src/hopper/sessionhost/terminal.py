"""The agent's pseudo-terminal: spawned in its own session, read, written, resized.

The agent runs as the leader of a new session whose controlling terminal is
the slave side of a pty the host holds the master of; its process group is
its pid, so a stop reaches every process it started that did not leave the
group (the host, a child subreaper, catches the rest: proc/reaper.py).
Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import struct
import termios
from collections.abc import Mapping, Sequence

DEFAULT_SIZE = (40, 120)  # rows, columns


class SpawnError(Exception):
    """The agent's command could not be executed (not found, not executable …)."""


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Pty:
    """One agent process on a pseudo-terminal."""

    def __init__(self, master: int, pid: int, size: tuple[int, int]) -> None:
        self.master = master
        self.pid = pid
        self.rows, self.cols = size
        self.status: int | None = None  # its wait status once reaped

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        size: tuple[int, int] = DEFAULT_SIZE,
    ) -> Pty:
        """Fork ``argv`` on a new pty in ``cwd``; raises :class:`SpawnError` when exec fails."""
        master, slave = os.openpty()
        set_size(slave, *size)
        os.set_inheritable(master, False)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the agent, until exec
            try:
                os.close(err_r)
                os.close(master)
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                if slave > 2:
                    os.close(slave)
                for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                os.chdir(cwd)
                os.execvpe(argv[0], list(argv), dict(env))  # noqa: S606 - an argv, no shell
            except BaseException as exc:
                try:
                    os.write(err_w, f"{type(exc).__name__}: {exc}".encode())
                finally:
                    os._exit(127)
        os.close(err_w)
        os.close(slave)
        try:
            error = os.read(err_r, 4096).decode(errors="replace")
        finally:
            os.close(err_r)
        if error:
            os.waitpid(pid, 0)
            os.close(master)
            raise SpawnError(f"{argv[0]}: {error}")
        os.set_blocking(master, False)
        return cls(master, pid, size)

    def read(self) -> bytes | None:
        """What the agent wrote since the last read; b"" if nothing yet; None once
        the terminal is closed (every process holding it has exited)."""
        chunks: list[bytes] = []
        while True:
            try:
                data = os.read(self.master, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EIO:  # the slave side is closed
                    return b"".join(chunks) if chunks else None
                raise
            if not data:
                return b"".join(chunks) if chunks else None
            chunks.append(data)
            if len(chunks) >= 16:
                break  # let the loop serve others; the rest comes next turn
        return b"".join(chunks)

    def write(self, data: bytes, deadline_chunks: int = 256) -> int:
        """Write ``data`` to the agent's input; returns what was written (a full
        terminal buffer leaves the rest unwritten rather than blocking the host)."""
        view, done = memoryview(data), 0
        for _ in range(deadline_chunks):
            if done >= len(data):
                break
            try:
                done += os.write(self.master, view[done:])
            except BlockingIOError:
                select.select([], [self.master], [], 0.05)
            except OSError:
                break
        return done

    def resize(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        try:
            set_size(self.master, rows, cols)
        except OSError:
            pass

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        try:
            os.close(self.master)
        except OSError:
            pass
