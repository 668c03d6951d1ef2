"""The job's process, held at a gate until the watcher has recorded it ``running``.

Two ways, one contract: :func:`spawn` or :func:`fork` makes the job's process
(in a process group of its own, stdin /dev/null, stdout and stderr job.log,
signals at their defaults) without running the program; its pid is known at
once; :meth:`release` lets it exec the program in its working directory (the
empty string, or why it could not: the text exit.json's ``error`` gets), and
:meth:`refuse` kills it unreleased and reaps it.

``spawn``, the usual way: glibc's ``posix_spawn`` (a ``vfork``: no copy of the
supervisor's page tables, no copy-on-write faults in either process), called
through ctypes in a thread of the supervisor, since it returns only once the
child has exec'd. The gate is in the child's file actions:

1. it opens job.log again, through ``/proc/<supervisor>/fd/<N>``, while the
   supervisor holds a write lease on it (``F_SETLEASE``): the open waits until
   the lease is released — by :meth:`release`, or by the supervisor's death
   (its descriptor closes), or by the kernel after ``lease-break-time``
   (/proc/sys/fs, 45 s by default);
2. it enters ``/proc/<supervisor>/fd/<H>``, a descriptor that holds
   /dev/null until :meth:`release` puts the job's working directory there.
   So only a release makes the child run its program: after the supervisor's
   death the path is gone, after a lease that timed out it is not a
   directory; either way the child exits 127 without exec'ing anything.

The child's pid is read from ``/proc/self/task/<thread>/children`` while it
waits. Only an absolute program that starts with ``#!`` or an ELF header is
spawned (``ENOEXEC``, which execvpe answers by trying the next PATH entry,
cannot happen then); anything else, a job.log that takes no lease (another
process holds it open, NFS), or a system without what the gate needs is left
to ``fork``: the supervisor's fork, which waits on a pipe and execs the program
itself, falling back to ``os.execvpe`` as before.

Standard library only, like the supervisor that loads it by path.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py's wrappers convert to enums
import _thread
import array
import ctypes
import errno
import fcntl
import os
import signal
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING or __package__:
    from hopper.proc.protocol import lease_break_time
else:  # loaded by path beside the supervisor (python -I -S): its siblings are plain modules
    from protocol import lease_break_time

SPAWN_SETPGROUP, SPAWN_SETSIGDEF, SPAWN_SETSIGMASK = 0x02, 0x04, 0x08
# Python ignores SIGPIPE and SIGXFSZ; the job gets them, and SIGINT/SIGTERM, at their defaults.
RESET = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM)
GLIBC_SIGNALS = (32, 33)
MAGIC = (b"#!", b"\x7fELF")  # what the kernel execs without ENOEXEC
PID_WAIT = 10.0  # seconds for a spawned child to show in its thread's children
EXEC_WAIT = 30.0  # seconds, after the release, for a spawned child to exec
# glibc's opaque types, larger than they are (80, 336 and 128 bytes on x86_64 glibc).
ACTIONS_SIZE, ATTR_SIZE, SIGSET_SIZE = 512, 1024, 256

PID_SLICE = 0.005  # seconds between looks at whether the spawn failed before its gate

_libc: ctypes.CDLL | None = None
_attr: ctypes.Array[ctypes.c_char] | None = None  # the same for every job: built once
# The per-job buffers' types, made once in the fork server: a ctypes array type
# (``c_char * n``, ``c_char_p * n``) first made in a supervisor is a type object
# of its own there. argv and envp are plain arrays of addresses (_pointers).
_Actions = ctypes.c_char * ACTIONS_SIZE
_POINTER = ctypes.sizeof(ctypes.c_void_p)
Pointers = tuple["array.array[int]", "array.array[int]"]  # char *[] and its strings
_ADDRESS = next(code for code in "LQI" if array.array(code).itemsize == _POINTER)  # an address


class Gated(Protocol):
    """A job's process at its gate."""

    pid: int

    def release(self) -> str: ...

    def refuse(self) -> None: ...


