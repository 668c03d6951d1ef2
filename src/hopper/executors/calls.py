"""Engine commands off the watcher's loop: each with a deadline, each answer a value.

Theory of operation. A container engine or a Slurm controller can hang (a
wedged podman, a slurmctld that never answers), and the watcher's loop must
keep its heartbeat and ``WATCHDOG=1`` whatever they do. So the executors
never run such a command on the loop: they hand a piece of work to their
:class:`Lane` (a few worker threads of their own) and get a :class:`Call`
back at once. The loop looks at the call when it comes round (``done()``,
or select on ``fileno()``, readable once the answer is in) and takes its
value with ``result()``; a finished call also wakes the loop's sleep.

Each command inside the work runs through :meth:`Lane.run`: in its own
process group, killed (the whole group, SIGKILL) at its deadline, and
answered as an :class:`Answer` that says what happened: its output, or that
it did not answer within so many seconds and was killed, or that it could
not run at all. :meth:`Lane.close` kills whatever still runs, so a watcher
going away never waits on a hung engine.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
DRAIN_AFTER_KILL = 2.0  # seconds to read what a killed command left in its pipes


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Answer:
    """What one command did: its exit status and output, or why there is none."""

    argv: tuple[str, ...]
    returncode: int | None  # None: it did not run, or was killed at its deadline
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0  # how long it took (to its end, or to its kill)
    timeout: float = 0.0  # its deadline, in seconds from its start
    timed_out: bool = False  # killed at its deadline
    error: str | None = None  # could not run it (not installed, not executable …)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def command(self) -> str:
        """``podman image inspect`` / ``sbatch``: the program's name and its verb(s)."""
        words = [os.path.basename(self.argv[0])] if self.argv else ["?"]
        for arg in self.argv[1:]:
            if arg.startswith("-") or len(words) >= 3:
                break
            words.append(arg)
        return " ".join(words)

    def why(self) -> str:
        """Why there is no answer, for a log line or a job's reason ('' when it ran)."""
        if self.timed_out:
            return f"`{self.command}` did not answer within {self.timeout:g}s; it was killed"
        if self.error is not None:
            return f"`{self.command}` could not run: {self.error}"
        return ""


class Call(Generic[T]):
    """Work handed to a lane: ``done()``, ``result()``, and a descriptor to select on."""

    def __init__(self, future: Future[T]) -> None:
        self._future = future
        self._pipe: tuple[int, int] | None = None  # made by the first fileno()
        self._closed = False
        self._lock = threading.Lock()

    def _finished(self) -> None:
        with self._lock:
            if self._pipe is not None and not self._closed:
                os.write(self._pipe[1], b"x")

    def fileno(self) -> int:
        r"""Readable once the work is done (select on it with other descriptors);
        a call whose fileno was asked for must be :meth:`close`\ d."""
        with self._lock:
            if self._closed:
                raise ValueError("the call is closed")
            if self._pipe is None:
                self._pipe = os.pipe()
                if self._future.done():
                    os.write(self._pipe[1], b"x")
            return self._pipe[0]

    def done(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the work; True once it is done."""
        return wait([self._future], timeout=timeout).not_done == set()

    def result(self) -> T:
        """The work's value (raises what the work raised); call only once done."""
        return self._future.result(timeout=0)

    def close(self) -> None:
        """Its descriptor goes (the work, if still running, ends by its own deadline)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pipe is not None:
                os.close(self._pipe[0])
                os.close(self._pipe[1])


def wait_alive(call: Call[T], keepalive: Callable[[], None], slice_: float = 0.2) -> T:
    """Wait for a call the caller cannot go on without (recovery's one Slurm listing),
    calling ``keepalive`` (heartbeat, ``WATCHDOG=1``) meanwhile: bounded by the
    deadlines of the commands inside it."""
    while not call.wait(slice_):
        keepalive()
    return call.result()


class Lane:
    """A few worker threads for one engine's commands; nothing here runs on the loop.

    ``wake`` is called (from a worker thread) when a call is done: the
    watcher's self-pipe, so its sleep ends and the answer is taken at once.
    """

    def __init__(self, name: str, workers: int = 4, wake: Callable[[], None] = _nothing) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"hopper-{name}")
        self._wake = wake
        self._live: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, work: Callable[[], T]) -> Call[T]:
        """Run ``work`` on a worker thread; its :class:`Call` comes back at once."""
        future: Future[T] = self._pool.submit(work)
        call = Call(future)

        def finished(_: Future[T]) -> None:
            call._finished()
            try:
                self._wake()
            except OSError:
                pass  # the loop's pipe is gone: the watcher is stopping

        future.add_done_callback(finished)
        return call

    def run(
        self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> Answer:
        """Run one command (inside work on this lane): killed at ``timeout`` seconds."""
        if self._closed:
            return Answer(tuple(argv), None, timeout=timeout, error="the watcher is stopping")
        answer = run_command(argv, timeout, env, self._track)
        if answer.timed_out:
            log.warning("%s: %s", self.name, answer.why())
        if self._closed and answer.returncode is not None and answer.returncode < 0:
            return Answer(answer.argv, None, timeout=timeout, error="the watcher is stopping")
        return answer

    def _track(self, proc: subprocess.Popen[str], live: bool) -> None:
        with self._lock:
            if live:
                self._live.add(proc)
            else:
                self._live.discard(proc)
        if live and self._closed:
            _kill_group(proc)

    def close(self) -> None:
        """The watcher is going away: commands still running are killed, no more start."""
        self._closed = True
        self._wake = _nothing  # the loop's pipe closes after this
        with self._lock:
            live = list(self._live)
        for proc in live:
            _kill_group(proc)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.returncode is not None:
        return  # reaped: its group id may be someone else's now
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _drain(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What a killed command left in its pipes; a grandchild that left its group and
    holds them open is not waited for."""
    try:
        return proc.communicate(timeout=DRAIN_AFTER_KILL)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return "", ""


def run_command(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    track: Callable[[subprocess.Popen[str], bool], None] | None = None,
) -> Answer:
    """Run ``argv`` in its own process group, killed (the group) at ``timeout`` seconds.

    Never raises for the command's sake: a command that cannot run or does not
    answer in time comes back as an :class:`Answer` saying so.
    """
    argv = tuple(argv)
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=None if env is None else dict(env),
            start_new_session=True,  # its whole group is killed at the deadline
        )
    except OSError as exc:
        return Answer(argv, None, timeout=timeout, error=exc.strerror or str(exc))
    if track is not None:
        track(proc, True)
    try:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = _drain(proc)
            took = time.monotonic() - began
            return Answer(argv, None, out, err, took, timeout, timed_out=True)
    finally:
        if track is not None:
            track(proc, False)
    return Answer(argv, proc.returncode, out, err, time.monotonic() - began, timeout)
