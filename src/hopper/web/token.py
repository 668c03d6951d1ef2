"""``<root>/.hopper/web-token``: the one secret the dashboard asks for.

Created at the first start, mode 0600, with 32 random bytes (URL-safe
base64). Read back without following links and refused if anyone but its
owner could read it or if it is not what hopper writes: a person fixes that
with one command, and the error says which.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

from hopper.errors import HopperError
from hopper.store.atomic import fsync_dir
from hopper.store.layout import Layout

TOKEN_FILE = "web-token"  # noqa: S105 - a file name, not a secret
_TOKEN_OK = re.compile(r"^[A-Za-z0-9_-]{32,200}$")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class BadTokenFile(HopperError):
    """The web-token file exists but cannot be trusted or used."""


def token_path(layout: Layout) -> Path:
    return layout.state_dir / TOKEN_FILE


def load_or_create(layout: Layout) -> str:
    """The dashboard's token; creates the file (0600) if it is missing."""
    path = token_path(layout)
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return read_token(path)
    _write(fd, token)
    fsync_dir(path.parent)
    return token


def rotate(layout: Layout) -> str:
    """A new token in place of the old (temp file, then rename): every script's token and
    every browser's session cookie stop working; the new URL signs a browser in again."""
    path = token_path(layout)
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{TOKEN_FILE}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _write(fd, token)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return token


def _write(fd: int, token: str) -> None:
    try:
        os.write(fd, token.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_token(path: Path) -> str:
    remove = f"remove it (rm {path}) and restart hopper web to make a new one"
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise BadTokenFile(
            f"cannot be read: {exc.strerror}", path=path, hint=f"it must be a plain file; {remove}"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadTokenFile("is not a regular file", path=path, hint=remove)
        if st.st_uid != os.geteuid():
            raise BadTokenFile("belongs to another user", path=path, hint=remove)
        if st.st_mode & 0o077:
            raise BadTokenFile(
                f"is readable by others (mode {stat.S_IMODE(st.st_mode):o})",
                path=path,
                hint=f"chmod 600 {path}",
            )
        data = os.read(fd, 1024)
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace").strip()
    if not _TOKEN_OK.match(text):
        raise BadTokenFile(
            "does not hold a token (32+ URL-safe characters on one line)", path=path, hint=remove
        )
    return text
