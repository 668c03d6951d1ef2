"""The per-job supervisor: a small process that outlives the watcher.

Run as ``python -I -S supervise.py RUN_DIR`` (standard library only, so it
starts fast and does not depend on hopper's environment). The watcher talks
to it over stdin/stdout for exactly one handshake:

1. watcher -> supervisor: one JSON line, the job spec
   (argv, cwd, env, log, stop_signals, grace, timeout).
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
way: nothing outlives its job. Last, it writes ``exit.json`` atomically and
durably, and exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
EXIT_FILE = "exit.json"
EVENTS_FILE = "events.jsonl"
WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
STOP_REQUESTS = {signal.SIGTERM, signal.SIGINT}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


class Supervisor:
    def __init__(self, run_dir: str, spec: dict[str, object]) -> None:
        self.run_dir = run_dir
        self.argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
        self.cwd = str(spec["cwd"])
        self.env = {str(k): str(v) for k, v in spec["env"].items()}  # type: ignore[attr-defined]
        self.log = str(spec["log"])
        self.stop_signals = [int(s) for s in spec.get("stop_signals", [15])]  # type: ignore[attr-defined]
        self.grace = float(spec.get("grace", 10.0))  # type: ignore[arg-type]
        timeout = spec.get("timeout")
        self.timeout = None if timeout is None else float(timeout)  # type: ignore[arg-type]
        self.pid = 0
        self.status: int | None = None
        self.timed_out = False
        self.stop_signal_sent = False
        self.leftovers_killed = 0

    # -- events -----------------------------------------------------------------
    def event(self, name: str, **fields: object) -> None:
        line = json.dumps({"ts": _iso(time.time()), "event": name, **fields}) + "\n"
        fd = os.open(
            os.path.join(self.run_dir, EVENTS_FILE),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
            0o644,
        )
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # -- start ------------------------------------------------------------------
    def fork_gated(self) -> tuple[int, int]:
        """Fork the job, held at a gate; returns (gate write end, error pipe read end)."""
        gate_r, gate_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        log_fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
        os.close(log_fd)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first
        self.pid = pid
        return gate_w, err_r

    # -- stop -------------------------------------------------------------------
    def descendants(self) -> list[int]:
        """Every live process below this supervisor, read from /proc."""
        parents: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] == b"Z":
                continue
            parents.setdefault(int(fields[1]), []).append(int(name))
        found: list[int] = []
        todo = [os.getpid()]
        while todo:
            for child in parents.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self) -> int:
        victims = self.descendants()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(victims)

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
        stop_steps: list[int] | None = None
        step_deadline: float | None = None
        while self.status is None:
            until = step_deadline if stop_steps is not None else deadline
            sig = self.wait(until)
            self.reap()
            if self.status is not None:
                break
            now = time.monotonic()
            begin_stop = stop_steps is None and (
                sig in STOP_REQUESTS or (deadline is not None and now >= deadline)
            )
            if begin_stop:
                if sig not in STOP_REQUESTS:
                    self.timed_out = True
                    self.event("timeout", timeout_seconds=self.timeout)
                stop_steps = [*self.stop_signals, signal.SIGKILL]
                step_deadline = now
            if stop_steps is not None and step_deadline is not None and now >= step_deadline:
                sig_now = stop_steps.pop(0) if stop_steps else signal.SIGKILL
                self.stop_signal_sent = True
                if sig_now == signal.SIGKILL:
                    self.signal_group(signal.SIGKILL)
                    killed = self.kill_all()
                    self.event("signal_sent", signal="SIGKILL", processes=killed)
                    step_deadline = now + 1.0
                else:
                    self.signal_group(sig_now)
                    self.event(
                        "signal_sent", signal=signal.Signals(sig_now).name, target="process group"
                    )
                    step_deadline = now + self.grace
        self.end_leftovers()

    def end_leftovers(self) -> None:
        """The job exited; end whatever it left running (TERM, grace, KILL)."""
        victims = self.descendants()
        if not victims:
            return
        self.leftovers_killed = len(victims)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + self.grace
        while self.descendants() and time.monotonic() < end:
            self.wait(min(end, time.monotonic() + 0.05))
            self.reap()
        killed = self.kill_all()
        self.event("leftovers_ended", processes=self.leftovers_killed, killed=killed)
        self.reap()

    # -- exit record ------------------------------------------------------------
    def record(self, started: bool, error: str | None = None) -> None:
        code = sig = None
        if self.status is not None:
            if os.WIFEXITED(self.status):
                code = os.WEXITSTATUS(self.status)
            elif os.WIFSIGNALED(self.status):
                sig = os.WTERMSIG(self.status)
        record = {
            "started": started,
            "supervisor_pid": os.getpid(),
            "pid": self.pid or None,
            "exit_code": code,
            "signal": sig,
            "timed_out": self.timed_out,
            "stop_signal_sent": self.stop_signal_sent,
            "leftovers_killed": self.leftovers_killed,
            "error": error,
            "finished_at": _iso(time.time()),
        }
        data = json.dumps(record).encode() + b"\n"
        delay = 0.1
        while True:
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
        path = os.path.join(self.run_dir, EXIT_FILE)
        tmp = os.path.join(self.run_dir, f".{EXIT_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def main(argv: list[str]) -> int:
    run_dir = argv[1]
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    spec = json.loads(sys.stdin.readline())
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
    sup.record(started=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
