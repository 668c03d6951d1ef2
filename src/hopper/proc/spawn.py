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

import dataclasses
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol, TypeAlias

from hopper.proc.protocol import LaunchSpec as LaunchSpec  # the spec, for callers of launch

# Run by path, never imported here: importing them would put their directory on sys.path.
SUPERVISOR_SCRIPT = Path(__file__).with_name("supervise.py")
FORKSERVER_SCRIPT = Path(__file__).with_name("forkserver.py")
# The environment of every supervisor: the job's own comes in its spec.
SUPERVISOR_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
REPLY_TIMEOUT = 10.0  # seconds a fork request may take (the first one waits for the boot)
UNKNOWN_STATUS = 255  # the returncode of a supervisor whose fork server died before it did
_STAT_STATE, _STAT_STARTTIME = 0, 19  # /proc/PID/stat fields after "(comm) "

log = logging.getLogger(__name__)


class SpawnFailed(OSError):
    """The supervisor could not be started or broke the handshake."""


class Handle(Protocol):
    """What the watcher keeps of a running job's supervisor: a Popen or a :class:`Forked`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if fields[_STAT_STATE] == b"Z":
        return None
    return int(fields[_STAT_STARTTIME])


class Forked:
    """A supervisor forked by the fork server, used like a ``Popen`` by this module.

    ``stdin``/``stdout`` are the two directions of its channel (a socket).
    Its exit is learned from the fork server's ``exit`` reports; once that
    server is gone, from its pid and start time.
    """

    def __init__(self, pid: int, channel: socket.socket, server: ForkServer) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.generation = server.generation
        self.ticks = _start_ticks(pid)
        self.stdin = channel.makefile("wb")
        self.stdout = channel.makefile("rb")
        channel.close()  # the files keep it open until both are closed
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self._server.settle(self)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None and _start_ticks(self.pid) == self.ticks:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"supervisor {self.pid}", timeout or 0.0)
            self._server.wait_report(self, 0.05 if left is None else min(left, 0.05))
        return code


class ForkServer:
    """The watcher's fork server: started at :meth:`start`, restarted when it dies.

    One per watcher. A fork server that exits, breaks the protocol or does not
    answer is killed and replaced at the next start; supervisors it forked are
    unaffected (they are in sessions of their own), and their handles switch to
    checking pid and start time (the watcher then notices their exit on its
    sweep instead of at once).
    """

    def __init__(self) -> None:
        self.generation = 0  # bumped whenever a fork server is lost
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._live: dict[int, Forked] = {}  # supervisors of this generation, by pid

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Start the fork server unless it runs; it boots while the caller goes on."""
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None:
            self._lost(f"exited with status {self._proc.returncode}")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(FORKSERVER_SCRIPT), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                cwd="/",
                env=SUPERVISOR_ENV,
            )
        except OSError as exc:
            ours.close()
            raise SpawnFailed(exc.errno, f"cannot start the fork server: {exc.strerror}") from None
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours

    def fork(self, spec_line: bytes) -> Forked:
        """A fresh supervisor for ``spec_line`` (one JSON line), its job forked but gated;
        one restart if the server is lost."""
        why = ""
        for _ in range(2):
            self.start()
            ours, theirs = socket.socketpair()
            try:
                try:
                    self._send(theirs.fileno())
                finally:
                    theirs.close()  # the server has its own copy now
                ours.settimeout(REPLY_TIMEOUT)
                try:
                    ours.sendall(spec_line)  # the server reads it before it forks
                except OSError as exc:
                    raise _Lost(f"it did not take the job spec: {exc}") from None
                ours.settimeout(None)
                pid = self._reply()
            except _Lost as exc:
                ours.close()
                why = str(exc)
                if self._sock is not None:  # else _drain has already let it go
                    self._lost(why)
                continue
            except SpawnFailed:
                ours.close()
                raise
            handle = Forked(pid, ours, self)
            self._live[pid] = handle
            return handle
        raise SpawnFailed(0, f"the fork server failed twice ({why})")

    def settle(self, handle: Forked) -> None:
        """Set ``handle.returncode`` if its supervisor has exited (never blocks)."""
        if handle.generation == self.generation and self._sock is not None:
            self._drain()
        orphan = handle.returncode is None and handle.generation != self.generation
        if orphan and (handle.ticks is None or _start_ticks(handle.pid) != handle.ticks):
            handle.returncode = UNKNOWN_STATUS

    def wait_report(self, handle: Forked, timeout: float) -> None:
        """Sleep until the fork server says something (or ``timeout``)."""
        if handle.generation == self.generation and self._sock is not None:
            select.select([self._sock], [], [], timeout)
        else:
            time.sleep(timeout)  # an orphan: nobody reports its exit

    def close(self) -> None:
        """Stop the fork server (EOF on its socket); the supervisors it forked keep running."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._orphan()

    # -- the socket ---------------------------------------------------------------
    def _send(self, fd: int) -> None:
        assert self._sock is not None
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            try:
                socket.send_fds(self._sock, [b"fork"], [fd])
                return
            except BlockingIOError:
                pass  # its reports fill the socket: it waits for us to read them
            except OSError as exc:
                raise _Lost(f"cannot send it a request: {exc.strerror}") from None
            self._drain()
            sock = self._sock
            if sock is None:
                raise _Lost("it went away")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [sock], [], left)[1]:
                raise _Lost(f"it took no request for {REPLY_TIMEOUT:g}s")

    def _reply(self) -> int:
        """The pid answering our request; exit reports met on the way are applied."""
        assert self._sock is not None
        sock, deadline = self._sock, time.monotonic() + REPLY_TIMEOUT
        while True:
            msg = self._recv()
            if msg is None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    raise _Lost(f"it did not answer within {REPLY_TIMEOUT:g}s")
                continue
            kind, _, rest = msg.partition(b" ")
            if kind == b"pid" and rest.isdigit():
                return int(rest)
            if kind == b"error":
                raise SpawnFailed(0, rest.decode(errors="replace"))
            self._report(msg)

    def _recv(self) -> bytes | None:
        """One message, or None if none is waiting; raises :class:`_Lost` at EOF."""
        assert self._sock is not None
        try:
            msg = self._sock.recv(256)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _Lost(f"its socket failed: {exc.strerror}") from None
        if not msg:
            raise _Lost("it exited")
        return msg

    def _drain(self) -> None:
        """Apply every report waiting on the socket."""
        try:
            while self._sock is not None and (msg := self._recv()) is not None:
                self._report(msg)
        except _Lost as exc:
            self._lost(str(exc))

    def _report(self, msg: bytes) -> None:
        """``exit PID STATUS``: that supervisor has exited and was reaped."""
        kind, pid, status = [*msg.split(b" "), b"", b""][:3]
        if kind != b"exit" or not pid.isdigit() or not status.lstrip(b"-").isdigit():
            raise _Lost(f"it sent {msg[:80]!r}, which is not a report")
        handle = self._live.pop(int(pid), None)
        if handle is not None:
            handle.returncode = os.waitstatus_to_exitcode(int(status))

    def _lost(self, why: str) -> None:
        """Kill and forget the fork server; its supervisors become orphans."""
        proc = self._proc
        log.warning(
            "fork server %s: %s; starting a new one (running jobs are not affected)",
            proc.pid if proc else "?",
            why,
        )
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            self._proc = None
        self._orphan()

    def _orphan(self) -> None:
        self.generation += 1
        self._live.clear()  # their handles now check pid and start time themselves


class _Lost(Exception):
    """The fork server is gone, broke the protocol or stopped answering."""


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


def launch(run_dir: Path, spec: LaunchSpec, server: ForkServer | None = None) -> Supervisor:
    """Fork (through ``server``) or boot a supervisor and hand it the spec; the job
    is forked but gated."""
    payload = dataclasses.replace(spec, run_dir=str(run_dir)).to_json().encode() + b"\n"
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
        proc.wait()
        raise SpawnFailed(0, "the supervisor exited before reading the job spec") from None
    return proc


def read_pid(proc: Supervisor) -> int:
    """The job's pid, as the supervisor reports it once the job is forked."""
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
    except ConnectionResetError:
        line = b""
    try:
        return int(json.loads(line)["pid"])
    except (ValueError, KeyError, TypeError):
        proc.kill()
        proc.wait()
        _close(proc)
        raise SpawnFailed(0, f"the supervisor broke the handshake (said {line[:200]!r})") from None


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
    proc.wait()


def _close(proc: Supervisor) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # a write still buffered could not be flushed: it died
    proc.stdout.close()