def load() -> bool:
    """Whether :func:`spawn` can be used here (loads libc once; the fork server calls
    this before it forks, so each supervisor finds it done)."""
    global _libc, _attr
    if _libc is not None:
        return True
    try:
        # No use_errno: posix_spawn and its helpers return their error numbers, so
        # a call (in the spawning thread too) need not swap ctypes' copy of errno
        # (a thread's first such call makes a dict and a capsule for it).
        libc = ctypes.CDLL(None)
        libc.posix_spawn_file_actions_addchdir_np  # glibc >= 2.29  # noqa: B018
        held = lease_break_time()
        if held is None or held < 1:
            return False  # the lease would not hold the child at all
        tid = _thread.get_native_id()
        if not os.path.exists(f"/proc/self/task/{tid}/children"):
            return False  # no way to learn the child's pid before it execs
    except (OSError, AttributeError, ValueError):
        return False
    vp, i = ctypes.c_void_p, ctypes.c_int
    libc.posix_spawn.argtypes = [ctypes.POINTER(i), ctypes.c_char_p, vp, vp, vp, vp]
    libc.posix_spawn_file_actions_addopen.argtypes = [vp, i, ctypes.c_char_p, i, ctypes.c_uint]
    libc.posix_spawn_file_actions_adddup2.argtypes = [vp, i, i]
    libc.posix_spawn_file_actions_addclose.argtypes = [vp, i]
    libc.posix_spawn_file_actions_addchdir_np.argtypes = [vp, ctypes.c_char_p]
    libc.posix_spawnattr_setflags.argtypes = [vp, ctypes.c_short]
    libc.posix_spawnattr_setpgroup.argtypes = [vp, i]
    for name in ("init", "destroy"):  # looked up once here, not in every supervisor
        getattr(libc, f"posix_spawn_file_actions_{name}")
    attr = ctypes.create_string_buffer(ATTR_SIZE)
    reset, empty = (
        ctypes.create_string_buffer(SIGSET_SIZE),
        ctypes.create_string_buffer(SIGSET_SIZE),
    )
    libc.posix_spawnattr_init(attr)
    libc.sigemptyset(empty)
    libc.sigemptyset(reset)
    for sig in RESET:
        libc.sigaddset(reset, int(sig))
    # glibc's own signals (SIGCANCEL, SIGSETXID: 32, 33), which sigaddset refuses:
    # its spawned child would otherwise exec with them ignored; a fork's resets them.
    bits = bytearray(reset.raw)
    for number in GLIBC_SIGNALS:
        bits[(number - 1) // 8] |= 1 << ((number - 1) % 8)
    ctypes.memmove(reset, bytes(bits), len(bits))
    libc.posix_spawnattr_setflags(attr, SPAWN_SETPGROUP | SPAWN_SETSIGDEF | SPAWN_SETSIGMASK)
    libc.posix_spawnattr_setpgroup(attr, 0)
    libc.posix_spawnattr_setsigdefault(attr, reset)
    libc.posix_spawnattr_setsigmask(attr, empty)
    _libc, _attr = libc, attr
    return True


def describe(exc: BaseException) -> str:
    """The error text exit.json gets (what the forked job writes on its error pipe)."""
    return f"{type(exc).__name__}: {exc}"


def spawnable(path: str | None, argv: list[str], env: dict[str, str]) -> bool:
    """Whether :func:`spawn` runs exactly what ``fork`` would: an absolute program that
    execs without ENOEXEC, and an argv and environment execve takes as they are."""
    if path is None or not os.path.isabs(path) or _libc is None:
        return False
    if any("\0" in a for a in argv) or any(
        "\0" in k + v or "=" in k or not k for k, v in env.items()
    ):
        return False  # fork's execve raises its ValueError, as before
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        head = os.read(fd, 4)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head.startswith(MAGIC)


class Spawned:
    """A child of ``posix_spawn``, waiting in its file actions (see the module)."""

    def __init__(self, path: str, cwd: str, log_fd: int, hold: int) -> None:
        self.path, self.cwd, self.log_fd, self.hold = path, cwd, log_fd, hold
        self.pid = 0
        self.rc: int | None = None  # posix_spawn's result, once its thread is done
        self.tid = 0
        self.done = _thread.allocate_lock()
        self.done.acquire()  # released by the thread

    def run(
        self,
        actions: ctypes.Array[ctypes.c_char],
        attr: ctypes.Array[ctypes.c_char],
        argv: Pointers,
        envp: Pointers,
    ) -> None:
        """In the spawning thread: returns once the child exec'd, failed or was killed."""
        assert _libc is not None
        try:
            self.tid = _thread.get_native_id()
            pid = ctypes.c_int(0)
            argv_at, envp_at = argv[0].buffer_info()[0], envp[0].buffer_info()[0]
            self.rc = _libc.posix_spawn(
                ctypes.byref(pid), self.path.encode(), actions, attr, argv_at, envp_at
            )
            _libc.posix_spawn_file_actions_destroy(actions)
        finally:
            if self.rc is None:
                self.rc = errno.EFAULT
            self.done.release()

    def find(self) -> int:
        """The child's pid, read once it waits at its gate; 0 if the spawn ended first,
        or the pid could not be read (no descriptor to spare, PID_WAIT passed).

        Its open of job.log breaks our lease, and the kernel tells us with SIGURG
        (blocked, so it waits for us): no polling while the thread and the child start.
        """
        deadline = time.monotonic() + PID_WAIT
        while time.monotonic() < deadline:
            signal.sigtimedwait({signal.SIGURG}, PID_SLICE)
            if self.tid:
                try:
                    kids = _children(self.tid)
                except OSError:
                    return 0
                if kids:
                    return kids[0]
            if self.rc is not None:
                return 0
        return 0

    def _join(self, timeout: float = -1) -> bool:
        if self.done.acquire(timeout=timeout):
            self.done.release()
            return True
        return False

    def release(self) -> str:
        if self.rc is not None:  # the child left its gate before the release
            self._end()
            return (
                "NotStarted: the job's gate gave way before the watcher's release "
                "(/proc/sys/fs/lease-break-time passed); the job did not run"
            )
        try:
            target = os.open(self.cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:  # what os.chdir would have said
            self.refuse()
            return describe(exc)
        try:
            if not os.access(self.cwd, os.X_OK):
                self.refuse()
                return describe(PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.cwd))
            os.dup2(target, self.hold, inheritable=False)
        finally:
            os.close(target)
        fcntl.fcntl(self.log_fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        if not self._join(EXEC_WAIT):
            os.kill(self.pid, signal.SIGKILL)  # stuck in its exec: not started, after all
            self._join()
            self._end()
            return f"NotStarted: the job did not exec within {EXEC_WAIT:g}s of its release"
        os.close(self.hold)
        if self.rc:  # glibc reaped it; the program did not run
            return describe(OSError(self.rc, os.strerror(self.rc), self.path))
        return ""

    def refuse(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._join()
        self._end()

    def _end(self) -> None:
        """Reap the child unless glibc did (it does when the spawn failed)."""
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        try:
            fcntl.fcntl(self.log_fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            pass
        os.close(self.hold)


def spawn(path: str, argv: list[str], env: dict[str, str], cwd: str, log_fd: int) -> Spawned | None:
    """The job spawned at its gate, or None: fork it instead (see the module)."""
    assert _libc is not None and _attr is not None
    try:
        fcntl.fcntl(log_fd, fcntl.F_SETSIG, signal.SIGURG)  # not SIGIO: it would end us
        fcntl.fcntl(log_fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError:
        return None  # open elsewhere, or a file system without leases
    hold = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    job = Spawned(path, cwd, log_fd, hold)
    libc, attr = _libc, _attr
    actions = _Actions()
    libc.posix_spawn_file_actions_init(actions)
    me = os.getpid()
    libc.posix_spawn_file_actions_addclose(actions, log_fd)  # else our lease outlives us in it
    libc.posix_spawn_file_actions_addopen(actions, 0, b"/dev/null", os.O_RDONLY, 0)
    libc.posix_spawn_file_actions_addopen(actions, 1, b"/dev/null", os.O_WRONLY, 0)
    gate = f"/proc/{me}/fd/{log_fd}".encode()
    libc.posix_spawn_file_actions_addopen(actions, 1, gate, os.O_WRONLY | os.O_APPEND, 0)
    libc.posix_spawn_file_actions_adddup2(actions, 1, 2)
    libc.posix_spawn_file_actions_addchdir_np(actions, f"/proc/{me}/fd/{hold}".encode())
    cargv = _pointers([os.fsencode(a) for a in argv])
    cenv = _pointers([os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()])
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {signal.SIGURG})  # find() waits for it
    try:
        _thread.start_new_thread(job.run, (actions, attr, cargv, cenv))
    except RuntimeError:
        job.rc = errno.EAGAIN
        job.done.release()
    job.pid = job.find()
    if job.pid:
        return job
    # No pid: the child, if any, is at its gate, never to be released. Without the
    # lease its open goes on and its chdir into the placeholder fails: it exits 127.
    try:
        fcntl.fcntl(log_fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    except OSError:
        pass
    if not job._join(EXEC_WAIT):
        raise OSError(errno.EAGAIN, "the job's spawn did not end without its gate")
    os.close(hold)
    if job.rc == 0:  # cannot be: without a release its chdir fails
        raise OSError(errno.EPROTO, "the job's process passed its gate unreleased")
    return None  # it failed before (or at) its gate: fork instead


def _pointers(strings: list[bytes]) -> Pointers:
    """A NULL-terminated ``char *[]`` (argv, envp) for posix_spawn: an array of the
    addresses of the strings, each NUL-terminated, in a second array. The caller
    keeps both alive, never resized, until the call returns."""
    text = array.array("b", b"\0".join([*strings, b""]))
    at = text.buffer_info()[0]
    addresses = array.array(_ADDRESS)
    for item in strings:
        addresses.append(at)
        at += len(item) + 1
    addresses.append(0)
    return addresses, text


def _children(tid: int) -> list[int]:
    """The pids of what thread ``tid`` of ours forked; OSError if they cannot be read."""
    try:
        fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []  # the thread has ended: its result says why
    try:
        return [int(pid) for pid in os.read(fd, 4096).split()]
    except (OSError, ValueError):
        return []
    finally:
        os.close(fd)


class ForkedJob:
    """The job forked by the supervisor, waiting on a pipe (see the module)."""

    def __init__(self, pid: int, gate_w: int, err_r: int) -> None:
        self.pid, self.gate_w, self.err_r = pid, gate_w, err_r

    def release(self) -> str:
        os.write(self.gate_w, b"x")
        os.close(self.gate_w)
        error = os.read(self.err_r, 4096).decode(errors="replace")
        os.close(self.err_r)
        if error:
            os.waitpid(self.pid, 0)
        return error

    def refuse(self) -> None:
        os.close(self.gate_w)
        os.close(self.err_r)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def fork(
    found: str | None, argv: list[str], env: dict[str, str], cwd: str, log_fd: int
) -> ForkedJob:
    """The job forked, waiting on a pipe; after the release it execs ``found`` (the
    program looked up ahead), else what ``os.execvpe`` finds, whose error it reports."""
    gate_r, gate_w = os.pipe()
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the job, until exec
        try:
            os.close(gate_w)
            os.close(err_r)
            os.setpgid(0, 0)
            for sig in RESET:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            if os.read(gate_r, 1) != b"x":
                os._exit(125)
            os.close(gate_r)
            os.chdir(cwd)
            if found is not None:
                try:
                    os.execve(found, argv, env)  # noqa: S606 - an argv, no shell
                except OSError:
                    pass  # execvpe below: the same walk, and its error if nothing runs
            os.execvpe(argv[0], argv, env)  # noqa: S606 - an argv, no shell
        except BaseException as exc:
            try:
                os.write(err_w, describe(exc).encode())
            finally:
                os._exit(127)
    os.close(gate_r)
    os.close(err_w)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first
    return ForkedJob(pid, gate_w, err_r)
