"""The status index's file: opened only if it is a regular file hopper made.

Any job can reach ``.hopper/index.sqlite`` (``$HOPPER_RUN_DIR/../../.hopper``)
and swap it for a symlink or a hard link to a file elsewhere; SQLite follows a
link to the main database and would drop tables named ``jobs``, ``pending``
and ``meta`` there and write hopper's rows into it (a dangling link makes the
file). So before SQLite sees the name, :func:`checked` walks to ``.hopper``
without following links (``store/layout.open_folder``) and ``lstat``s the
name: a regular file with one link, owned by us or by the owner of
``.hopper`` (the watcher's user, when root or an operator asks), is used; anything else (a link,
a FIFO, a directory, a file of a third user, a hard link) is renamed aside
(``.index.sqlite.displaced.*``, never followed, never written) with one log
line, and a fresh file is made with ``O_CREAT | O_EXCL | O_NOFOLLOW``. SQLite
then opens it without the right to create (``mode=rw``), and :func:`confirmed`
checks the file it opened is the one checked (SQLite's own resolved name and
the inode), so a link swapped in between is never written either. SQLite
opens its journal with ``O_NOFOLLOW`` itself; a link planted there fails the
write, and the index is rebuilt like a corrupt one.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from hopper.store.atomic import displace
from hopper.store.layout import Layout, NotARealFolder, open_folder

INDEX_FILE = "index.sqlite"
SIDE_FILES = ("-journal", "-wal", "-shm")


def _warn(message: str, *args: object) -> None:
    """Rare (a planted link); logging loads only then, so ``hopper status`` starts light."""
    import logging

    logging.getLogger("hopper.store.index").warning(message, *args)


@dataclass(frozen=True)
class IndexFile:
    """A checked index file: its path and the identity it had when checked."""

    path: Path
    dev: int
    ino: int
    owners: frozenset[int]  # uids it may belong to: ours, and the owner of .hopper

    def uri(self) -> str:
        """SQLite's name for it: read-write, never created by SQLite."""
        name = str(self.path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
        return f"file:{name}?mode=rw"


def checked(layout: Layout) -> IndexFile | None:
    """The index file, made or moved aside as needed (see the module doc); None when
    ``.hopper`` is not a real folder or cannot be written (use memory). Raises the
    ``OSError`` of a failed ``mkdir`` of the root (PermissionError: memory too)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    try:
        dir_fd = open_folder(layout.root, (layout.state_dir.name,), create=True)
    except NotARealFolder as exc:
        _warn("%s; the status index is kept in memory", exc.render().replace("\n", " "))
        return None
    try:
        owners = frozenset({os.geteuid(), os.fstat(dir_fd).st_uid})
        aside = [_displace_foreign(dir_fd, INDEX_FILE + s, owners) for s in ("", *SIDE_FILES)]
        moved = [a for a in aside if a]
        if moved:
            _warn(
                "index %s: %s; moved aside (never followed), the index is rebuilt beside it",
                layout.state_dir / INDEX_FILE,
                "; ".join(moved),
            )
        try:
            fd = os.open(
                INDEX_FILE,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=dir_fd,
            )
            os.close(fd)
        except FileExistsError:
            pass
        st = os.stat(INDEX_FILE, dir_fd=dir_fd, follow_symlinks=False)
        if not _ours(st, owners):
            return None  # swapped again this instant: not worth a fight, use memory
        return IndexFile(layout.state_dir / INDEX_FILE, st.st_dev, st.st_ino, owners)
    except PermissionError:
        return None  # a root we may read but not write (another user's): memory
    finally:
        os.close(dir_fd)


def confirmed(conn: sqlite3.Connection, index: IndexFile) -> bool:
    """True if ``conn`` opened the checked file itself: SQLite resolved no link on the
    way, and the name still holds the inode checked, regular and ours."""
    rows = conn.execute("PRAGMA database_list").fetchall()
    opened = next((row[2] for row in rows if row[1] == "main"), "")
    if opened != os.path.join(os.path.realpath(index.path.parent), index.path.name):
        return False
    try:
        st = os.lstat(index.path)
    except OSError:
        return False
    return _ours(st, index.owners) and (st.st_dev, st.st_ino) == (index.dev, index.ino)


def _ours(st: os.stat_result, owners: frozenset[int]) -> bool:
    """A regular file with one name, owned by us or by the owner of ``.hopper`` (the
    watcher's user, when another user or root asks): one hopper made."""
    return stat.S_ISREG(st.st_mode) and st.st_uid in owners and st.st_nlink == 1


def _displace_foreign(dir_fd: int, name: str, owners: frozenset[int]) -> str:
    """Rename ``name`` aside unless it is missing or :func:`_ours`; what it was, or ""."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return ""
    if _ours(st, owners):
        return ""
    if stat.S_ISLNK(st.st_mode):
        what = f"{name} is a symbolic link (to {os.readlink(name, dir_fd=dir_fd)})"
    elif not stat.S_ISREG(st.st_mode):
        what = f"{name} is not a regular file"
    elif st.st_uid not in owners:
        what = f"{name} belongs to uid {st.st_uid}, neither us nor the owner of the folder"
    else:
        what = f"{name} has {st.st_nlink} hard links (a name of a file elsewhere)"
    return f"{what}, now {displace(name, dir_fd)}"
