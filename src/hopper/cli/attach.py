"""``hopper attach NAME|ID [--read-only]``: your terminal on a live agent's terminal.

Raw mode: every key goes to the agent (unless ``--read-only``) except the
detach sequence, **Ctrl-\\ then d**; the agent keeps running. Ctrl-\\ then
any other key sends both on. The host sends the recent screen first, then
everything the agent prints. The session ending ends the attach.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys
import termios
import tty
from typing import Any

from hopper.cli.common import EXIT_OK, add_root_args, fail, read_context
from hopper.sessionhost.client import HostUnreachable, attach
from hopper.store.sessions import find_session

DETACH_PREFIX = b"\x1c"  # Ctrl-\
DETACH_KEY = b"d"


def register(sub: Any) -> None:
    p = sub.add_parser("attach", help="put your terminal on a live agent's terminal")
    add_root_args(p)
    p.add_argument("ref", metavar="ID", help="a session's name, or a job (id, prefix or name)")
    p.add_argument("--read-only", action="store_true", help="watch only; keys are not sent")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    folder = find_session(layout, args.ref)
    try:
        sock, first = attach(folder, args.read_only)
    except HostUnreachable as exc:
        return fail(f"{args.ref}: {exc} (hopper sessions lists the live ones)")
    mode = "read-only" if args.read_only else "read-write"
    sys.stderr.write(f"[hopper] attached to {folder.name} ({mode}); detach: Ctrl-\\ then d\r\n")
    sys.stderr.flush()
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    try:
        if saved is not None:
            tty.setraw(stdin)
        relay(sock, first, stdin, sys.stdout.fileno(), args.read_only)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        sock.close()
    sys.stderr.write("\r\n[hopper] detached; the agent keeps running\n")
    return EXIT_OK


def relay(sock: socket.socket, first: bytes, stdin: int, stdout: int, read_only: bool) -> None:
    """Copy the agent's terminal to ``stdout`` and keys to the agent until the host
    closes the connection, stdin ends, or the detach sequence is typed."""
    _write_all(stdout, first)
    prefix = False
    watch = [sock.fileno(), stdin]
    while True:
        readable, _, _ = select.select(watch, [], [])
        if sock.fileno() in readable:
            data = sock.recv(65536)
            if not data:
                return
            _write_all(stdout, data)
        if stdin in readable:
            keys = os.read(stdin, 1024)
            if not keys:
                watch = [sock.fileno()]  # stdin closed: watch on until the session ends
                if read_only:
                    continue
                return
            send, prefix, detach = detach_filter(keys, prefix)
            if send and not read_only:
                sock.sendall(send)
            if detach:
                return


def detach_filter(keys: bytes, prefix: bool) -> tuple[bytes, bool, bool]:
    """Keys to send on, whether a Ctrl-\\ waits for its next key, whether to detach."""
    out = bytearray()
    for byte in keys:
        key = bytes([byte])
        if prefix:
            prefix = False
            if key == DETACH_KEY:
                return bytes(out), False, True
            out += DETACH_PREFIX + key
        elif key == DETACH_PREFIX:
            prefix = True
        else:
            out += key
    return bytes(out), prefix, False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
