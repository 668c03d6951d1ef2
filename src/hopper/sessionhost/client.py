"""Talking to a session host: one request over its socket, with a deadline.

Used by the session executor (a message was dropped; interrupt; close) and
the CLI (``hopper interrupt``, ``hopper sessions close``, ``hopper attach``).
Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from hopper.sessionhost.attach import socket_address

REPLY_LIMIT = 4096


class HostUnreachable(Exception):
    """No host answers on the session's socket (none runs, or it is going away)."""


def connect(session_dir: Path, timeout: float) -> socket.socket:
    """A connected socket to the host of ``session_dir``; raises :class:`HostUnreachable`."""
    try:
        dir_fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HostUnreachable(f"{session_dir}: {exc.strerror}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(socket_address(dir_fd))
    except OSError as exc:
        sock.close()
        raise HostUnreachable(f"{session_dir}: no session host answers ({exc})") from exc
    finally:
        os.close(dir_fd)
    return sock


def read_reply(sock: socket.socket, deadline: float) -> tuple[dict[str, object], bytes]:
    """The host's one-line answer, and any bytes that came after it."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > REPLY_LIMIT:
            raise HostUnreachable("the session host did not answer in time")
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except OSError as exc:
            raise HostUnreachable(f"the session host did not answer ({exc})") from exc
        if not chunk:
            raise HostUnreachable("the session host closed the connection")
        data += chunk
    line, _, rest = data.partition(b"\n")
    try:
        reply = json.loads(line)
    except ValueError as exc:
        raise HostUnreachable(f"the session host answered {line[:80]!r}") from exc
    if not isinstance(reply, dict):
        raise HostUnreachable(f"the session host answered {line[:80]!r}")
    return reply, rest


def request(session_dir: Path, op: str, timeout: float = 5.0) -> dict[str, object]:
    """Ask the host for ``op`` (interrupt, close, poke); its answer."""
    deadline = time.monotonic() + timeout
    sock = connect(session_dir, timeout)
    try:
        sock.sendall(json.dumps({"op": op}).encode() + b"\n")
        reply, _ = read_reply(sock, deadline)
    except OSError as exc:
        raise HostUnreachable(f"the session host did not take the request ({exc})") from exc
    finally:
        sock.close()
    return reply


def attach(session_dir: Path, read_only: bool, timeout: float = 5.0) -> tuple[socket.socket, bytes]:
    """An attached socket (the host's answer read) and the first terminal bytes."""
    deadline = time.monotonic() + timeout
    sock = connect(session_dir, timeout)
    try:
        sock.sendall(json.dumps({"op": "attach", "read_only": read_only}).encode() + b"\n")
        reply, rest = read_reply(sock, deadline)
    except (OSError, HostUnreachable):
        sock.close()
        raise
    if reply.get("ok") is not True:
        sock.close()
        raise HostUnreachable(str(reply.get("error") or "the session host refused to attach"))
    sock.settimeout(None)
    return sock, rest
