"""Putting a prompt into the inbox the safe way: what submit, retry, demo and the web use.

The prompt is written to a temporary dot-name in its folder (never through a
link), fsynced, and renamed to ``STEM.prompt.md`` — or ``STEM-XXXX.prompt.md``
when that name is taken — so a watcher only ever sees a complete file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from hopper.store.atomic import fsync_dir
from hopper.store.layout import PROMPT_SUFFIX


def unique_target(folder: Path, stem: str) -> Path:
    """``STEM.prompt.md`` in ``folder``, or ``STEM-XXXX.prompt.md`` if anything has that name."""
    target = folder / f"{stem}{PROMPT_SUFFIX}"
    while os.path.lexists(target):
        target = folder / f"{stem}-{secrets.token_hex(2)}{PROMPT_SUFFIX}"
    return target


def drop_into(folder: Path, stem: str, data: bytes) -> Path:
    """Write ``data`` as a new prompt in ``folder`` and return its path.

    On any error (a full disk, a read-only or unwritable inbox) the temporary
    file is removed and the ``OSError`` propagates: nothing is left behind.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{stem}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        target = unique_target(folder, stem)
        os.rename(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)
    return target
