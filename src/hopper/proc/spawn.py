"""Starting a job under its supervisor: the watcher's half of the handshake.

See proc/supervise.py for the protocol. A supervisor is forked by the
watcher's fork server (proc/forkserver.py, driven by :class:`ForkServer`):
one warm ``python -I -S`` process that imported the supervisor's code once,
so a start costs a ``fork``, not an interpreter, and a running job costs the
few pages its supervisor writes, not a whole interpreter. Without a fork
server (or when it cannot be started) the supervisor is booted as
``python -I -S supervise.py RUN_DIR``. Either way it runs in a session of its
own, so it neither inherits the watcher's terminal nor depends on hopper's
import path, and it survives the watcher (the systemd unit uses
KillMode=process) and the fork server.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol, TypeAlias

from hopper.proc.forkclient import (
    EXIT_WAIT,
    REPLY_TIMEOUT,
    SUPERVISOR_ENV,
    Forked,
    ForkServer,
    Lost,
    Request,
)
from hopper.proc.forkclient import SpawnFailed as SpawnFailed  # raised by launch and begin
from hopper.proc.protocol import LaunchSpec as LaunchSpec  # the spec, for callers of launch
from hopper.store.jobfile import EXIT_FILE  # what a supervisor writes last

# Run by path, never imported here: importing it would put its directory on sys.path.
SUPERVISOR_SCRIPT = Path(__file__).with_name("supervise.py")
WITHDRAW_WAIT = 5.0  # seconds a withdrawn supervisor gets to record started=false and exit
PID_WAIT = REPLY_TIMEOUT  # seconds a supervisor, once forked or booted, may take to report its job
MAX_PID_LINE = 4096  # bytes of a pid line; more is not a supervisor's

log = logging.getLogger(__name__)


class Handle(Protocol):
    """What the watcher keeps of a running job's supervisor: a Popen or a :class:`Forked`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


