"""The per-job supervisor: a small process that outlives the watcher.

Forked per job by the fork server (proc/forkserver.py, which imported this
module once), or run as ``python -I -S supervise.py RUN_DIR`` when there is
no fork server; standard library only either way, so it does not depend on
hopper's environment. The watcher talks to it over stdin/stdout (a socket
when forked, pipes when booted) for exactly one handshake:

1. watcher -> supervisor: one JSON line, the job spec
   (proc/protocol.py's ``LaunchSpec``; one that does not match it is refused
   on stderr and the supervisor exits without a pid line).
2. The supervisor forks the job, which waits at a gate before exec;
   supervisor -> watcher: ``{"pid": N}``.
3. The watcher records ``running`` with that pid in job.json, then sends
   ``go``. Anything else (or EOF: the watcher died) kills the unreleased
   job and records ``started: false``.

From then on the supervisor needs nobody. It is a child subreaper, so every
descendant of the job, including one that called setsid and was orphaned,
stays below it. It waits for the job, enforces the timeout, and on SIGTERM
or SIGINT (the watcher's "stop") sends the stop signals to the job's
process group, each followed by a grace period, then SIGKILL to every
descendant. Descendants left behind by a job that exited are ended the same
way: nothing outlives its job. Last, it writes ``exit.json`` (protocol's
``ExitRecord``) atomically and durably, and exits.

Every ``sample_interval`` it measures the tree (CPU, RSS, job.log growth; see
:meth:`Supervisor.sample`) into ``resources.json`` for the watcher's
heartbeat, and ends the tree the same way as a stop when its RSS passes
``memory_max`` or job.log passes ``output_max`` (checked every
``OUTPUT_CHECK``); ``exit.json`` then names the ``limit`` and carries the
final figures. With ``idle_timeout`` (bash jobs; an agent's driver judges
idleness from its stream itself) a job.log that has not grown for that long,
measured through the same descriptor, ends the tree like a timeout (stop
signals, grace, SIGKILL) with ``limit = "idle"``. An output limit ends the
tree with SIGKILL at once: a writer that ignores SIGTERM would otherwise keep
writing through the grace period.

Nothing the job can reach steers the supervisor's writes. Every file it
writes is opened relative to a descriptor of the run directory taken at
start (a run directory swapped for a symlink changes nothing), never through
a symlink (``O_NOFOLLOW``; a link, FIFO or directory planted at one of its
names is moved aside), and job.log is measured and cut through the
supervisor's own descriptor, so renaming, deleting or replacing job.log
neither hides output from ``output_max`` nor points the cut elsewhere. A run
directory deleted under a running job (its ``st_nlink`` drops to 0) ends the
job and the supervisor without an exit record: there is nowhere to put one.

Ending a tree is a loop, not one sweep: a process that forks and exits over
and over (changing session each time) is always one step ahead of a single
scan, so the supervisor SIGKILLs everything below it again and again until
a scan finds nothing (or ``END_BUDGET`` runs out, which exit.json records).
Spec numbers that are not finite (a NaN timeout) mean "none", never a spin.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import stat
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from hopper.proc.ladder import Action, KillTree, Ladder
    from hopper.proc.protocol import (
        DEFAULT_GRACE,
        DEFAULT_SAMPLE_INTERVAL,
        ExitRecord,
        LaunchSpec,
        ProtocolError,
        finite,
    )
else:  # run by path under -I -S: hopper is not importable, the contract is a sibling
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ladder import Action, KillTree, Ladder
    from protocol import (
        DEFAULT_GRACE,
        DEFAULT_SAMPLE_INTERVAL,
        ExitRecord,
        LaunchSpec,
        ProtocolError,
        finite,
    )

PR_SET_CHILD_SUBREAPER = 36
EXIT_FILE = "exit.json"
EVENTS_FILE = "events.jsonl"
RESOURCES_FILE = "resources.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
OUTPUT_CHECK = 0.25  # seconds between job.log size checks when output_max is set
END_BUDGET = 30.0  # seconds of SIGKILL rounds before the supervisor gives up on a process
# A sample reads every /proc/PID/stat; on a host with thousands of processes
# that costs milliseconds, so the interval stretches to keep it under 0.5% CPU.
SAMPLE_BUDGET = 200
# Fields of /proc/PID/stat after "(comm) ", 0-based: state, ppid, utime, stime,
# cutime, cstime (clock ticks; cutime/cstime: children it has reaped), rss (pages).
_STATE, _PPID, _UTIME, _STIME, _CUTIME, _CSTIME, _RSS = 0, 1, 11, 12, 13, 14, 21
WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
STOP_REQUESTS = {signal.SIGTERM, signal.SIGINT}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


def _bytes(value: int | None) -> int | None:
    """A byte limit from the spec; a negative one means none."""
    return None if value is None or value < 0 else value


class Supervisor:
    def __init__(self, run_dir: str, spec: LaunchSpec) -> None:
        self.run_dir = run_dir
        # Every write goes through this descriptor: a run directory replaced by a
        # symlink after the start cannot redirect them.
        self.dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.argv = list(spec.argv)
        self.cwd = spec.cwd
        self.env = dict(spec.env)
        self.log = spec.log
        self.log_fd = -1  # the supervisor's own descriptor of job.log, kept open
        self.stop_signals = list(spec.stop_signals)
        grace = finite(spec.grace)
        self.grace = DEFAULT_GRACE if grace is None else grace
        self.timeout = finite(spec.timeout)
        self.memory_max = _bytes(spec.memory_max)
        self.output_max = _bytes(spec.output_max)
        interval = finite(spec.sample_interval)
        self.sample_interval = interval if interval else DEFAULT_SAMPLE_INTERVAL
        idle = finite(spec.idle_timeout)
        self.idle_timeout = idle if idle else None  # 0 or absent: no idle limit
        self.idle_size = -1  # job.log's size at the last idle check
        self.active_at = 0.0  # monotonic time job.log last grew (or the job started)
        self.limit: str | None = None  # "memory", "output" or "idle" once one stopped the tree
        self.log_start = 0  # job.log's size when the job started: output is what it adds
        self.cpu = 0.0
        self.rss = 0
        self.peak_rss = 0
        self.processes = 0
        self.samples = 0
        self.pid = 0
        self.status: int | None = None
        self.timed_out = False
        self.stop_signal_sent = False
        self.leftovers_killed = 0
        self.escaped = 0  # processes still alive when END_BUDGET ran out

    # -- files: relative to the run directory's descriptor, never through a link --
    def gone(self) -> bool:
        """True once the run directory was deleted (its last link is gone)."""
        try:
            return os.fstat(self.dir_fd).st_nlink == 0
        except OSError:
            return True

    def open_regular(self, name: str, flags: int) -> int:
        """Open ``name`` in the run directory as a regular file, never through a link.

        Whatever else sits at the name (a symlink, a FIFO, a directory) is
        renamed aside to a hidden name and a fresh file is created; O_NONBLOCK
        keeps a FIFO from blocking the open.
        """
        base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(3):
            try:
                fd = os.open(name, base, 0o644, dir_fd=self.dir_fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR):
                    raise
            else:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.set_blocking(fd, True)
                    return fd
                os.close(fd)
            aside = f".{name}.displaced.{os.getpid()}.{time.monotonic_ns()}"
            os.rename(name, aside, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        raise OSError(errno.EEXIST, f"{name}: cannot be opened as a regular file")

    def open_log(self) -> int:
        """job.log: in the run directory through its descriptor (else the given path)."""
        if os.path.dirname(self.log) == self.run_dir.rstrip("/"):
            return self.open_regular(
                os.path.basename(self.log), os.O_WRONLY | os.O_APPEND | os.O_CREAT
            )
        return os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    # -- events -----------------------------------------------------------------
    def event(self, name: str, **fields: object) -> None:
        line = json.dumps({"ts": _iso(time.time()), "event": name, **fields}) + "\n"
        fd = self.open_regular(EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # -- start ------------------------------------------------------------------
    def fork_gated(self) -> tuple[int, int]:
        """Fork the job, held at a gate; returns (gate write end, error pipe read end)."""
        gate_r, gate_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        log_fd = self.log_fd = self.open_log()
        self.log_start = os.fstat(log_fd).st_size
        pid = os.fork()
        if pid == 0:  # the job, until exec
            try:
                os.close(gate_w)
                os.close(err_r)
                os.setpgid(0, 0)
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                if os.read(gate_r, 1) != b"x":
                    os._exit(125)
                os.close(gate_r)
                os.chdir(self.cwd)
                os.execvpe(self.argv[0], self.argv, self.env)  # noqa: S606 - an argv, no shell
            except BaseException as exc:
                try:
                    os.write(err_w, f"{type(exc).__name__}: {exc}".encode())
                finally:
                    os._exit(127)
        os.close(gate_r)
        os.close(err_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first
        self.pid = pid
        return gate_w, err_r

    # -- stop -------------------------------------------------------------------
    @staticmethod
    def scan() -> dict[int, list[bytes]]:
        """Every process's /proc/PID/stat fields after the command name."""
        procs: dict[int, list[bytes]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (fields := _stat_fields(name)) is not None:
                procs[int(name)] = fields
        return procs

    @staticmethod
    def tree() -> dict[int, list[bytes]] | None:
        """The stat fields of every process below us (zombies too), found through
        /proc/PID/task/TID/children: O(tree) instead of O(host), which is what
        keeps a thousand supervisors sampling cheap. None where the kernel has no
        such file (CONFIG_PROC_CHILDREN): then :meth:`scan` it is.
        """
        procs: dict[int, list[bytes]] = {}
        todo = [os.getpid()]
        while todo:
            pid = todo.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # exited meanwhile
            for tid in tids:
                try:
                    children = _read(f"/proc/{pid}/task/{tid}/children", whole=True).split()
                except OSError:
                    if not procs and pid == os.getpid():
                        return None  # our own: the kernel does not offer the file
                    continue
                for child in children:
                    fields = _stat_fields(child.decode())
                    if fields is not None and int(child) not in procs:
                        procs[int(child)] = fields
                        todo.append(int(child))
        return procs

    @staticmethod
    def below(procs: dict[int, list[bytes]], zombies: bool = False) -> list[int]:
        """The processes of ``procs`` below this supervisor (zombies too if asked)."""
        parents: dict[int, list[int]] = {}
        for pid, fields in procs.items():
            if zombies or fields[_STATE] != b"Z":
                parents.setdefault(int(fields[_PPID]), []).append(pid)
        found: list[int] = []
        todo = [os.getpid()]
        while todo:
            for child in parents.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def descendants(self) -> list[int]:
        """Every live process below this supervisor, read from /proc."""
        return self.below(self.scan())

    # -- accounting and limits --------------------------------------------------
    def sample(self) -> None:
        """Measure the tree: CPU (exited processes included), RSS, output; publish it.

        CPU of a process that exited and was reaped lands in its reaper's
        cutime/cstime; the supervisor, a subreaper, reaps the job and every
        orphan, so its RUSAGE_CHILDREN covers what the live tree no longer
        shows. Zombies still hold their own times, so they count until reaped.
        """
        procs = self.tree()
        if procs is None:
            procs = self.scan()
            procs = {pid: procs[pid] for pid in self.below(procs, zombies=True)}
        ticks = rss_pages = live = 0
        for fields in procs.values():
            try:
                ticks += sum(int(fields[i]) for i in (_UTIME, _STIME, _CUTIME, _CSTIME))
                if fields[_STATE] != b"Z":
                    rss_pages += int(fields[_RSS])
                    live += 1
            except (IndexError, ValueError):
                continue
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ticks / CLK_TCK + usage.ru_utime + usage.ru_stime
        self.cpu = max(self.cpu, cpu)  # a counter: never goes back
        self.rss = rss_pages * PAGE_SIZE
        self.peak_rss = max(self.peak_rss, self.rss, usage.ru_maxrss * 1024)
        self.processes = live
        self.samples += 1
        self.write_resources(live=True)

    def output_bytes(self) -> int:
        """What the job wrote, measured on the supervisor's own descriptor of job.log."""
        try:
            return max(0, os.fstat(self.log_fd).st_size - self.log_start)
        except OSError:
            return 0

    def resources(self, live: bool) -> dict[str, int | float | None]:
        figures: dict[str, int | float | None] = {
            "cpu_seconds": round(self.cpu, 3),
            "peak_rss_bytes": self.peak_rss,
            "output_bytes": self.output_bytes(),
        }
        if live:
            figures.update(rss_bytes=self.rss, processes=self.processes)
        return figures

    def write_resources(self, live: bool) -> None:
        """The live figures, replaced atomically (no fsync: they are refreshed anyway)."""
        tmp = f".{RESOURCES_FILE}.{os.getpid()}.tmp"
        try:
            fd = self.create_temp(tmp)
            try:
                os.write(fd, json.dumps(self.resources(live)).encode() + b"\n")
            finally:
                os.close(fd)
            os.replace(tmp, RESOURCES_FILE, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except OSError:
            # Disk full: the figures are a convenience; exit.json carries the final ones.
            try:
                os.unlink(tmp, dir_fd=self.dir_fd)
            except OSError:
                pass

    def create_temp(self, name: str) -> int:
        """A new file at ``name`` (whatever the job planted there is removed first)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, 0o644, dir_fd=self.dir_fd)
        except FileExistsError:
            os.unlink(name, dir_fd=self.dir_fd)  # a link or file planted at our temp name
            return os.open(name, flags, 0o644, dir_fd=self.dir_fd)

    def final_figures(self) -> dict[str, int | float | None]:
        """Exact once the tree is gone: every process was reaped into RUSAGE_CHILDREN.

        Called after :meth:`end_leftovers`; only a leftover that SIGKILL could
        not end yet (uninterruptible sleep) keeps the sampled figure in play.
        """
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        reaped = usage.ru_utime + usage.ru_stime
        self.cpu = max(self.cpu, reaped) if self.leftovers_killed else reaped
        self.peak_rss = max(self.peak_rss, usage.ru_maxrss * 1024)
        if self.samples:  # a live file was written: leave the final figures in it
            self.write_resources(live=False)
        return self.resources(live=False)

    def over_limit(self) -> str | None:
        """Which limit the tree is past, if any (and tell events.jsonl)."""
        if self.memory_max is not None and self.rss > self.memory_max:
            self.safe_event(
                "limit_exceeded",
                limit="memory",
                rss_bytes=self.rss,
                memory_max_bytes=self.memory_max,
                processes=self.processes,
            )
            return "memory"
        output = self.output_bytes() if self.output_max is not None else 0
        if self.output_max is not None and output > self.output_max:
            self.safe_event(
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
        self.safe_event(
            "idle_timeout", idle_timeout_seconds=self.idle_timeout, output_bytes=self.output_bytes()
        )
        return True

    def safe_event(self, name: str, **fields: object) -> None:
        try:
            self.event(name, **fields)
        except OSError:
            pass  # disk full: exit.json (retried until it lands) still says which limit

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
            victims = set(self.descendants())
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
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.pid:
                self.status = status

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = status

    def wait(self, until: float | None) -> int | None:
        """Wait for a watched signal until the monotonic deadline ``until``."""
        timeout = None if until is None else max(0.0, until - time.monotonic())
        if timeout is None:
            info = signal.sigwaitinfo(WATCHED)
            return info.si_signo
        info_or_none = signal.sigtimedwait(WATCHED, timeout)
        return None if info_or_none is None else info_or_none.si_signo

    def run(self) -> None:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        ladder = Ladder(grace=self.grace)
        # The first measurement after one interval: a short job costs no /proc walk
        # (its final figures come from RUSAGE_CHILDREN).
        next_sample = time.monotonic() + self.sample_interval
        next_check = None if self.output_max is None else next_sample + OUTPUT_CHECK
        next_idle, idle_step = None, 1.0
        if self.idle_timeout is not None:
            self.active_at = time.monotonic()
            idle_step = min(1.0, max(0.05, self.idle_timeout / 10))
            next_idle = self.active_at + idle_step
        while self.status is None:
            until = ladder.due if ladder.stopping else deadline
            checks = (next_sample,) if ladder.stopping else (next_sample, next_check, next_idle)
            sig = self.wait(_earliest(until, *checks))
            self.reap()
            if self.status is not None:
                break
            now = time.monotonic()
            limit = None
            if not ladder.stopping and sig is None and self.gone():
                sig = signal.SIGTERM  # the run directory was deleted: stop, nothing to record
            sampled = now >= next_sample
            if sampled:
                cost = time.process_time()
                self.sample()
                cost = time.process_time() - cost
                next_sample = now + max(self.sample_interval, SAMPLE_BUDGET * cost)
            checked = next_check is not None and (sampled or now >= next_check)
            if checked:
                next_check = now + OUTPUT_CHECK
            if not ladder.stopping and sig not in STOP_REQUESTS and (sampled or checked):
                limit = self.over_limit()
            if next_idle is not None and now >= next_idle:
                next_idle = now + idle_step
                if limit is None and not ladder.stopping and sig not in STOP_REQUESTS:
                    limit = "idle" if self.idle_check(now) else None
            begin_stop = not ladder.stopping and (
                sig in STOP_REQUESTS
                or limit is not None
                or (deadline is not None and now >= deadline)
            )
            if begin_stop:
                if limit is not None:
                    self.limit = limit
                elif sig not in STOP_REQUESTS:
                    self.timed_out = True
                    self.safe_event("timeout", timeout_seconds=self.timeout)
                # An output limit is SIGKILL at once: a writer that ignores
                # SIGTERM would fill the disk during the grace period.
                ladder = ladder.begin(now, self.stop_signals, at_once=limit == "output")
            ladder, action = ladder.step(now)
            if action is not None:
                self.act(action)
        self.end_leftovers()

    def act(self, action: Action) -> None:
        """Perform one step of the stop ladder."""
        self.stop_signal_sent = True
        if isinstance(action, KillTree):
            self.signal_group(signal.SIGKILL)
            killed = self.kill_all()
            self.safe_event("signal_sent", signal="SIGKILL", processes=killed)
        else:
            self.signal_group(action.signal)
            self.safe_event(
                "signal_sent", signal=signal.Signals(action.signal).name, target="process group"
            )

    def end_leftovers(self) -> None:
        """The job exited; end whatever it left running (TERM, grace, KILL)."""
        if not self.has_children():
            return
        victims = self.descendants()
        self.leftovers_killed = max(1, len(victims))  # a scan can miss a hopping process
        for pid in victims:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + self.grace
        while self.has_children() and time.monotonic() < end:
            self.wait(min(end, time.monotonic() + 0.05))
        killed = self.kill_all()
        self.safe_event(
            "leftovers_ended", processes=self.leftovers_killed, killed=killed, escaped=self.escaped
        )
        self.reap()

    # -- exit record ------------------------------------------------------------
    def record(
        self,
        started: bool,
        error: str | None = None,
        resources: dict[str, int | float | None] | None = None,
    ) -> None:
        code = sig = None
        if self.status is not None:
            if os.WIFEXITED(self.status):
                code = os.WEXITSTATUS(self.status)
            elif os.WIFSIGNALED(self.status):
                sig = os.WTERMSIG(self.status)
        record = ExitRecord(
            started=started,
            supervisor_pid=os.getpid(),
            pid=self.pid or None,
            exit_code=code,
            signal=sig,
            timed_out=self.timed_out,
            stop_signal_sent=self.stop_signal_sent,
            leftovers_killed=self.leftovers_killed,
            escaped=self.escaped,
            limit=self.limit,
            resources=resources,
            error=error,
            finished_at=_iso(time.time()),
        )
        data = record.to_json().encode() + b"\n"
        delay = 0.1
        while True:
            if self.gone():
                # Deleted under us: no record can land, and the watcher files the
                # job lost by itself; retrying would only spin.
                sys.stderr.write(f"hopper supervisor {self.run_dir}: run directory deleted\n")
                return
            try:
                self._write_exit(data)
                break
            except OSError as exc:
                # Disk full or a transient I/O error: the exit status is the one
                # thing recovery cannot reconstruct, so keep trying until it lands.
                sys.stderr.write(
                    f"hopper supervisor {self.run_dir}: cannot write exit.json: {exc}; retrying\n"
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _write_exit(self, data: bytes) -> None:
        tmp = f".{EXIT_FILE}.{os.getpid()}.tmp"
        fd = self.create_temp(tmp)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=self.dir_fd)
            raise
        os.close(fd)
        os.replace(tmp, EXIT_FILE, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        os.fsync(self.dir_fd)


def _read(path: str, whole: bool = False) -> bytes:
    """A /proc file: one read (a stat line fits), or with ``whole`` until EOF."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
        while whole and data and (more := os.read(fd, 65536)):
            data += more
        return data
    finally:
        os.close(fd)


def _stat_fields(pid: str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name; None if the process is gone."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _earliest(*deadlines: float | None) -> float | None:
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


_libc: ctypes.CDLL | None = None


def warm() -> None:
    """Load what every supervisor needs, once: the fork server calls this before forking."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)


def _become_subreaper() -> None:
    warm()
    assert _libc is not None
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def main(argv: list[str]) -> int:
    """Booted as ``supervise.py RUN_DIR``: the spec is the first line of stdin."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    line = sys.stdin.readline()
    if not line:
        return 0  # the watcher went away before sending a spec
    return serve(parse(line), argv[1] if len(argv) > 1 else None)


def parse(line: str | bytes) -> LaunchSpec | ProtocolError:
    """The spec, or what is wrong with it (the fork server parses before it forks)."""
    try:
        return LaunchSpec.from_json(line)
    except ProtocolError as exc:
        return exc


def serve(spec: LaunchSpec | ProtocolError, default_run_dir: str | None = None) -> int:
    """Supervise the job of ``spec``; stdin/stdout carry the rest of the handshake."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    if isinstance(spec, ProtocolError):
        sys.stderr.write(f"hopper supervisor: {spec}\n")
        return 2  # the watcher sees the handshake broken (no pid line)
    # A forked supervisor learns its run directory with the spec; it then
    # moves into it, which is how a restarted watcher finds it (its cwd).
    run_dir = spec.run_dir or default_run_dir
    if run_dir is None:
        sys.stderr.write("hopper supervisor: the launch spec names no run_dir\n")
        return 2
    os.chdir(run_dir)
    sup = Supervisor(run_dir, spec)
    _become_subreaper()
    gate_w, err_r = sup.fork_gated()
    sys.stdout.write(json.dumps({"pid": sup.pid}) + "\n")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip()
    # Detach from the watcher: nothing below may depend on it being alive.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if answer != "go":
        os.close(gate_w)
        os.kill(sup.pid, signal.SIGKILL)
        os.waitpid(sup.pid, 0)
        sup.status = None
        # Not an error: the job never ran, so recovery may start it again.
        sup.record(started=False)
        return 0
    os.write(gate_w, b"x")
    os.close(gate_w)
    error = os.read(err_r, 4096).decode(errors="replace")
    os.close(err_r)
    if error:
        os.waitpid(sup.pid, 0)
        sup.record(started=False, error=error)
        return 0
    sup.run()
    figures = sup.final_figures()
    if sup.limit == "output":
        sup.cut_log()
    sup.record(started=True, resources=figures)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
