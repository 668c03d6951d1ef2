"""Reading ahead when the disk is slow: a cold build's files brought into the page cache.

On a root read for the first time in a while (or a VM whose idle page cache is
given back to the host), each job.json the cold build reads waits on the disk,
one request at a time: ~0.5 ms a file, 50 s for 100,000. So the reader watches
its first :data:`SAMPLE` files; if they waited (wall time beyond the thread's
CPU time) more than :data:`SLOW` seconds each, :class:`ReadAhead` starts
:data:`THREADS` threads that read the files the reader will read next, many
requests in flight, and throw the data away. The reader still reads and checks
every file itself, in its own order (``index_row.read_row``); a read ahead only
makes that read a page-cache hit. On a warm cache nothing starts.

A thread touches exactly what the reader will: prompt.md (``lstat``), job.json
through ``read_job_file`` (``lstat`` first, never a link followed, a FIFO or
device opened, at most 4 MiB), and the ``processed_path`` job.json names
(``lstat`` only, whatever it names). Errors are the reader's business: ignored.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING

from hopper.store.jobfile import JOB_FILE, PROMPT_FILE
from hopper.store.jobread import read_job_file
from hopper.store.saferead import UnreadableFile

if TYPE_CHECKING:
    import threading

THREADS = 8
SAMPLE = 256  # files read before judging whether reads wait on the disk
SLOW = 300e-6  # seconds a file waited, on average, that say they do
_PROCESSED = re.compile(rb'"processed_path":\s*"([^"\\]+)"')


class Watch:
    """Judges, after :data:`SAMPLE` files, whether a reader's files come from the disk."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.thread_time()

    def slow(self) -> bool:
        waited = (time.perf_counter() - self.wall) - (time.thread_time() - self.cpu)
        return waited > SAMPLE * SLOW


class Ahead:
    """A reader's companion over ``names``, read in that order: call :meth:`step` before
    each; after :data:`SAMPLE` of them, it starts a :class:`ReadAhead` if they waited on
    the disk. Use ``with``: leaving stops the threads."""

    def __init__(self, root: str, runs: str, names: list[str]) -> None:
        self.root = root
        self.runs = runs
        self.names = names
        self.done = 0
        self.watch = Watch() if len(names) > 2 * SAMPLE else None
        self.reader: ReadAhead | None = None

    def step(self) -> None:
        if self.watch is not None and self.done == SAMPLE:
            if self.watch.slow():
                self.reader = ReadAhead(self.root, self.runs, self.names, self.done)
            self.watch = None
        self.done += 1

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.reader is not None:
            self.reader.close()


class ReadAhead:
    """Threads reading ``names[start:]``'s files ahead of the reader; :meth:`close` them."""

    def __init__(self, root: str, runs: str, names: list[str], start: int) -> None:
        import threading  # here: `hopper status` starts without it

        self.root = root
        self.runs = runs
        self.names = names
        self.next = start
        self.lock: threading.Lock = threading.Lock()
        self.stopped = False
        self.threads: list[threading.Thread] = [
            threading.Thread(target=self._run, daemon=True) for _ in range(THREADS)
        ]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stopped = True
        for thread in self.threads:
            thread.join()

    def _run(self) -> None:
        while not self.stopped:
            with self.lock:
                i = self.next
                self.next += 1
            if i >= len(self.names):
                return
            warm(self.root, f"{self.runs}/{self.names[i]}")


def warm(root: str, run_dir: str) -> None:
    """Touch what ``read_row`` will read of ``run_dir``, so that it is in memory."""
    try:
        os.lstat(f"{run_dir}/{PROMPT_FILE}")
    except (OSError, ValueError):
        pass
    try:
        data = read_job_file(f"{run_dir}/{JOB_FILE}")[0]
    except (OSError, ValueError, UnreadableFile):
        return
    found = _PROCESSED.search(data)
    if found:
        try:
            os.lstat(os.path.join(root, os.fsdecode(found.group(1))))
        except (OSError, ValueError):
            pass
