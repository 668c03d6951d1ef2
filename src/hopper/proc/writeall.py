"""The one loop that writes all of a buffer to a descriptor.

``os.write`` may write less than it was given (a signal, a full pipe, a file
near a quota); every writer of a whole file, in the store and in the
supervisor, goes through :func:`write_all`. Standard library only, like the
supervisor that loads its siblings by path.
"""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``, as many calls as it takes; raises the
    OSError of the call that failed (what was written before it stays written)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
