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
from collections import deque
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
        self._waiting: deque[Request] = deque()  # requests not yet answered, oldest first

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
            try:
                request = self.request(spec_line)
            except _Lost as exc:
                why = str(exc)
                continue
            try:
                return self.answer(request)
            except _Lost as exc:
                why = str(exc)
        raise SpawnFailed(0, f"the fork server failed twice ({why})")

    def request(self, spec_line: bytes) -> Request:
        """Ask for a supervisor without waiting for it (:meth:`answer` collects it);
        raises :class:`_Lost` (the server is then replaced at the next request)."""
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
        except _Lost as exc:
            ours.close()
            if self._sock is not None:  # else _drain has already let it go
                self._lost(str(exc))
            raise
        request = Request(ours, self.generation, time.monotonic() + REPLY_TIMEOUT)
        self._waiting.append(request)
        return request

    def answer(self, request: Request) -> Forked:
        """The supervisor forked for ``request`` (waits for the server's reply);
        :class:`SpawnFailed` if the fork failed, :class:`_Lost` if the server was."""
        try:
            while request.pid is None and request.error is None and request.lost is None:
                self._await(request)
        except _Lost as exc:
            if self._sock is not None and request.generation == self.generation:
                self._lost(str(exc))
            request.lost = request.lost or str(exc)
        if request.pid is None:
            request.channel.close()
            if request.error is not None:
                raise SpawnFailed(0, request.error)
            raise _Lost(request.lost or "it went away")
        handle = Forked(request.pid, request.channel, self)
        self._live[request.pid] = handle
        return handle

    def _await(self, request: Request) -> None:
        """One wait for the server's next message; raises :class:`_Lost` past the deadline."""
        sock = self._sock
        if sock is None or request.generation != self.generation:
            raise _Lost(request.lost or "it went away")
        msg = self._recv()
        if msg is not None:
            self._apply(msg)
            return
        left = request.deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise _Lost(f"it did not answer within {REPLY_TIMEOUT:g}s")

    def collect(self) -> None:
        """Apply every exit reported so far: a handle of this generation whose
        ``returncode`` is still None then has not been reported gone (no
        syscall per handle)."""
        if self._sock is not None:
            self._drain()

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
                self._apply(msg)
        except _Lost as exc:
            self._lost(str(exc))

    def _apply(self, msg: bytes) -> None:
        """A message from the server: the answer to the oldest request, or a report."""
        kind, _, rest = msg.partition(b" ")
        if kind in (b"pid", b"error"):
            if not self._waiting:
                raise _Lost(f"it sent {msg[:80]!r} without a request")
            request = self._waiting.popleft()
            if kind == b"error":
                request.error = rest.decode(errors="replace")
            elif rest.isdigit():
                request.pid = int(rest)
            else:
                raise _Lost(f"it sent {msg[:80]!r}, which is not a pid")
            return
        self._report(msg)

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
        for request in self._waiting:  # never answered: their callers try again
            request.lost = request.lost or "the fork server was lost before it answered"
        self._waiting.clear()


@dataclasses.dataclass(eq=False)
class Request:
    """A supervisor asked of the fork server, its answer not yet read."""

    channel: socket.socket  # ours; the supervisor's stdin and stdout once forked
    generation: int
    deadline: float  # monotonic time by which the server must have answered
    pid: int | None = None
    error: str | None = None  # the server could not fork
    lost: str | None = None  # the server was lost before it answered


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


def _payload(run_dir: Path, spec: LaunchSpec) -> bytes:
    return dataclasses.replace(spec, run_dir=str(run_dir)).to_json().encode() + b"\n"


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
        proc.wait()
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
    ) -> None:
        self.run_dir, self._payload, self._server = run_dir, payload, server
        self._request, self._proc = request, proc
        self.deadline = request.deadline if request is not None else time.monotonic()

    def fileno(self) -> int:
        if self._request is not None:
            return self._request.channel.fileno()
        assert self._proc is not None and self._proc.stdout is not None
        return self._proc.stdout.fileno()

    def collect(self) -> tuple[Supervisor, int]:
        """The supervisor and the job's pid (the job gated); raises :class:`SpawnFailed`."""
        proc = self._proc
        if proc is None:
            assert self._request is not None and self._server is not None
            try:
                proc = self._server.answer(self._request)
            except _Lost as exc:
                log.warning("fork server: %s; asking again", exc)
                proc = _launch(self.run_dir, self._payload, self._server)
            except SpawnFailed as exc:
                log.warning("%s; booting a supervisor instead", exc)
                proc = _launch(self.run_dir, self._payload, None)
            self._proc, self._request = proc, None
        return proc, read_pid(proc)

    def abandon(self) -> None:
        """Never collected (the watcher is going away): the gated job is never released."""
        if self._request is not None:
            _hang_up(self._request.channel, self.deadline)
        elif self._proc is not None:
            _close(self._proc)


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
    if server is not None:
        try:
            return Pending(run_dir, payload, server, server.request(payload), None)
        except _Lost as exc:
            log.warning("fork server: %s; asking again", exc)
    return Pending(run_dir, payload, server, None, _launch(run_dir, payload, server))


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
