"""Start-up of ``hopper web``: the port bound before anything is printed, who holds a
taken port, and whether the token URL may be printed (never into the journal)."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import TextIO


class PortInUse(Exception):
    def __init__(self, host: str, port: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        owner = who_listens(port)
        by = f"by {owner}?" if owner else "by a process hopper cannot see?"
        super().__init__(f"{shown}:{port} is in use ({by}); pick another with --port")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket uvicorn is handed: a taken port fails here, before any token
    is made or printed (SO_REUSEADDR as uvicorn sets it: a restart finds its port free
    while old connections linger in TIME_WAIT)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise
    sock.set_inheritable(True)
    return sock


def who_listens(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid N (command)`` of a process of this user listening on ``port``, best effort
    (Linux /proc; another user's process is not visible)."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
            if any(os.readlink(fd) in inodes for fd in fds):
                argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
                command = " ".join(b" ".join(argv).decode(errors="replace").split())
                return f"pid {pid_dir.name} ({command[:80]})"
        except OSError:
            continue
    return None


def to_journal(stream: TextIO) -> bool:
    """True when ``stream`` is systemd's journal (JOURNAL_STREAM names its device:inode)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


def may_print_token(stdout: TextIO, stderr: TextIO) -> bool:
    """The token URL goes only to a person's terminal: never into the journal, a log file
    or a pipe, where it stays readable long after (docs/web.md)."""
    try:
        tty = stdout.isatty()
    except ValueError:
        return False
    return tty and not to_journal(stdout) and not to_journal(stderr)
