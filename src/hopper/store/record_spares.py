"""Record files retired by finished jobs, kept for the next job's first record.

Theory of operation. A job's records live in two files (store/standby.py):
job.json and its standby. When the job ends, one of them stays as its
job.json and the other used to be freed (renamed over). Creating a file is
the dearest thing the ledger does on this project's ext4 (120-570 µs of CPU,
more when the allocator is in a bad mood; a rename is 20-40 µs), and every
new job needs a file for its first record. So while a watcher runs, the
ledger moves the file a finished job no longer needs into this watcher's
folder of spares, ``.hopper/spare-records/<host>--<pid>/``, and the next new
run directory's first record is written into one of them (moved in under the
standby's name, rewritten under a write lease like any standby, so a reader
that still holds the finished job's old record keeps it whole: the lease is
refused and a fresh file is made instead).

The spares hold nothing anyone reads: a crash leaves at most :data:`KEEP`
small files in the folder, removed when a watcher with the same host and pid
starts, or by hand. A clean stop removes the folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import quote

SPARES_DIR = "spare-records"
KEEP = 32  # spares kept at most: beyond that a finished job's file is freed as before


class RecordSpares:
    """This watcher's spare record files (one folder, opened once)."""

    def __init__(self, state_dir: Path, host: str, pid: int) -> None:
        self.folder = state_dir / SPARES_DIR / f"{quote(host, safe='-_.')}--{pid}"
        if os.path.lexists(self.folder):  # a crashed watcher's with our host and pid
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._free: list[str] = []  # names in the folder, each a spare
        self._made = 0  # names given so far (each spare its own name)

    def __len__(self) -> int:
        return len(self._free)

    def keep(self, dir_fd: int, name: str) -> bool:
        """Move ``name`` (under ``dir_fd``, a file this watcher no longer needs) into
        the spares; False if there is no room or it could not be moved (it stays)."""
        if self.fd < 0 or len(self._free) >= KEEP:
            return False
        spare = str(self._made)
        try:
            os.rename(name, spare, src_dir_fd=dir_fd, dst_dir_fd=self.fd)
        except OSError:
            return False
        self._made += 1
        self._free.append(spare)
        return True

    def take(self, dir_fd: int, name: str) -> bool:
        """Move a spare to ``name`` under ``dir_fd``; False if there is none (or it is
        gone: then the caller makes a fresh file, as it would without spares)."""
        while self._free and self.fd >= 0:
            spare = self._free.pop()
            try:
                os.rename(spare, name, src_dir_fd=self.fd, dst_dir_fd=dir_fd)
            except FileNotFoundError:
                continue  # removed by hand: the next one
            except OSError:
                self._drop(spare)
                return False  # something odd at ``name`` (a directory): the caller's to clear
            return True
        return False

    def close(self) -> None:
        """Remove every spare and the folder (a clean stop)."""
        if self.fd < 0:
            return
        for spare in self._free:
            self._drop(spare)
        self._free.clear()
        os.close(self.fd)
        self.fd = -1
        try:
            os.rmdir(self.folder)
        except OSError:
            pass  # not empty (a file put there by hand), or gone

    def _drop(self, spare: str) -> None:
        try:
            os.unlink(spare, dir_fd=self.fd)
        except OSError:
            pass
