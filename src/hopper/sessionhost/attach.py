"""The host's socket: attach clients to the agent's terminal; interrupt; close.

``host.sock`` in the session directory, bound and connected through
``/proc/self/fd/<dir fd>/host.sock`` (a session directory's path may be
longer than the 108 bytes a socket address holds). Only a peer of the
host's own uid is served (SO_PEERCRED); the socket is 0600 besides.

A client sends one JSON line: ``{"op": "attach", "read_only": bool}``,
``{"op": "interrupt"}``, ``{"op": "close"}`` or ``{"op": "poke"}`` (a
message was dropped: look now). The host answers one JSON line
(``{"ok": true, ...}``); an attached client then gets the terminal's bytes
(first the recent screen, then live) and, unless read-only, what it sends is
typed into the agent's terminal. A client that does not read what it is
sent (over :data:`CLIENT_BUFFER`) is dropped rather than slowing the host.
Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import dataclass, field

from hopper.sessionhost.contract import SOCKET_NAME

CLIENT_BUFFER = 4 * 1024 * 1024  # bytes queued for one client before it is dropped
LINE_LIMIT = 4096  # the request line
OPS = frozenset({"attach", "interrupt", "close", "poke"})


def socket_address(dir_fd: int) -> str:
    return f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"


def peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


@dataclass
class Client:
    sock: socket.socket
    inbuf: bytes = b""
    outbuf: bytearray = field(default_factory=bytearray)
    op: str | None = None  # once its request line is read
    read_only: bool = True
    closing: bool = False  # drop once outbuf is sent

    def fileno(self) -> int:
        return self.sock.fileno()


@dataclass(frozen=True)
class Request:
    """What a client asked the host: an op, or bytes typed into the terminal."""

    client: Client
    op: str  # "attach", "interrupt", "close", "poke", "input"
    data: bytes = b""


class Listener:
    """The host's listening socket and its clients."""

    def __init__(self, dir_fd: int) -> None:
        self.address = socket_address(dir_fd)
        try:
            os.unlink(SOCKET_NAME, dir_fd=dir_fd)  # a stale one from a host that died
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.address)
        finally:
            os.umask(old)
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.clients: list[Client] = []
        self.dir_fd = dir_fd

    def fileno(self) -> int:
        return self.sock.fileno()

    def attached(self) -> list[Client]:
        return [c for c in self.clients if c.op == "attach" and not c.closing]

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if peer_uid(conn) != os.getuid():
                conn.close()
                continue
            conn.setblocking(False)
            self.clients.append(Client(conn))

    def read(self, client: Client) -> list[Request]:
        """What ``client`` sent since the last read, as requests."""
        try:
            data = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.drop(client)
            return []
        if client.op is not None:
            if client.op == "attach" and not client.read_only:
                return [Request(client, "input", data)]
            return []  # a read-only client's keys go nowhere
        client.inbuf += data
        line, newline, rest = client.inbuf.partition(b"\n")
        if not newline:
            if len(client.inbuf) > LINE_LIMIT:
                self.answer(client, {"ok": False, "error": "request line too long"}, end=True)
            return []
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            obj = None
        op = obj.get("op") if isinstance(obj, dict) else None
        if not isinstance(op, str) or op not in OPS:
            self.answer(client, {"ok": False, "error": f"unknown request {line[:80]!r}"}, end=True)
            return []
        assert isinstance(obj, dict)
        client.op = op
        client.read_only = obj.get("read_only") is not False
        client.inbuf = b""
        requests = [Request(client, op)]
        if op == "attach" and rest and not client.read_only:
            requests.append(Request(client, "input", rest))
        return requests

    def answer(self, client: Client, reply: dict[str, object], end: bool = False) -> None:
        self.send(client, json.dumps(reply).encode() + b"\n")
        client.closing = client.closing or end
        self.flush(client)

    def send(self, client: Client, data: bytes) -> None:
        if len(client.outbuf) + len(data) > CLIENT_BUFFER:
            self.drop(client)  # it does not read: the host does not wait for it
            return
        client.outbuf += data

    def broadcast(self, data: bytes) -> None:
        for client in self.attached():
            self.send(client, data)
            self.flush(client)

    def flush(self, client: Client) -> None:
        while client.outbuf:
            try:
                sent = client.sock.send(client.outbuf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.drop(client)
                return
            del client.outbuf[:sent]
        if client.closing:
            self.drop(client)

    def drop(self, client: Client) -> None:
        if client in self.clients:
            self.clients.remove(client)
        try:
            client.sock.close()
        except OSError:
            pass

    def close(self) -> None:
        for client in list(self.clients):
            self.flush(client)
            self.drop(client)
        self.sock.close()
        try:
            os.unlink(SOCKET_NAME, dir_fd=self.dir_fd)
        except OSError:
            pass