def _boot_supervisor(run_dir: Path | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-I", "-S", str(SUPERVISOR_SCRIPT)]
    try:
        return subprocess.Popen(
            [*argv, str(run_dir)] if run_dir else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            cwd=run_dir or "/",
            env=SUPERVISOR_ENV,
        )
    except OSError as exc:
        raise SpawnFailed(exc.errno, f"cannot start the supervisor: {exc.strerror}") from None


Supervisor: TypeAlias = subprocess.Popen[bytes] | Forked  # what launch returns


def _payload(run_dir: Path, spec: LaunchSpec) -> bytes:
    # the spec with its run_dir, not made again: its fields were checked when it was built
    return spec.to_json(run_dir=str(run_dir)).encode() + b"\n"


def launch(run_dir: Path, spec: LaunchSpec, server: ForkServer | None = None) -> Supervisor:
    """Fork (through ``server``) or boot a supervisor and hand it the spec; the job
    is forked but gated."""
    return _launch(run_dir, _payload(run_dir, spec), server)


def _launch(run_dir: Path, payload: bytes, server: ForkServer | None) -> Supervisor:
    if server is not None:
        try:
            return server.fork(payload)
        except SpawnFailed as exc:
            log.warning("%s; booting a supervisor instead", exc)
    proc = _boot_supervisor(run_dir)
    assert proc.stdin is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.flush()
    except (BrokenPipeError, ConnectionResetError):
        _reap(proc)
        raise SpawnFailed(0, "the supervisor exited before reading the job spec") from None
    return proc


class Pending:
    """A supervisor asked for, its job's pid not yet read: the start without the
    wait. The caller selects on :meth:`fileno` (readable once the supervisor
    has reported, or failed) and then calls :meth:`collect`, which waits only
    for what is already on its way (a lost or stuck fork server: until
    ``deadline``, then a supervisor of its own, as :func:`launch` does)."""

    def __init__(
        self,
        run_dir: Path,
        payload: bytes,
        server: ForkServer | None,
        request: Request | None,
        proc: Supervisor | None,
        made_log: str | None = None,
    ) -> None:
        self.run_dir, self._payload, self._server = run_dir, payload, server
        self._made_log = made_log  # job.log, if it did not exist before this start
        self._request, self._proc = request, proc
        self._pid: int | None = None  # once collected
        self.deadline = request.deadline if request is not None else time.monotonic()

    def fileno(self) -> int:
        if self._request is not None:
            return self._request.channel.fileno()
        assert self._proc is not None and self._proc.stdout is not None
        return self._proc.stdout.fileno()

    def collect(self) -> tuple[Supervisor, int]:
        """The supervisor and the job's pid (the job gated); raises :class:`SpawnFailed`.
        A second call returns the same two."""
        proc = self._proc
        if proc is None:
            assert self._request is not None and self._server is not None
            try:
                proc = self._server.answer(self._request)
            except Lost as exc:
                log.warning("fork server: %s; asking again", exc)
                proc = _launch(self.run_dir, self._payload, self._server)
            except SpawnFailed as exc:
                log.warning("%s; booting a supervisor instead", exc)
                proc = _launch(self.run_dir, self._payload, None)
            self._proc, self._request = proc, None
        if self._pid is None:
            self._pid = read_pid(proc, max(self.deadline, time.monotonic() + PID_WAIT))
        return proc, self._pid

    def abandon(self) -> None:
        """Never collected (the watcher is going away): the gated job is never released."""
        if self._request is not None:
            _hang_up(self._request.channel, self.deadline)
        elif self._proc is not None:
            _close(self._proc)

    def withdraw(self, timeout: float = WITHDRAW_WAIT) -> None:
        """Never to be released, and the run directory left as a queued job's: the
        supervisor is told no, waited for (killed after ``timeout``), and the
        ``started: false`` exit.json it wrote is removed, so the job can be
        started afresh later without a stale exit record beside it; so is the
        job.log the supervisor opened for it, if this start made it and the job
        never wrote to it (a queued job that is aborted never had a log)."""
        try:
            proc, _ = self.collect()
        except SpawnFailed:
            proc = None  # no supervisor came up, or it was ended: nothing runs
        if proc is not None:
            _close(proc)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # stuck writing its record (a full disk): gone, gate and all
                _reap(proc)
        (self.run_dir / EXIT_FILE).unlink(missing_ok=True)
        if self._made_log is not None:
            try:
                st = os.lstat(self._made_log)
                if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                    os.unlink(self._made_log)  # the name only: never what a link points to
            except FileNotFoundError:
                pass


def _hang_up(channel: socket.socket, deadline: float) -> None:
    """EOF to a supervisor at the other end of ``channel`` (it then kills its gated
    job and records started=false), without the reset that unread bytes would
    turn a close into: its pid line (written first, ms after the fork) is read
    and dropped, waiting until ``deadline`` at most."""
    try:
        channel.shutdown(socket.SHUT_WR)
        select.select([channel], [], [], max(0.0, min(deadline - time.monotonic(), 1.0)))
        channel.setblocking(False)
        while channel.recv(4096):
            pass
    except OSError:
        pass  # nothing (more) to read, or it has gone: either way it sees EOF
    finally:
        channel.close()


def begin(run_dir: Path, spec: LaunchSpec, server: ForkServer | None = None) -> Pending:
    """Start a supervisor for ``spec`` without waiting for its report (see :class:`Pending`)."""
    payload = _payload(run_dir, spec)
    made_log = None if os.path.lexists(spec.log) else spec.log
    if server is not None:
        try:
            return Pending(run_dir, payload, server, server.request(payload), None, made_log)
        except Lost as exc:
            log.warning("fork server: %s; asking again", exc)
    return Pending(run_dir, payload, server, None, _launch(run_dir, payload, server), made_log)


def read_pid(proc: Supervisor, deadline: float | None = None) -> int:
    """The job's pid, as the supervisor reports it once the job is forked; waits
    until ``deadline`` (monotonic; default :data:`PID_WAIT` from now) at most.
    :class:`SpawnFailed` if it broke the handshake (exited first, said something
    else) or said nothing in time; it is then killed, and reaped if it goes in time."""
    assert proc.stdout is not None
    if deadline is None:
        deadline = time.monotonic() + PID_WAIT
    line, why = _read_line(proc.stdout.fileno(), deadline)
    said = _said(line)
    pid = said.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    proc.kill()
    _reap(proc)
    _close(proc)
    if why:
        raise SpawnFailed(0, f"the supervisor {why} (pid {proc.pid})")
    error, code = said.get("error"), said.get("errno")
    if isinstance(error, str):  # a forked one that could not start its job
        raise SpawnFailed(
            code if isinstance(code, int) else 0,
            f"the supervisor could not start its job: {error[:300]}",
        )
    what = "exited before it reported its job's pid" if not line else f"said {line[:200]!r}"
    raise SpawnFailed(0, f"the supervisor broke the handshake ({what}; pid {proc.pid})")


def _said(line: bytes) -> dict[str, object]:
    """The supervisor's line as JSON: ``{"pid": N}``, ``{"error": …, "errno": N}``
    (proc/forkserver.py), or nothing usable ({})."""
    try:
        said = json.loads(line)
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _read_line(fd: int, deadline: float) -> tuple[bytes, str]:
    """One line from ``fd`` (unbuffered: nothing else has read it), or what came
    before EOF, the deadline or an error, and why not a whole line ("" at EOF)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_PID_LINE:
        left = deadline - time.monotonic()
        try:
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return data, f"did not report its job's pid within {PID_WAIT:g}s"
            chunk = os.read(fd, MAX_PID_LINE)
        except ConnectionResetError:
            chunk = b""
        except OSError as exc:
            return data, f"could not be read: {exc.strerror}"
        if not chunk:
            break
        data += chunk
    return data, ""


def _reap(proc: Supervisor, timeout: float = EXIT_WAIT) -> None:
    """Wait for a killed supervisor, ``timeout`` at most: a wait never hangs the
    watcher (a fork server that never reports it leaves it to the sweep)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("supervisor %s: not gone %gs after SIGKILL; not waiting", proc.pid, timeout)


def release(proc: Supervisor) -> None:
    """Let the gated job exec. After this the supervisor needs nothing from us."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass  # it died; its missing exit record is handled by the monitor
    finally:
        _close(proc)


def abandon(proc: Supervisor) -> None:
    """Do not release: the supervisor kills the gated job and records started=false."""
    _close(proc)
    try:
        proc.wait(WITHDRAW_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()  # stuck writing its record: gone, gate and all
        _reap(proc)


def refuse(proc: Supervisor) -> None:
    """Do not release, do not wait: the supervisor, seeing EOF, kills the gated job
    and records started=false (reap it later)."""
    _close(proc)


def _close(proc: Supervisor) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a write still buffered could not be flushed: it died
    proc.stdout.close()
