"""Drain a root with a real watcher in this process, counting the inodes it creates.

    python tests/inode_drive.py ROOT CONFIG     -> JSON list of [how, absolute path]

Every call that can make a file or directory is wrapped (``os.open`` and
``io.open``/``open`` with a creating mode when nothing was at the name before,
``os.mkdir``, ``os.mknod``, ``os.mkfifo``, ``os.symlink``); ``os.link`` and
renames make no inode. The watcher's threads go through the same wrappers;
the fork server, the supervisors and the jobs are other processes and are not
counted. Used by tests/test_inode_budget.py.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import sys
import threading
from typing import Any

created: list[tuple[str, str]] = []
_lock = threading.Lock()


def _where(path: Any, dir_fd: int | None) -> str:
    name = os.fsdecode(os.fspath(path))
    if dir_fd is not None and not name.startswith("/"):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
    return os.path.abspath(name)


def _note(how: str, where: str) -> None:
    with _lock:
        created.append((how, where))


real_open, real_io_open = os.open, io.open
real_mkdir, real_mknod, real_mkfifo, real_symlink = os.mkdir, os.mknod, os.mkfifo, os.symlink


def counted_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    if not flags & os.O_CREAT:
        return real_open(path, flags, mode, dir_fd=dir_fd)
    where = _where(path, dir_fd)
    was = os.path.lexists(where)
    fd = real_open(path, flags, mode, dir_fd=dir_fd)
    if not was:
        _note("open", where)
    return fd


def counted_io_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    if isinstance(file, int) or not any(c in mode for c in "wax+"):
        return real_io_open(file, mode, *args, **kwargs)
    where = _where(file, None)
    was = os.path.lexists(where)
    handle = real_io_open(file, mode, *args, **kwargs)
    if not was:
        _note("io.open", where)
    return handle


def counted_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
    real_mkdir(path, mode, dir_fd=dir_fd)
    _note("mkdir", _where(path, dir_fd))


def counted_mknod(path: Any, *args: Any, dir_fd: int | None = None, **kw: Any) -> None:
    real_mknod(path, *args, dir_fd=dir_fd, **kw)
    _note("mknod", _where(path, dir_fd))


def counted_mkfifo(path: Any, *args: Any, dir_fd: int | None = None, **kw: Any) -> None:
    real_mkfifo(path, *args, dir_fd=dir_fd, **kw)
    _note("mkfifo", _where(path, dir_fd))


def counted_symlink(src: Any, dst: Any, *args: Any, dir_fd: int | None = None, **kw: Any) -> None:
    real_symlink(src, dst, *args, dir_fd=dir_fd, **kw)
    _note("symlink", _where(dst, dir_fd))


def main() -> int:
    root, config = sys.argv[1], sys.argv[2]
    # start-up is not per job: imported before the count
    import hopper.cli.run
    import hopper.watcher  # noqa: F401
    from hopper.cli.main import main as hopper_main

    os.open, os.mkdir, os.mknod, os.mkfifo, os.symlink = (  # type: ignore[assignment]
        counted_open,
        counted_mkdir,
        counted_mknod,
        counted_mkfifo,
        counted_symlink,
    )
    io.open = builtins.open = counted_io_open  # type: ignore[assignment]
    try:
        rc = hopper_main(["run", "--until-idle", "--root", root, "--config", config])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.open, os.mkdir, os.mknod, os.mkfifo, os.symlink = (  # type: ignore[assignment]
            real_open,
            real_mkdir,
            real_mknod,
            real_mkfifo,
            real_symlink,
        )
        io.open = builtins.open = real_io_open
    print(json.dumps(created))
    return rc or 0


if __name__ == "__main__":
    raise SystemExit(main())
