"""The watcher's side of the fork server: one warm process that forks supervisors.

The fork server (proc/forkserver.py, run by path) has imported the
supervisor's code once, so a start costs a ``fork``, not an interpreter.
:class:`ForkServer` starts it, sends it fork requests (the spec and the
channel of each new supervisor), reads its ``pid`` answers and ``exit``
reports, and replaces it when it dies or stops answering; :class:`Forked` is
the handle of one supervisor it forked, used like a ``Popen``. Starting a job
through it is proc/spawn.py's business.
"""

from __future__ import annotations

import dataclasses
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

# Run by path, never imported here: importing it would put its directory on sys.path.
FORKSERVER_SCRIPT = Path(__file__).with_name("forkserver.py")
# The environment of every supervisor (and of the fork server): the job's own comes in its spec.
SUPERVISOR_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
# Passed on to the fork server, which honours fault points (hopper/faults.py's FORK_FAULTS).
FAULT_ENV = ("HOPPER_CRASH_AT", "HOPPER_FAULT_TOKENS")
REPLY_TIMEOUT = 10.0  # seconds a fork request may take (the first one waits for the boot)
EXIT_WAIT = 10.0  # seconds a supervisor killed by the watcher gets to be reported gone
UNKNOWN_STATUS = 255  # the returncode of a supervisor whose fork server died before it did
_STAT_STATE, _STAT_STARTTIME = 0, 19  # /proc/PID/stat fields after "(comm) "

log = logging.getLogger(__name__)


