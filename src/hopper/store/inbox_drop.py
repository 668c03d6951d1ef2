"""Putting a prompt into the inbox the safe way: what submit, retry, demo and the web use.

The prompt is written to a temporary dot-name in its folder, fsynced, and
renamed to ``STEM.prompt.md`` — or ``STEM-XXXX.prompt.md`` when that name is
taken — so a watcher only ever sees a complete file.

Never through a link: the folder is reached from the root one ``O_NOFOLLOW``
folder at a time (``store/layout.open_folder``) and every name is made
relative to its descriptor. An inbox sub-folder a job swapped for a link
(``inbox/team -> /elsewhere``) is refused with :class:`NotARealFolder`: the
watcher does not follow links either, so a prompt written there would carry
its secrets out of the root and never run.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from hopper.proc.writeall import write_all
from hopper.store.layout import PROMPT_SUFFIX, Layout, open_folder

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def unique_name(dir_fd: int, stem: str) -> str:
    """``STEM.prompt.md``, or ``STEM-XXXX.prompt.md`` if anything has that name in ``dir_fd``."""
    name = f"{stem}{PROMPT_SUFFIX}"
    while _exists(name, dir_fd):
        name = f"{stem}-{secrets.token_hex(2)}{PROMPT_SUFFIX}"
    return name


def drop_into(layout: Layout, sub: Sequence[str], stem: str, data: bytes) -> Path:
    """Write ``data`` as a new prompt in ``inbox/<sub…>`` and return its path.

    Missing folders are made. Raises ``NotARealFolder`` (nothing written) when
    a folder on the way is a link or a file, ``PathEscapesRoot`` for a bad
    folder name; on any other error (a full disk, a read-only or unwritable
    inbox) the temporary file is removed and the ``OSError`` propagates:
    nothing is left behind.
    """
    layout.root.mkdir(parents=True, exist_ok=True)
    dir_fd = open_folder(layout.root, ("inbox", *sub), create=True)
    try:
        tmp = f".{stem}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, _CREATE, 0o644, dir_fd=dir_fd)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            name = unique_name(dir_fd, stem)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return layout.inbox.joinpath(*sub, name)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
