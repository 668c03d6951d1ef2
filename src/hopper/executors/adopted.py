"""Adopted supervisors (not our children), watched through pidfds.

After a restart (or a SIGHUP re-exec) the running jobs' supervisors are not
children the fork server reports on, so each sweep had to ask, for every
adopted job, whether its supervisor still runs (pid + start time: three
reads under /proc) and whether exit.json had appeared (an open): at 1,000
adopted jobs, twice a second, most of the watcher's CPU. A pidfd
(``pidfd_open``, Linux 5.3) becomes readable when its process exits, so one
``poll`` tells which of them ended; a live one costs nothing more.

The pidfd is opened first and the pid + start time checked after, so a pid
reused before the open is seen for what it is (gone). Where a pidfd cannot be
had (an old kernel, EMFILE, another host's job) the job is not watched here
and its executor asks as before; a pidfd already readable, or a pid found
gone, answers "ended" at once.
"""

from __future__ import annotations

import errno
import logging
import os
import select
from collections.abc import Collection

from hopper.proc import identity

log = logging.getLogger(__name__)


class AdoptedWatch:
    """Job id -> the pidfd of its adopted supervisor; :meth:`ended` in one poll."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._ids: dict[int, str] = {}
        self._gone: set[str] = set()  # found gone when watched (no fd kept)
        self._unwatchable: set[str] = set()  # no pidfd to be had: asked the old way
        self._poll = select.poll()
        self._why_not: str | None = None  # the first reason pidfds failed, said once

    def __bool__(self) -> bool:
        """Anything looked after (a fresh watcher's forked jobs leave this empty)."""
        return bool(self._fds or self._gone or self._unwatchable)

    def watching(self, job_id: str) -> bool:
        return job_id in self._fds or job_id in self._gone

    def watch(self, job_id: str, pid: int | None, started: float | None) -> bool:
        """Watch ``job_id``'s supervisor; False if it cannot be (ask it the old way)."""
        if self.watching(job_id) or job_id in self._unwatchable:
            return self.watching(job_id)
        if pid is None or started is None:
            self._unwatchable.add(job_id)
            return False
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._gone.add(job_id)
            return True
        except OSError as exc:
            if self._why_not is None:
                self._why_not = exc.strerror
                log.info("adopted supervisors are checked by pid each sweep: %s", exc.strerror)
            if exc.errno != errno.EMFILE:
                self._unwatchable.add(job_id)  # EMFILE may pass: tried again next sweep
            return False
        if not identity.is_alive(pid, started):  # gone, or the pid is someone else's now
            os.close(fd)
            self._gone.add(job_id)
            return True
        self._fds[job_id] = fd
        self._ids[fd] = job_id
        self._poll.register(fd, select.POLLIN)
        return True

    def ended(self) -> set[str]:
        """The watched jobs whose supervisor has exited (one ``poll``, no wait)."""
        done = set(self._gone)
        if self._fds:
            for fd, _ in self._poll.poll(0):
                job_id = self._ids.get(fd)
                if job_id is not None:
                    done.add(job_id)
        return done

    def drop(self, job_id: str) -> None:
        """``job_id`` is looked after no more (ended, handed over, forgotten)."""
        self._gone.discard(job_id)
        self._unwatchable.discard(job_id)
        fd = self._fds.pop(job_id, None)
        if fd is not None:
            del self._ids[fd]
            self._poll.unregister(fd)
            os.close(fd)

    def keep_only(self, job_ids: Collection[str]) -> None:
        """Drop every job not in ``job_ids`` (the executor's jobs now)."""
        for job_id in [j for j in (*self._fds, *self._gone, *self._unwatchable)]:
            if job_id not in job_ids:
                self.drop(job_id)

    def close(self) -> None:
        for job_id in list(self._fds):
            self.drop(job_id)
        self._gone.clear()
        self._unwatchable.clear()
