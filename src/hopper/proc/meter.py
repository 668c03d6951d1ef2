"""What a job's process tree uses, and whether it is past one of its limits.

Every ``sample_interval`` the supervisor measures the tree (CPU, RSS, job.log
growth; see :meth:`Meter.sample`) into ``resources.json`` for the watcher's
heartbeat, and ends the tree the same way as a stop when its RSS passes
``memory_max`` or job.log passes ``output_max`` (:meth:`Meter.over_limit`);
``exit.json`` then names the ``limit`` and carries the final figures
(:meth:`Meter.final_figures`). With ``idle_timeout`` (bash jobs; an agent's
driver judges idleness from its stream itself) a job.log that has not grown
for that long ends the tree like a timeout (:meth:`Meter.idle_check`).

job.log is measured and cut through the supervisor's own descriptor, so
renaming, deleting or replacing job.log neither hides output from
``output_max`` nor points the cut elsewhere. Standard library only, like the
supervisor that loads it by path.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING or __package__:
    from hopper.proc import proctree
    from hopper.proc.rundir import RunDir, Stamp
else:  # run by path under -I -S: siblings (supervise.py put this directory on sys.path)
    import proctree
    from rundir import RunDir, Stamp

RESOURCES_FILE = "resources.json"
REWRITE_EVERY = 30  # unchanged figures are rewritten anyway every this many samples
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

Figures = dict[str, int | float | None]


class Note(Protocol):
    """Append an event to events.jsonl, ignoring a full disk (the supervisor's safe_event)."""

    def __call__(self, name: str, **fields: object) -> None: ...


class Meter:
    def __init__(
        self,
        files: RunDir,
        memory_max: int | None,
        output_max: int | None,
        idle_timeout: float | None,
        note: Note,
    ) -> None:
        self.files = files
        self.memory_max = memory_max
        self.output_max = output_max
        self.idle_timeout = idle_timeout
        self.note = note
        self.log_fd = -1  # the supervisor's own descriptor of job.log, kept open
        self.log_start = 0  # job.log's size when the job started: output is what it adds
        self.idle_size = -1  # job.log's size at the last idle check
        self.active_at = 0.0  # monotonic time job.log last grew (or the job started)
        self.cpu = 0.0
        self.rss = 0
        self.peak_rss = 0
        self.processes = 0
        self.samples = 0
        self.written = b""  # resources.json as last written here
        self.stamp: Stamp | None = None  # and that file as we left it (RunDir.touch)
        self.touched = 0  # samples since it was last written, only touched

    def watch_log(self, log_fd: int) -> None:
        """Measure output on ``log_fd`` (job.log, opened for the job), from its size now."""
        self.log_fd = log_fd
        self.log_start = os.fstat(log_fd).st_size

    def sample(self, reaped_cpu: float = 0.0, reaped_maxrss: int = 0) -> None:
        """Measure the tree: CPU (exited processes included), RSS, output; publish it.

        CPU of a process that exited and was reaped lands in its reaper's
        cutime/cstime; the supervisor, a subreaper, reaps the job and every
        orphan, and adds up what ``wait4`` said of each (``reaped_cpu``,
        ``reaped_maxrss``: proc/reaper.py), which covers what the live tree
        no longer shows. Zombies still hold their own times, so they count
        until reaped.
        """
        procs = proctree.tree()
        if procs is None:
            procs = proctree.scan()
            procs = {pid: procs[pid] for pid in proctree.below(procs, zombies=True)}
        ticks = rss_pages = live = 0
        for fields in procs.values():
            try:
                ticks += sum(
                    int(fields[i])
                    for i in (proctree.UTIME, proctree.STIME, proctree.CUTIME, proctree.CSTIME)
                )
                if fields[proctree.STATE] != b"Z":
                    rss_pages += int(fields[proctree.RSS])
                    live += 1
            except (IndexError, ValueError):
                continue
        cpu = ticks / CLK_TCK + reaped_cpu
        self.cpu = max(self.cpu, cpu)  # a counter: never goes back
        self.rss = rss_pages * PAGE_SIZE
        self.peak_rss = max(self.peak_rss, self.rss, reaped_maxrss)
        self.processes = live
        self.samples += 1
        self.write_resources(live=True)

    def output_bytes(self) -> int:
        """What the job wrote, measured on the supervisor's own descriptor of job.log."""
        try:
            return max(0, os.fstat(self.log_fd).st_size - self.log_start)
        except OSError:
            return 0

    def resources(self, live: bool) -> Figures:
        figures: Figures = {
            "cpu_seconds": round(self.cpu, 3),
            "peak_rss_bytes": self.peak_rss,
            "output_bytes": self.output_bytes(),
        }
        if live:
            figures.update(rss_bytes=self.rss, processes=self.processes)
        return figures

    def write_resources(self, live: bool) -> None:
        """The live figures, replaced atomically (no fsync: they are refreshed anyway).

        Figures unchanged since the last write (a job that sleeps or waits)
        and the file still as we left it: only its mtime is moved to now
        (:meth:`RunDir.touch`), which keeps the sign of life without a new
        file and a rename every sample (1,000 waiting jobs: 1,000 fewer
        inodes made and freed a second, and 2,000 fewer inotify events in
        the watcher's ABORT watch). Every REWRITE_EVERY samples it is
        written anyway: an edit the stamp cannot see (same size, within the
        file system's timestamp granularity) lasts no longer than that.
        """
        try:
            data = json.dumps(self.resources(live)).encode() + b"\n"
            if data == self.written and self.touched < REWRITE_EVERY:
                self.stamp = self.files.touch(RESOURCES_FILE, self.stamp)
                if self.stamp is not None:
                    self.touched += 1
                    return
            self.stamp = self.files.replace(RESOURCES_FILE, data, durable=False)
            self.written, self.touched = data, 0
        except OSError:
            pass  # disk full: the figures are a convenience; exit.json carries the final ones

    def final_figures(
        self, leftovers_killed: int, reaped_cpu: float, reaped_maxrss: int
    ) -> Figures:
        """Exact once the tree is gone: every process of the job was reaped, and
        ``reaped_cpu`` and ``reaped_maxrss`` are the sum of their CPU and the
        largest of their peak RSS, from ``wait4`` (proc/reaper.py). Not the
        process's RUSAGE_CHILDREN: that counts every child it ever reaped,
        which is this job's only while a supervisor serves one job.

        Called after the supervisor ended the leftovers; only a leftover that
        SIGKILL could not end yet (uninterruptible sleep) keeps the sampled
        figure in play.
        """
        self.cpu = max(self.cpu, reaped_cpu) if leftovers_killed else reaped_cpu
        self.peak_rss = max(self.peak_rss, reaped_maxrss)
        if self.samples:  # a live file was written: leave the final figures in it
            self.write_resources(live=False)
        return self.resources(live=False)

    def over_limit(self) -> str | None:
        """Which limit the tree is past, if any (and tell events.jsonl)."""
        if self.memory_max is not None and self.rss > self.memory_max:
            self.note(
                "limit_exceeded",
                limit="memory",
                rss_bytes=self.rss,
                memory_max_bytes=self.memory_max,
                processes=self.processes,
            )
            return "memory"
        output = self.output_bytes() if self.output_max is not None else 0
        if self.output_max is not None and output > self.output_max:
            self.note(
                "limit_exceeded",
                limit="output",
                output_bytes=output,
                output_max_bytes=self.output_max,
            )
            return "output"
        return None

    def idle_check(self, now: float) -> bool:
        """True once job.log has not changed size for ``idle_timeout`` (and say so)."""
        assert self.idle_timeout is not None
        try:
            size = os.fstat(self.log_fd).st_size
        except OSError:
            size = self.idle_size
        if size != self.idle_size:
            self.idle_size, self.active_at = size, now
            return False
        if now - self.active_at < self.idle_timeout:
            return False
        self.note(
            "idle_timeout", idle_timeout_seconds=self.idle_timeout, output_bytes=self.output_bytes()
        )
        return True

    def cut_log(self) -> None:
        """After an output_limit stop: keep job.log at output_max, with a note at the end."""
        if self.output_max is None:
            return
        written = self.output_bytes()
        note = (
            f"\n[hopper] job.log cut at output_max ({self.output_max} bytes); "
            f"the job wrote {written} bytes\n"
        )
        try:  # through our own descriptor: whatever now sits at job.log's name is not cut
            os.ftruncate(self.log_fd, self.log_start + self.output_max)
            os.write(self.log_fd, note.encode())  # O_APPEND: at the new end
        except OSError:
            pass
