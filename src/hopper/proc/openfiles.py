"""Which of some files a process holds open for writing, read from /proc."""

from __future__ import annotations

import os
from pathlib import Path

_WRITE_MODES = os.O_WRONLY | os.O_RDWR


def open_for_writing(paths: set[Path], proc: Path = Path("/proc")) -> set[Path] | None:
    """The subset of ``paths`` open for writing by some process.

    None when some process's descriptors could not be read (another user's,
    without privilege): the caller must then not conclude "nobody writes".
    """
    wanted = {str(p) for p in paths}
    found: set[Path] = set()
    complete = True
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        fd_dir = proc / pid / "fd"
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            complete = False
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target in wanted and _writable(proc / pid / "fdinfo" / fd):
                found.add(Path(target))
    if found or complete:
        return found
    return None


def _writable(fdinfo: Path) -> bool:
    try:
        for line in fdinfo.read_text().splitlines():
            if line.startswith("flags:"):
                return bool(int(line.split()[1], 8) & _WRITE_MODES)
    except (OSError, ValueError, IndexError):
        return True  # unknown: assume the worst
    return True
