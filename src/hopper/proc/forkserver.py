"""The fork server: one warm process that forks supervisors, each of which serves
job after job.

Run by the watcher (proc/forkclient.py's :class:`~hopper.proc.forkclient.ForkServer`)
as ``python -I -S forkserver.py FD``: standard library only, by path, like
supervise.py, whose code it imports once at start. A job's supervisor is then
a ``fork`` of this small, single-threaded process instead of a new interpreter
(the pattern of multiprocessing's forkserver and Android's zygote): no boot,
and most of its memory stays shared with the server, copy-on-write
(``gc.freeze`` before each fork keeps the collector from touching the
inherited objects, so their pages are not copied).

FD is the server's end of a ``SOCK_SEQPACKET`` socket pair; one datagram per
message:

- watcher -> server: ``fork`` with one descriptor attached (SCM_RIGHTS), the
  job's channel, on which the watcher then writes the job's spec line. The
  channel goes to the spare (below); without one, the server reads and parses
  the spec itself, then forks. The child calls ``setsid``, puts the channel
  on its stdin and stdout and runs :func:`supervise.serve`: from there on
  it is exactly the supervisor of
  supervise.py (the same handshake over the channel, the same exit.json), and
  it outlives both this server and the watcher. One that cannot start its
  job (a refused fork, no descriptor, no space for job.log) says so where
  the watcher waits for the pid line: ``{"error": TEXT, "errno": N}``.
- watcher -> server: ``free N``: the watcher has filed the job supervisor N
  served and will never signal N for that job again (below); ``retire N``:
  the watcher let go of N's job without filing it (another watcher took it
  over): N serves no other job and exits once done with this one.
- server -> watcher: ``pid N`` (the supervisor given the oldest request)
  or ``error TEXT`` (the fork failed), one per request, in order; ``done
  N``: supervisor N has written its exit.json durably, its job is over (the
  watcher files it then; N waits for its ``free``, or exits); and ``exit N
  STATUS`` once supervisor N has exited and been reaped (STATUS is the raw
  wait status). A supervisor forked for a request (no spare) serves that one
  job: its ``done`` is a hint it sends on the server's "done" socket as it
  exits (one lost changes nothing but the time: ``exit`` follows). After
  each reaping round, and each round of reports, the server also sends its
  parent, the watcher, a SIGCHLD: the watcher's loop wakes for it exactly as
  it did when each supervisor was its own child.
- EOF (the watcher closed its end or died): the server exits. Supervisors it
  forked keep running; orphaned, they are reaped by init (or the nearest
  subreaper), and a watcher finds them again by pid and start time.

A spare: the server keeps one supervisor forked ahead of the next request,
already in a session of its own and waiting on a private socket (its link).
A request hands it the job's channel (SCM_RIGHTS); the spare reads and parses
the spec line itself and goes on as any forked supervisor, and the server
answers ``pid N`` at once. It forks the next spare once it has been
``REFILL_QUIET`` without a request or an exit (not while the spare it gave
away forks its job). So a start waits for one fork (the job's, in its
supervisor), not two. A spare that died meanwhile is replaced by a fork on
the spot; while none can be forked, requests fork their own. A spare exits at
EOF on its link: when the server exits (the watcher went away), so does the
spare, which never ran anything.

Job after job: a supervisor that was a spare keeps its link. Once its job's
exit.json is durable it says ``done`` on its link, then leaves the run
directory (``chdir /``: a restarted watcher finds supervisors by their cwd)
and closes every descriptor the job left open (it keeps only what it held
before its first job) while the watcher files the job, and waits on its
link, as the spare does, for the next job's channel.
The server passes ``done N`` on; once the watcher sends ``free N`` the
supervisor is free, and the next request takes the most recently freed one
before the spare. It is told to go (EOF on its link: it exits) instead when
it has served ``MAX_JOBS`` jobs (what a leak in it can grow to is bounded)
or ``MAX_IDLE`` are free already. A job that did not run to a durable
exit.json (refused, withdrawn, its run directory deleted) is its
supervisor's last. What a fresh process costs (the ~480 copy-on-write page
faults of a forked Python, docs/performance.md; the fork's page-table copy in
the server; the teardown) is then paid once per supervisor, not per job.

Why a stop cannot reach the wrong job. The watcher stops a job with SIGTERM
to its supervisor's pid (its job.json's ``supervisor_pid``, checked by start
time, which a reused supervisor keeps). It signals N for a job only while
that job is in its running set, and sends ``free N`` only after the job's
end is filed and it has left that set (runner.py calls ``Ended.filed``;
never for a job handed over to another watcher, whose stale record could
still name N). A supervisor is given another job only after its ``free``.
kill(2) queues a signal before it returns, so a SIGTERM or SIGINT meant for
the job before is already pending (the supervisor keeps them blocked) when
the supervisor takes the next job, and it drops every pending one
(``sigtimedwait`` with no wait) before it reads the spec. A watcher that
restarts has a new fork server: the old one exits at EOF, so every
supervisor it forked serves at most the job it has and exits; supervisors
are then adopted by pid and start time exactly as before, each serving the
one job its pid is recorded for.

The watcher going away (EOF): the server tells its free and unfreed
supervisors and the spare to go and reaps them; a busy one finishes its job,
records it, finds EOF on its link and exits.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py's wrappers convert to enums
import gc
import json
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Literal

    from hopper.proc.protocol import LaunchSpec, ProtocolError

    # A linked supervisor's state: serving a job ("busy"; "retiring": its last, told
    # to go once done), done with it (exit.json durable) but not yet freed by the
    # watcher ("unfreed"), or freed and waiting on its link for the next ("free").
    State = Literal["busy", "retiring", "unfreed", "free"]
if TYPE_CHECKING or __package__:
    from hopper.proc import supervise
else:  # run by path under -I -S: hopper is not importable, the supervisor is a sibling
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import supervise

MAX_MESSAGE = 64  # bytes of a request; a larger one is not ours
# The next spare is forked once the server has been this long without a request
# or an exit: not while the spare just taken forks its job, nor while the
# watcher finishes that start (a fork then competes with them for the cores).
REFILL_QUIET = 0.005
REFILL_RETRY = 1.0  # seconds before another try when a spare could not be forked
MAX_FDS = 4  # descriptors accepted with one request (one is used; extras are closed)
MAX_JOBS = 1000  # jobs one supervisor serves before it exits (bounds what a leak can grow to)
MAX_IDLE = 8  # free supervisors kept waiting for a job; one freed past that exits
STALE = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}  # stops for a job done before
# Fault injection for tests (hopper/faults.py lists the names; this script cannot import it).
_FAULTS = frozenset(p for p in os.environ.get("HOPPER_CRASH_AT", "").split(",") if p)


def fault(name: str) -> bool:
    """Whether the named fault point fires here: armed in ``HOPPER_CRASH_AT``, and,
    if ``HOPPER_FAULT_TOKENS`` names a directory, once per file in it (the process
    that removes a file fires)."""
    if name not in _FAULTS:
        return False
    tokens = os.environ.get("HOPPER_FAULT_TOKENS")
    if not tokens:
        return True
    try:
        names = os.listdir(tokens)
    except OSError:
        return False
    for token in names:
        try:
            os.unlink(os.path.join(tokens, token))
        except OSError:
            continue  # another process took it
        return True
    return False


def _fork() -> int:
    """``os.fork``, refused at the fault point ``forkserver.fork`` (as at RLIMIT_NPROC)."""
    if fault("forkserver.fork"):
        raise OSError(11, "Resource temporarily unavailable (fault point forkserver.fork)")
    return os.fork()


@dataclass
class Linked:
    """A supervisor that serves job after job (a spare, once given a job), as the
    server knows it: our end of its link, its state, the jobs it was given."""

    link: socket.socket
    state: State = "busy"
    jobs: int = 0


class Server:
    def __init__(self, ctrl: socket.socket, max_jobs: int = MAX_JOBS) -> None:
        self.ctrl = ctrl
        self.max_jobs = max_jobs
        self.watcher = os.getppid()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # Supervisors' "done" hints (Server.tell_done): exit.json durable, the
        # process about to exit. Theirs is the write end, inherited (never by a job:
        # close-on-exec); ours is read in the loop.
        self.done_r, self.done_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.done_r.setblocking(False)
        self.spare: tuple[int, socket.socket] | None = None  # its pid, our end of its socket
        self.refill_at: float | None = None  # monotonic time to fork the next spare
        # Supervisors that serve job after job (the spares, once given a job), by pid;
        # the most recently freed is the last of the free ones.
        self.linked: dict[int, Linked] = {}

    def serve(self) -> int:
        """Answer fork requests and report exits until the watcher goes away."""
        try:
            return self._serve()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """The watcher has gone: the free supervisors and the spare are told to go
        (EOF on their links) and reaped; busy ones finish their job, find EOF and
        exit (init reaps them)."""
        pids = [pid for pid, sup in self.linked.items() if sup.state in ("unfreed", "free")]
        for sup in self.linked.values():
            sup.link.close()
        self.linked.clear()
        if self.spare is not None:
            pids.append(self.spare[0])
            self.spare[1].close()
            self.spare = None
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def _serve(self) -> int:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # the wakeup fd wakes select
        # A mask is inherited across exec: a watcher that started us with SIGCHLD
        # blocked would have us never reap, never report an exit.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        supervise.warm()  # what every child would load on its own, loaded once here
        self.refill()
        done = self.done_r.fileno()
        while True:
            due = self.refill_at
            timeout = None if due is None else max(0.0, due - time.monotonic())
            links = {sup.link.fileno(): pid for pid, sup in self.linked.items()}
            ready, _, _ = select.select(
                [self.ctrl.fileno(), self.wake_r, done, *links], [], [], timeout
            )
            if not ready:
                self.refill()  # the server was quiet for REFILL_QUIET (or a retry is due)
                continue
            if self.spare is None:  # not while starts and exits come in
                self._refill_later(REFILL_QUIET)
            if done in ready and not self.done():  # before the reaping: `done` precedes `exit`
                return 0
            for fd in ready:
                if fd in links and not self.link_ready(links[fd]):
                    return 0
            if self.wake_r in ready:
                self._drain_wakeups()
                if not self.reap():
                    return 0
            if self.ctrl.fileno() in ready and not self.request():
                return 0

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def request(self) -> bool:
        """One request from the watcher; False once it has gone (EOF)."""
        try:
            msg, fds, _flags, _addr = socket.recv_fds(self.ctrl, MAX_MESSAGE, MAX_FDS)
        except ConnectionError:
            return False
        if not msg:
            for fd in fds:
                os.close(fd)
            return False
        kind, _, arg = msg.partition(b" ")
        if kind in (b"free", b"retire") and arg.isdigit() and not fds:
            (self.free if kind == b"free" else self.retire)(int(arg))
            return True
        if msg != b"fork" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return self.send(b"error the fork server got a malformed request")
        spare = self.take_free() or self.take_spare()
        if spare is not None:
            # The answer first: the spare, woken by the hand-over, may take the
            # core from the server until it blocks again.
            pid, link = spare
            answered = self.send(b"pid %d" % pid)
            if self.hand_over(spare, fds[0]):
                sup = self.linked.setdefault(pid, Linked(link))  # a spare: its first job
                sup.state = "busy"  # until it says done (or its link says EOF)
                sup.jobs += 1
            else:
                self.linked.pop(pid, None)  # it died (its link closed); a spare had no record
            return answered
        line = _read_line(fds[0])
        if not line:
            os.close(fds[0])
            return self.send(b"error the watcher sent no job spec")
        spec = supervise.parse(line)  # a bad one is refused by the child, as when booted
        return self.fork(fds[0], spec)

    def fork(self, channel: int, spec: LaunchSpec | ProtocolError) -> bool:
        gc.freeze()  # what exists now is shared with the child; the collector leaves it alone
        try:
            pid = _fork()
        except OSError as exc:
            os.close(channel)
            return self.send(f"error cannot fork a supervisor: {exc.strerror}".encode())
        if pid == 0:
            self.child(channel, spec)  # never returns
        os.close(channel)  # the child holds it now: its EOF must mean the watcher went away
        return self.send(b"pid %d" % pid)

    def child(self, channel: int, spec: LaunchSpec | ProtocolError) -> None:
        """In the forked child: become a supervisor of our own; never returns."""
        code = 1
        try:
            self._leave_server()
            served = _supervise(channel, spec)
            code = served.code
            if served.done:
                self.tell_done()
        except BaseException:  # the child must never return into the server's loop
            sys.excepthook(*sys.exc_info())
        finally:
            _exit(code)

    def _leave_server(self) -> None:
        """In a forked child: drop the server's descriptors and handlers, own session."""
        signal.set_wakeup_fd(-1)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        os.close(self.wake_r)
        os.close(self.wake_w)
        self.done_r.close()  # the write end stays: Server.tell_done
        self.ctrl.close()
        if self.spare is not None:
            self.spare[1].close()  # else the spare would not see EOF when the server exits
        for sup in self.linked.values():
            sup.link.close()
        gc.enable()
        os.setsid()  # out of the server's session: it and the watcher may die

    # -- the spare ------------------------------------------------------------------
    def refill(self) -> None:
        """Fork the spare for the next request, unless there is one (or no fork now)."""
        self.refill_at = None
        if self.spare is not None:
            return
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            self._refill_later(REFILL_RETRY)  # out of descriptors
            return
        gc.freeze()
        try:
            pid = _fork()
        except OSError:
            ours.close()
            theirs.close()
            self._refill_later(REFILL_RETRY)  # requests fork their own meanwhile
            return
        if pid == 0:
            ours.close()
            self.spare_child(theirs)  # never returns
        theirs.close()
        self.spare = (pid, ours)

    def take_spare(self) -> tuple[int, socket.socket] | None:
        """The spare, if there is one and it lives (a spare never writes: a readable
        socket is its EOF; its exit is reported when it is reaped)."""
        spare, self.spare = self.spare, None
        self._refill_later(REFILL_QUIET)
        if spare is not None and select.select([spare[1]], [], [], 0)[0]:
            spare[1].close()
            return None  # it died: this request forks its supervisor itself
        return spare

    def _refill_later(self, delay: float) -> None:
        """The next spare no sooner than ``delay`` from now (a retry due later is kept)."""
        self.refill_at = max(self.refill_at or 0.0, time.monotonic() + delay)

    # -- supervisors that serve job after job ------------------------------------------
    def take_free(self) -> tuple[int, socket.socket] | None:
        """The most recently freed supervisor that still lives (a free one never
        writes: a readable link is its EOF), or None."""
        for pid in [pid for pid, sup in self.linked.items() if sup.state == "free"][::-1]:
            link = self.linked[pid].link
            if select.select([link], [], [], 0)[0]:
                self.drop(pid)  # it died; its exit is reported when it is reaped
                continue
            return pid, link
        return None

    def drop(self, pid: int) -> None:
        """Forget a linked supervisor and close our end of its link: EOF there tells
        a live one to go (it exits, and is reported when reaped)."""
        sup = self.linked.pop(pid, None)
        if sup is not None:
            sup.link.close()

    def link_ready(self, pid: int) -> bool:
        """A supervisor's link is readable: ``done`` (its exit.json is durable, it
        waits to be freed), else EOF (it exited). False once the watcher has gone."""
        sup = self.linked.get(pid)
        if sup is None:
            return True
        if sup.state in ("unfreed", "free"):  # it never writes there, so it died
            self.drop(pid)
            return True
        try:
            msg = sup.link.recv(16)
        except OSError:
            msg = b""
        if msg != b"done":
            self.drop(pid)
            return True
        if sup.state == "retiring":
            self.drop(pid)  # EOF: it exits, and is reported when reaped
        else:
            sup.state = "unfreed"
        if not self.send(b"done %d" % pid):
            return False
        self.wake_watcher()
        return True

    def retire(self, pid: int) -> None:
        """The watcher has let go of the job supervisor ``pid`` serves or served
        without filing it (another watcher took it over, whose record may name
        ``pid`` for it): that supervisor serves no other job. It is told to go
        (EOF on its link) now if it is done, else once it says ``done``."""
        sup = self.linked.get(pid)
        if sup is None:
            return
        if sup.state == "unfreed":
            self.drop(pid)
        elif sup.state == "busy":
            sup.state = "retiring"

    def free(self, pid: int) -> None:
        """The watcher has filed the job supervisor ``pid`` served and will never
        signal it for that job again: it may be given the next one (or, past the
        caps, told to go). A ``free`` for a supervisor not waiting for one is ignored."""
        sup = self.linked.get(pid)
        if sup is None or sup.state != "unfreed":
            return
        free = sum(1 for other in self.linked.values() if other.state == "free")
        if sup.jobs >= self.max_jobs or free >= MAX_IDLE:
            self.drop(pid)  # EOF: it exits, and is reported when reaped
            return
        sup.state = "free"
        del self.linked[pid]
        self.linked[pid] = sup  # the last: the next request takes the most recently freed

    @staticmethod
    def hand_over(spare: tuple[int, socket.socket], channel: int) -> bool:
        """Give ``channel`` to the spare (or a free supervisor); whether it was sent.
        Should it die between :meth:`take_spare` and now, the channel closes unread
        (and so does the link): the watcher sees EOF where it waits for the pid line,
        as when a freshly forked supervisor dies, and the start fails."""
        _, link = spare
        try:
            socket.send_fds(link, [b"job"], [channel])
            return True
        except OSError:
            link.close()
            return False
        finally:
            os.close(channel)  # the supervisor's now: its EOF must mean the watcher went away

    def spare_child(self, link: socket.socket) -> None:
        """In a spare: wait for a job's channel, supervise it, say ``done`` on the link
        and wait for the next, until EOF (or a job that ended otherwise); never returns."""
        code = 0
        try:
            self._leave_server()
            keep = _open_fds()
            while True:
                try:
                    msg, fds, _flags, _addr = socket.recv_fds(link, MAX_MESSAGE, MAX_FDS)
                except ConnectionError:
                    msg, fds = b"", []
                if msg != b"job" or len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    return  # EOF: the server (and so the watcher) went away; nothing ran
                # A stop meant for the job before: sent before the watcher freed us
                # (kill(2) queues it before it returns), so pending now. Dropped.
                while _signal.sigtimedwait(STALE, 0) is not None:
                    pass
                line = _read_line(fds[0])
                if not line:
                    os.close(fds[0])
                    return  # the watcher went away before it sent the spec
                code = 1  # from here on, a failure is a supervisor's
                served = _supervise(fds[0], supervise.parse(line))
                code = served.code
                if not served.done:
                    return  # its job never ran, or no record landed: one job only
                # `done` first: the watcher files the job from its durable exit.json
                # meanwhile; a next job can only come by the recv above, after this
                # supervisor has left the run directory (a restarted watcher finds
                # supervisors by their cwd) and closed everything of the job's.
                try:
                    link.send(b"done")
                except OSError:
                    return  # the server has gone (and so the watcher): exit
                os.chdir("/")
                for fd in _open_fds() - keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                code = 0
        except BaseException:  # the child must never return into the server's loop
            sys.excepthook(*sys.exc_info())
        finally:
            _exit(code)

    def tell_done(self) -> None:
        """In a supervisor forked for a request: its job is done (``Served.done``:
        exit.json durable), it exits now (a hint; dropped when the socket is full or
        the server gone, never blocking)."""
        try:
            self.done_w.send(b"%d" % os.getpid(), socket.MSG_DONTWAIT)
        except OSError:
            pass

    def done(self) -> bool:
        """Pass each supervisor's hint on as ``done PID``, then wake the watcher
        (proc/forkclient.py: its job is filed from exit.json before the reaping).
        False once the watcher has gone."""
        told = False
        while True:
            try:
                msg = self.done_r.recv(32)
            except BlockingIOError:
                break
            if not msg.isdigit():
                continue  # not a supervisor's
            told = True
            if not self.send(b"done " + msg):
                return False
        if told:
            self.wake_watcher()
        return True

    def reap(self) -> bool:
        """Report every supervisor that exited; wake the watcher. False once it has gone."""
        reaped = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped = True
            if not self.send(b"exit %d %d" % (pid, status)):
                return False
        if reaped:
            self.wake_watcher()
        return True

    def wake_watcher(self) -> None:
        if os.getppid() == self.watcher:
            try:
                os.kill(self.watcher, signal.SIGCHLD)
            except ProcessLookupError:
                pass

    def send(self, msg: bytes) -> bool:
        try:
            try:
                self.ctrl.send(msg, socket.MSG_DONTWAIT)
            except BlockingIOError:
                # Full of reports the watcher has not read (many supervisors
                # exited at once): wake it to read them, then wait for room.
                self.wake_watcher()
                self.ctrl.send(msg)
        except OSError:
            return False  # the watcher has gone
        return True