class SpawnFailed(OSError):
    """The supervisor could not be started or broke the handshake."""


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

    def __init__(
        self, pid: int, channel: socket.socket, server: ForkServer, generation: int
    ) -> None:
        self.pid = pid
        self.returncode: int | None = None
        # Its exit.json is durable and it is exiting (the fork server passed on its
        # hint): its job can be filed now; ``returncode`` comes with the reaping.
        self.done = False
        # The server that forked it, which alone reports its exit (not the one
        # running now: a server lost after its pid answer was read never will).
        self.generation = generation
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

    def __init__(self, max_jobs: int | None = None) -> None:
        self.max_jobs = max_jobs  # jobs one supervisor serves (None: forkserver.py's MAX_JOBS)
        self.generation = 0  # bumped whenever a fork server is lost
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._live: dict[int, Forked] = {}  # supervisors of this generation, by pid
        # Answered, their handles not yet made (answer() not yet called): an exit
        # reported meanwhile is kept on the request, never dropped.
        self._answered: dict[int, Request] = {}
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
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(FORKSERVER_SCRIPT),
                    str(theirs.fileno()),
                    *([str(self.max_jobs)] if self.max_jobs else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                cwd="/",
                env={**SUPERVISOR_ENV, **{k: os.environ[k] for k in FAULT_ENV if k in os.environ}},
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
            except Lost as exc:
                why = str(exc)
                continue
            try:
                return self.answer(request)
            except Lost as exc:
                why = str(exc)
        raise SpawnFailed(0, f"the fork server failed twice ({why})")

    def request(self, spec_line: bytes) -> Request:
        """Ask for a supervisor without waiting for it (:meth:`answer` collects it);
        raises :class:`Lost` (the server is then replaced at the next request)."""
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
                raise Lost(f"it did not take the job spec: {exc}") from None
            ours.settimeout(None)
        except Lost as exc:
            ours.close()
            if self._sock is not None:  # else _drain has already let it go
                self._lost(str(exc))
            raise
        request = Request(ours, self.generation, time.monotonic() + REPLY_TIMEOUT)
        self._waiting.append(request)
        return request

    def answer(self, request: Request) -> Forked:
        """The supervisor forked for ``request`` (waits for the server's reply);
        :class:`SpawnFailed` if the fork failed, :class:`Lost` if the server was."""
        try:
            while request.pid is None and request.error is None and request.lost is None:
                self._await(request)
        except Lost as exc:
            if self._sock is not None and request.generation == self.generation:
                self._lost(str(exc))
            request.lost = request.lost or str(exc)
        if request.pid is None:
            request.channel.close()
            if request.error is not None:
                raise SpawnFailed(0, request.error)
            raise Lost(request.lost or "it went away")
        if self._answered.get(request.pid) is request:
            del self._answered[request.pid]
        handle = Forked(request.pid, request.channel, self, request.generation)
        if request.status is not None:  # reported gone before its handle was made
            handle.returncode = os.waitstatus_to_exitcode(request.status)
        elif request.generation == self.generation:
            self._live[request.pid] = handle
        return handle

    def _await(self, request: Request) -> None:
        """One wait for the server's next message; raises :class:`Lost` past the deadline."""
        sock = self._sock
        if sock is None or request.generation != self.generation:
            raise Lost(request.lost or "it went away")
        msg = self._recv()
        if msg is not None:
            self._apply(msg)
            return
        left = request.deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise Lost(f"it did not answer within {REPLY_TIMEOUT:g}s")

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

    def free(self, handle: Forked) -> None:
        """The job of ``handle``'s supervisor is filed and nothing will signal it for
        that job again: it may serve the next (forkserver.py). Dropped when the
        server that forked it is gone or its socket is full: that supervisor then
        serves no other job, which is safe."""
        self._send_about(b"free", handle)

    def _send_about(self, word: bytes, handle: Forked) -> None:
        if handle.generation != self.generation or self._sock is None:
            return
        try:
            self._sock.send(b"%s %d" % (word, handle.pid), socket.MSG_DONTWAIT)
        except OSError:
            pass

    def retire(self, handle: Forked) -> None:
        """``handle``'s job is no longer this watcher's (another took it over, and its
        record may name this supervisor): the supervisor serves no other job and exits
        once done with this one (forkserver.py). Dropped when its server is gone (it
        exits with it) or the socket is full (it then waits, unfreed, until the
        server exits)."""
        self._send_about(b"retire", handle)

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
                raise Lost(f"cannot send it a request: {exc.strerror}") from None
            self._drain()
            sock = self._sock
            if sock is None:
                raise Lost("it went away")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [sock], [], left)[1]:
                raise Lost(f"it took no request for {REPLY_TIMEOUT:g}s")

    def _recv(self) -> bytes | None:
        """One message, or None if none is waiting; raises :class:`Lost` at EOF."""
        assert self._sock is not None
        try:
            msg = self._sock.recv(256)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise Lost(f"its socket failed: {exc.strerror}") from None
        if not msg:
            raise Lost("it exited")
        return msg

    def _drain(self) -> None:
        """Apply every report waiting on the socket."""
        try:
            while self._sock is not None and (msg := self._recv()) is not None:
                self._apply(msg)
        except Lost as exc:
            self._lost(str(exc))

    def _apply(self, msg: bytes) -> None:
        """A message from the server: the answer to the oldest request, or a report."""
        kind, _, rest = msg.partition(b" ")
        if kind in (b"pid", b"error"):
            if not self._waiting:
                raise Lost(f"it sent {msg[:80]!r} without a request")
            request = self._waiting.popleft()
            if kind == b"error":
                request.error = rest.decode(errors="replace")
            elif rest.isdigit():
                request.pid = int(rest)
                self._answered[request.pid] = request
            else:
                raise Lost(f"it sent {msg[:80]!r}, which is not a pid")
            return
        self._report(msg)

    def _report(self, msg: bytes) -> None:
        """``exit PID STATUS``: that supervisor has exited and was reaped; ``done
        PID``: it has written its exit.json durably and is exiting (:attr:`Forked.done`)."""
        kind, pid, status = [*msg.split(b" "), b"", b""][:3]
        if kind == b"done" and pid.isdigit() and not status:
            handle = self._live.pop(int(pid), None)
            if handle is not None:
                # Its job is over: the process exits, or (forkserver.py) waits to
                # serve another once freed; either way this handle is done with it.
                handle.done = True
                handle.returncode = 0
            return  # not made yet (answer() pending): its exit report will do
        if kind != b"exit" or not pid.isdigit() or not status.lstrip(b"-").isdigit():
            raise Lost(f"it sent {msg[:80]!r}, which is not a report")
        handle = self._live.pop(int(pid), None)
        if handle is not None:
            handle.returncode = os.waitstatus_to_exitcode(int(status))
            return
        request = self._answered.pop(int(pid), None)
        if request is not None:  # its handle is not made yet: answer() applies it
            request.status = int(status)

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
        self._answered.clear()  # their handles are made as orphans (the request's generation)
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
    status: int | None = None  # the raw wait status, if reported gone before answer() ran
    error: str | None = None  # the server could not fork
    lost: str | None = None  # the server was lost before it answered


class Lost(Exception):
    """The fork server is gone, broke the protocol or stopped answering."""
