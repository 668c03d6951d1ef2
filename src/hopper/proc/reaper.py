"""The supervisor's children: the job it forked and everything below it, reaped and ended.

The supervisor is a child subreaper, so every descendant of the job,
including one that called setsid and was orphaned, stays below it, and the
tree is empty exactly when ``waitpid`` says it has no children. Ending a tree
is a loop, not one sweep (:meth:`Reaper.kill_all`): a process that forks and
exits over and over is always one step ahead of a single scan of /proc.
Signals are blocked and waited for (:meth:`Reaper.wait`), never handled.

Every child is reaped with ``wait4``, whose resource usage is that child's and
its reaped descendants': summed (CPU) and maxed (peak RSS) over the children
reaped for this job, they are the job's own figures (what the process's
RUSAGE_CHILDREN would say only if it had never reaped anything else).
``os.wait4`` imports the ``resource`` module (its ``struct_rusage``) on each
call; imported here, it is loaded once in the fork server, before it forks,
not in each supervisor (a first import there cost ~0.3 MB of private memory
per supervisor, docs/performance.md).
Standard library only, like the supervisor that loads it by path.
"""

from __future__ import annotations

import os
import resource  # noqa: F401 - os.wait4 imports it on every call (its struct_rusage)
import signal
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from hopper.proc import proctree
else:  # run by path under -I -S: a sibling (supervise.py put this directory on sys.path)
    import proctree

END_BUDGET = 30.0  # seconds of SIGKILL rounds before the supervisor gives up on a process
WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


class Reaper:
    def __init__(self) -> None:
        self.pid = 0  # the job, once forked: the leader of its process group
        self.status: int | None = None  # the job's wait status, once reaped
        self.escaped = 0  # processes still alive when END_BUDGET ran out
        self.leftovers_killed = 0  # processes the job left running when it exited
        self.reaped_cpu = 0.0  # CPU seconds of the children reaped (user + system)
        self.reaped_maxrss = 0  # the largest peak RSS among them, in bytes

    def _reap_one(self) -> int:
        """One child that exited, reaped and counted: its pid, 0 if none has exited
        yet; ChildProcessError if there is no child at all."""
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid:
            self.reaped_cpu += usage.ru_utime + usage.ru_stime
            self.reaped_maxrss = max(self.reaped_maxrss, usage.ru_maxrss * 1024)
            if pid == self.pid:
                self.status = status
        return pid

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self, budget: float = END_BUDGET) -> int:
        """SIGKILL everything below us, scan again, until we have no child left.

        One sweep is not enough: a process that forks and exits in a loop has
        a new pid by the time a scan's pid is signalled, and a scan may miss
        it altogether. What cannot miss it is waitpid: we are a subreaper, so
        every process of the tree has an ancestor that is our child, and the
        tree is empty exactly when waitpid says we have no children. Returns
        how many distinct processes were signalled; ``self.escaped`` counts
        what was still alive when ``budget`` seconds ran out.
        """
        killed: set[int] = set()
        end = time.monotonic() + budget
        while self.has_children():
            victims = set(proctree.descendants())
            if time.monotonic() >= end:
                self.escaped = max(1, len(victims))
                break
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed |= victims
            if not victims or victims <= killed - victims:
                # Dying (SIGKILLed, not yet reaped): a moment for their SIGCHLD.
                self.wait(time.monotonic() + 0.002)
        return len(killed)

    def has_children(self) -> bool:
        """Reap what exited; True while any child of ours (so any descendant) lives."""
        while True:
            try:
                if not self._reap_one():
                    return True
            except ChildProcessError:
                return False

    def reap(self) -> None:
        while True:
            try:
                if not self._reap_one():
                    return
            except ChildProcessError:
                return

    def wait(self, until: float | None) -> int | None:
        """Wait for a watched signal until the monotonic deadline ``until``."""
        timeout = None if until is None else max(0.0, until - time.monotonic())
        if timeout is None:
            info = signal.sigwaitinfo(WATCHED)
            return info.si_signo
        info_or_none = signal.sigtimedwait(WATCHED, timeout)
        return None if info_or_none is None else info_or_none.si_signo

    def end_leftovers(self, grace: float) -> int | None:
        """The job exited; end whatever it left running (TERM, grace, KILL).

        None when it left nothing; else how many processes the kill rounds
        signalled (``leftovers_killed``: how many were found running).
        """
        if not self.has_children():
            return None
        victims = proctree.descendants()
        self.leftovers_killed = max(1, len(victims))  # a scan can miss a hopping process
        for pid in victims:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        while self.has_children() and time.monotonic() < end:
            self.wait(min(end, time.monotonic() + 0.05))
        killed = self.kill_all()
        self.reap()
        return killed