def _open_fds() -> set[int]:
    """This process's open descriptors (not the one the listing itself used)."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue  # the listing's own, closed by now
        fds.add(int(name))
    return fds


def _supervise(channel: int, spec: LaunchSpec | ProtocolError) -> supervise.Served:
    """In a forked supervisor: ``channel`` on stdin and stdout, then supervise.serve."""
    os.dup2(channel, 0)
    os.dup2(channel, 1)
    os.close(channel)
    try:
        if fault("supervisor.fork"):  # its job's fork refused, before the pid line
            raise OSError(11, "Resource temporarily unavailable (fault point supervisor.fork)")
        return supervise.serve(spec)
    except OSError as exc:
        _tell_failure(exc)
        raise


def _tell_failure(exc: OSError) -> None:
    """Where the watcher waits for the job's pid: why there is none, with the errno
    (its start policy tells a passing cause, as EAGAIN or ENOSPC, from one that is
    not). After the handshake stdout is /dev/null, and the line goes nowhere."""
    what = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    line = json.dumps({"error": what, "errno": exc.errno or 0}) + "\n"
    try:
        os.write(1, line.encode())
    except OSError:
        pass  # the watcher went away: nobody to tell


def _exit(code: int) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _read_line(fd: int) -> bytes:
    """The spec line the watcher writes right after its request (b"" at EOF)."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            return b""
        if not chunk:
            return b""
        data += chunk
    return data


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not all(arg.isdigit() for arg in argv[1:]):
        sys.stderr.write(
            "usage: forkserver.py FD [MAX_JOBS] (started by the hopper watcher, not by hand)\n"
        )
        return 2
    try:
        ctrl = socket.socket(fileno=int(argv[1]))
    except OSError as exc:
        sys.stderr.write(f"hopper fork server: descriptor {argv[1]} is not a socket: {exc}\n")
        return 2
    ctrl.setblocking(True)
    return Server(ctrl, int(argv[2]) if len(argv) == 3 else MAX_JOBS).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
