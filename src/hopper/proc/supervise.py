"""The per-job supervisor: a small process that outlives the watcher.

Forked by the fork server (proc/forkserver.py, which imported this module
once and may give one supervisor job after job, one at a time), or run as
``python -I -S supervise.py RUN_DIR`` when there is no fork server (one job,
then it exits); standard library only either way, so it does not depend on
hopper's environment. The watcher talks to it over stdin/stdout (a socket
when forked, pipes when booted) for exactly one handshake per job:

1. watcher -> supervisor: one JSON line, the job spec
   (proc/protocol.py's ``LaunchSpec``; one that does not match it is refused
   on stderr and the supervisor exits without a pid line).
2. The supervisor starts the job's process (proc/gate.py: spawned, or
   forked), which waits at a gate before exec; supervisor -> watcher:
   ``{"pid": N}``.
3. The watcher records ``running`` with that pid in job.json, then sends
   ``go`` and the supervisor opens the gate. Meanwhile (right after its pid
   line) the supervisor has written the job's own files (``LaunchSpec.files``:
   its script.sh, made from admission.json, not fsynced) and made its working
   directory when that is the run directory's ``work/`` (``make_cwd``); one it
   cannot write or make refuses the job at the ``go``, exit.json saying why.
   Anything else
   (or EOF: the watcher died) kills the unreleased job and records
   ``started: false``.

From then on the supervisor needs nobody. It is a child subreaper, so every
descendant of the job, including one that called setsid and was orphaned,
stays below it. It waits for the job, enforces the timeout, and on SIGTERM
or SIGINT (the watcher's "stop") sends the stop signals to the job's
process group, each followed by a grace period, then SIGKILL to every
descendant. Descendants left behind by a job that exited are ended the same
way: nothing outlives its job. Last, it writes ``exit.json`` (protocol's
``ExitRecord``) atomically and durably, and exits (or, given it by the fork
server, waits for its next job there: :func:`serve` returns, saying whether
the job is done, :class:`Served`).

Every ``sample_interval`` it measures the tree into ``resources.json`` and
ends the tree the same way as a stop when it passes ``memory_max`` or
``output_max``, or (``idle_timeout``) when job.log stops growing; see
proc/meter.py. An output limit ends the tree with SIGKILL at once: a writer
that ignores SIGTERM would otherwise keep writing through the grace period.

Nothing the job can reach steers the supervisor's writes: each is relative
to a descriptor of the run directory taken at start, never through a link
(proc/rundir.py). A run directory deleted under a running job ends the job
and the supervisor without an exit record: there is nowhere to put one.

Ending a tree is a loop, not one sweep: a process that forks and exits over
and over (changing session each time) is always one step ahead of a single
scan, so the supervisor SIGKILLs everything below it (found in /proc:
proc/proctree.py) again and again until a scan finds nothing (or
``END_BUDGET`` runs out, which exit.json records). Spec numbers that are not
finite (a NaN timeout) mean "none", never a spin.

Its siblings are standard library only too, and imported as plain modules
when it runs by path: protocol (the spec and exit.json), gate (the job's
process until its release), ladder (the stop escalation), reaper (its
children, reaped and ended), proctree (/proc), meter (figures and limits) and
rundir (its writes).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py's wrappers convert to enums
import ctypes
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from hopper.proc import gate
    from hopper.proc.gate import Gated
    from hopper.proc.ladder import Action, KillTree, Ladder, stop_now
    from hopper.proc.meter import Figures, Meter
    from hopper.proc.protocol import (
        DEFAULT_GRACE,
        DEFAULT_SAMPLE_INTERVAL,
        ExitRecord,
        LaunchSpec,
        ProtocolError,
        finite,
    )
    from hopper.proc.reaper import WATCHED, Reaper
    from hopper.proc.rundir import RunDir
else:  # run by path under -I -S: hopper is not importable, the contract is a sibling
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gate
    from gate import Gated
    from ladder import Action, KillTree, Ladder, stop_now
    from meter import Figures, Meter
    from protocol import (
        DEFAULT_GRACE,
        DEFAULT_SAMPLE_INTERVAL,
        ExitRecord,
        LaunchSpec,
        ProtocolError,
        finite,
    )
    from reaper import WATCHED, Reaper
    from rundir import RunDir

PR_SET_CHILD_SUBREAPER = 36
EXIT_FILE = "exit.json"
EVENTS_FILE = "events.jsonl"
OUTPUT_CHECK = 0.25  # seconds between job.log size checks when output_max is set
# A sample reads every /proc/PID/stat; on a host with thousands of processes
# that costs milliseconds, so the interval stretches to keep it under 0.5% CPU.
SAMPLE_BUDGET = 200
STOP_REQUESTS = {signal.SIGTERM, signal.SIGINT}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


def _bytes(value: int | None) -> int | None:
    """A byte limit from the spec; a negative one means none."""
    return None if value is None or value < 0 else value


class Supervisor(Reaper):
    def __init__(self, run_dir: str, spec: LaunchSpec) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.files = RunDir(run_dir)
        self.argv = list(spec.argv)
        self.cwd = spec.cwd
        self.env = dict(spec.env)
        self.log = spec.log
        self.long_gate = spec.long_gate
        self.job_files = {name: text.encode() for name, text in spec.files.items()}
        self.make_cwd = spec.make_cwd
        self.stop_signals = list(spec.stop_signals)
        grace = finite(spec.grace)
        self.grace = DEFAULT_GRACE if grace is None else grace
        self.timeout = finite(spec.timeout)
        interval = finite(spec.sample_interval)
        self.sample_interval = interval if interval else DEFAULT_SAMPLE_INTERVAL
        idle = finite(spec.idle_timeout)
        self.meter = Meter(
            self.files,
            memory_max=_bytes(spec.memory_max),
            output_max=_bytes(spec.output_max),
            idle_timeout=idle if idle else None,  # 0 or absent: no idle limit
            note=self.safe_event,
        )
        self.limit: str | None = None  # "memory", "output" or "idle" once one stopped the tree
        self.timed_out = False
        self.stop_signal_sent = False

    # -- events -----------------------------------------------------------------
    def event(self, name: str, **fields: object) -> None:
        line = json.dumps({"ts": _iso(time.time()), "event": name, **fields}) + "\n"
        self.files.append(EVENTS_FILE, line.encode())

    def safe_event(self, name: str, **fields: object) -> None:
        try:
            self.event(name, **fields)
        except OSError:
            pass  # disk full: exit.json (retried until it lands) still says which limit

    # -- start ------------------------------------------------------------------
    def start_gated(self) -> Gated:
        """The job's process, held at its gate (proc/gate.py): spawned where it can
        be, else forked. Its program is looked up first: execvpe tries an execve per
        PATH entry (~0.1 ms each), which would come after the release."""
        log_fd = self.files.open_log(self.log)
        self.meter.watch_log(log_fd)
        found = program(self.argv[0], self.env)
        job: Gated | None = None
        if not self.long_gate and gate.spawnable(found, self.argv, self.env):
            assert found is not None
            job = gate.spawn(found, self.argv, self.env, self.cwd, log_fd)
        if job is None:
            job = gate.fork(found, self.argv, self.env, self.cwd, log_fd)
        self.pid = job.pid
        return job

    def write_job_files(self) -> str:
        """The job's own files (its script.sh: LaunchSpec.files) and its working
        directory when that is the run directory's work/ (``make_cwd``), made while
        the watcher commits the start, before the release (the gate enters the cwd
        only then); "" or why not (exit.json's ``error``, the job refused at the
        release)."""
        try:
            if self.make_cwd:
                self.make_workdir()
            for name, data in self.job_files.items():
                self.files.put(name, data)
        except OSError as exc:
            return gate.describe(exc)
        return ""

    def make_workdir(self) -> None:
        """``cwd``, made: through the run directory's descriptor when it is a name in
        it (work/, the usual case), else by its path (kept if it is a directory)."""
        parent, name = os.path.split(self.cwd.rstrip("/"))
        if parent == self.run_dir.rstrip("/"):
            self.files.make_dir(name)
            return
        try:
            os.mkdir(self.cwd)
        except FileExistsError:
            if not os.path.isdir(self.cwd):
                raise

    def run(self) -> None:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        ladder = Ladder(grace=self.grace)
        # The first measurement after one interval: a short job costs no /proc walk
        # (its final figures come from wait4: proc/reaper.py).
        next_sample = time.monotonic() + self.sample_interval
        meter = self.meter
        next_check = None if meter.output_max is None else next_sample + OUTPUT_CHECK
        next_idle, idle_step = None, 1.0
        if meter.idle_timeout is not None:
            meter.active_at = time.monotonic()
            idle_step = min(1.0, max(0.05, meter.idle_timeout / 10))
            next_idle = meter.active_at + idle_step
        while self.status is None:
            until = ladder.due if ladder.stopping else deadline
            checks = (next_sample,) if ladder.stopping else (next_sample, next_check, next_idle)
            sig = self.wait(_earliest(until, *checks))
            self.reap()
            if self.status is not None:
                break
            now = time.monotonic()
            limit = None
            if not ladder.stopping and sig is None and self.files.gone():
                sig = signal.SIGTERM  # the run directory was deleted: stop, nothing to record
            sampled = now >= next_sample
            if sampled:
                cost = time.process_time()
                meter.sample(self.reaped_cpu, self.reaped_maxrss)
                cost = time.process_time() - cost
                next_sample = now + max(self.sample_interval, SAMPLE_BUDGET * cost)
            checked = next_check is not None and (sampled or now >= next_check)
            if checked:
                next_check = now + OUTPUT_CHECK
            if not ladder.stopping and sig not in STOP_REQUESTS and (sampled or checked):
                limit = meter.over_limit()
            if next_idle is not None and now >= next_idle:
                next_idle = now + idle_step
                if limit is None and not ladder.stopping and sig not in STOP_REQUESTS:
                    limit = "idle" if meter.idle_check(now) else None
            stop = stop_now(ladder.stopping, sig in STOP_REQUESTS, limit, deadline, now)
            if stop is not None:
                if stop.why == "limit":
                    self.limit = stop.limit
                elif stop.why == "timeout":
                    self.timed_out = True
                    self.safe_event("timeout", timeout_seconds=self.timeout)
                ladder = ladder.begin(now, self.stop_signals, at_once=stop.at_once)
            ladder, action = ladder.step(now)
            if action is not None:
                self.act(action)
        killed = self.end_leftovers(self.grace)
        if killed is not None:
            self.safe_event(
                "leftovers_ended",
                processes=self.leftovers_killed,
                killed=killed,
                escaped=self.escaped,
            )

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

    # -- exit record ------------------------------------------------------------
    def record(
        self,
        started: bool,
        error: str | None = None,
        resources: Figures | None = None,
    ) -> bool:
        """exit.json written, atomically and durably (retried until it lands);
        False if the run directory was deleted first (nowhere to put it)."""
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
            if self.files.gone():
                # Deleted under us: no record can land, and the watcher files the
                # job lost by itself; retrying would only spin.
                sys.stderr.write(f"hopper supervisor {self.run_dir}: run directory deleted\n")
                return False
            try:
                self.files.replace(EXIT_FILE, data, durable=True)
                return True
            except OSError as exc:
                # Disk full or a transient I/O error: the exit status is the one
                # thing recovery cannot reconstruct, so keep trying until it lands.
                sys.stderr.write(
                    f"hopper supervisor {self.run_dir}: cannot write exit.json: {exc}; retrying\n"
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


def program(name: str, env: dict[str, str]) -> str | None:
    """The file ``os.execvpe(name, argv, env)`` would run, looked up ahead of time:
    the first executable regular file named ``name`` in the job's PATH, or
    ``name`` itself when it holds a slash. None when only execvpe can tell: no
    such file, or a relative PATH entry before one (it depends on the job's
    working directory, entered only after the gate). The caller falls back to
    execvpe whenever the file found will not run, so what runs, and the error
    when nothing does, stay execvpe's."""
    if not name:
        return None
    if "/" in name:
        return name
    # os.get_exec_path(env), without its warnings.catch_warnings (a str-keyed env).
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isabs(folder):
            return None
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _answer() -> str:
    """The watcher's one-line answer on stdin ("go" releases the job); "" at EOF."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 64)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _earliest(*deadlines: float | None) -> float | None:
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


_prctl: ctypes._NamedFuncPointer | None = None  # libc's prctl, looked up once by warm()


def warm() -> None:
    """Load what every supervisor needs, once: the fork server calls this before
    forking (a ctypes function looked up in each forked supervisor would be made
    there, objects and all), and makes a first instance of each class a supervisor
    makes per job (:func:`_first_instances`)."""
    global _prctl
    if _prctl is None:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
        prctl.restype = ctypes.c_int
        gate.load()
        _first_instances()
        _prctl = prctl


def _first_instances() -> None:
    """One throwaway instance of each class a supervisor makes for a job. Python
    3.11 fills a class's table of attribute names, shared by its instances, and
    gives the class its version tag, at its first instance: made here, in the fork
    server, every forked supervisor shares them instead of writing its own copy
    (docs/performance.md: ~50 KB less private memory per class and supervisor).
    Only a saving: without a descriptor to spare for RunDir's "/", each supervisor
    makes its Supervisor, RunDir and Meter first, as before."""
    gate.Spawned("/", "/", -1, -1)
    gate.ForkedJob(0, -1, -1)
    Ladder(grace=DEFAULT_GRACE)
    try:
        sup = Supervisor("/", LaunchSpec(argv=["true"], cwd="/", env={}, log=os.devnull))
    except OSError:
        return
    os.close(sup.files.fd)  # RunDir's descriptor of "/": nothing is written through it


def _become_subreaper() -> None:
    warm()
    assert _prctl is not None
    if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


@dataclass(frozen=True)
class Served:
    """What :func:`serve` did with one job: the process's exit status when booted
    by path (``code``), and whether the job ran and its exit.json is durable
    (``done``). The fork server reads ``done``: a supervisor it forked says so
    before it exits (the watcher files the job without waiting for this
    process's teardown, ~1 ms for a forked Python, and the reaping), and one that
    serves job after job waits for the next only after a job that is ``done``."""

    code: int
    done: bool


JOB_DONE = Served(0, done=True)  # it ran, exit.json is durable, nothing left to do
JOB_NOT_DONE = Served(0, done=False)  # refused or withdrawn, or no exit.json could land
SPEC_REFUSED = Served(2, done=False)  # a spec it cannot serve: no pid line, the handshake broken


def main(argv: list[str]) -> int:
    """Booted as ``supervise.py RUN_DIR``: the spec is the first line of stdin."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WATCHED)
    line = sys.stdin.readline()
    if not line:
        return 0  # the watcher went away before sending a spec
    return serve(parse(line), argv[1] if len(argv) > 1 else None).code


def parse(line: str | bytes) -> LaunchSpec | ProtocolError:
    """The spec, or what is wrong with it (the fork server parses before it forks)."""
    try:
        return LaunchSpec.from_json(line)
    except ProtocolError as exc:
        return exc


def serve(spec: LaunchSpec | ProtocolError, default_run_dir: str | None = None) -> Served:
    """Supervise the job of ``spec``; stdin/stdout carry the rest of the handshake.
    What happened is the value returned (:class:`Served`)."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, WATCHED)
    if isinstance(spec, ProtocolError):
        sys.stderr.write(f"hopper supervisor: {spec}\n")
        return SPEC_REFUSED  # the watcher sees the handshake broken (no pid line)
    # A forked supervisor learns its run directory with the spec; it then
    # moves into it, which is how a restarted watcher finds it (its cwd).
    run_dir = spec.run_dir or default_run_dir
    if run_dir is None:
        sys.stderr.write("hopper supervisor: the launch spec names no run_dir\n")
        return SPEC_REFUSED
    os.chdir(run_dir)
    sup = Supervisor(run_dir, spec)
    _become_subreaper()
    job = sup.start_gated()
    error = ""
    try:
        os.write(1, b'{"pid": %d}\n' % sup.pid)
        # The job's own files (and work/) while the watcher commits `running`, off the
        # start's path (a create costs up to ms here); a start refused after all leaves
        # its script.sh and work/ behind, as the watcher's own writes before the start did.
        error = sup.write_job_files()
        answer = _answer()
    except OSError:  # the watcher went away mid-handshake (reset, broken pipe): a no
        answer = ""
    # Detach from the watcher: nothing below may depend on it being alive.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    if answer != "go":
        job.refuse()
        sup.status = None
        # Not an error: the job never ran, so recovery may start it again.
        sup.record(started=False)
        return JOB_NOT_DONE
    if error:
        job.refuse()
    else:
        error = job.release()
    if error:
        sup.record(started=False, error=error)
        return JOB_NOT_DONE
    sup.run()
    figures = sup.meter.final_figures(sup.leftovers_killed, sup.reaped_cpu, sup.reaped_maxrss)
    if sup.limit == "output":
        sup.meter.cut_log()
    return JOB_DONE if sup.record(started=True, resources=figures) else JOB_NOT_DONE


if __name__ == "__main__":
    sys.exit(main(sys.argv))
