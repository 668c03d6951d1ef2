"""Starting a job under its supervisor: the watcher's half of the handshake.

See proc/supervise.py for the protocol. The supervisor runs as
``python -I -S supervise.py`` in a new session, so it neither inherits the
watcher's terminal nor depends on hopper's import path, and it survives the
watcher (the systemd unit uses KillMode=process).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from hopper.proc.protocol import LaunchSpec as LaunchSpec  # the spec, for callers of launch

# Run by path, never imported here: importing it would put its directory on sys.path.
SUPERVISOR_SCRIPT = Path(__file__).with_name("supervise.py")


class SpawnFailed(OSError):
    """The supervisor could not be started or broke the handshake."""


def _start_supervisor(run_dir: Path | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-I", "-S", str(SUPERVISOR_SCRIPT)]
    try:
        return subprocess.Popen(
            [*argv, str(run_dir)] if run_dir else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            cwd=run_dir or "/",
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
    except OSError as exc:
        raise SpawnFailed(exc.errno, f"cannot start the supervisor: {exc.strerror}") from None


class SupervisorPool:
    """A few supervisors started ahead of need, so a job start does not wait
    for a Python interpreter to boot (about 30 ms, most of submit-to-start).

    A pooled supervisor blocks reading its spec; if the watcher goes away it
    reads EOF and exits. Each one taken is replaced at once, in the background.
    """

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._idle: list[subprocess.Popen[bytes]] = []

    def take(self) -> subprocess.Popen[bytes] | None:
        proc = None
        while self._idle and proc is None:
            candidate = self._idle.pop(0)
            if candidate.poll() is None:
                proc = candidate
        self.fill()
        return proc

    def fill(self) -> None:
        while len(self._idle) < self.size:
            try:
                self._idle.append(_start_supervisor(None))
            except SpawnFailed:
                return  # starts fall back to a fresh supervisor, which reports the error

    def close(self) -> None:
        for proc in self._idle:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.stdout.close()
        for proc in self._idle:
            proc.wait()
        self._idle.clear()


def launch(
    run_dir: Path, spec: LaunchSpec, pool: SupervisorPool | None = None
) -> subprocess.Popen[bytes]:
    """Start (or take from ``pool``) a supervisor and hand it the spec; the job is
    forked but gated."""
    proc = (pool.take() if pool else None) or _start_supervisor(run_dir)
    assert proc.stdin is not None
    try:
        payload = dataclasses.replace(spec, run_dir=str(run_dir)).to_json()
        proc.stdin.write(payload.encode() + b"\n")
        proc.stdin.flush()
    except BrokenPipeError:
        proc.wait()
        raise SpawnFailed(0, "the supervisor exited before reading the job spec") from None
    return proc


def read_pid(proc: subprocess.Popen[bytes]) -> int:
    """The job's pid, as the supervisor reports it once the job is forked."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        return int(json.loads(line)["pid"])
    except (ValueError, KeyError, TypeError):
        proc.kill()
        proc.wait()
        raise SpawnFailed(0, f"the supervisor broke the handshake (said {line[:200]!r})") from None


def release(proc: subprocess.Popen[bytes]) -> None:
    """Let the gated job exec. After this the supervisor needs nothing from us."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # it died; its missing exit record is handled by the monitor
    finally:
        proc.stdin.close()
        proc.stdout.close()


def abandon(proc: subprocess.Popen[bytes]) -> None:
    """Do not release: the supervisor kills the gated job and records started=false."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()
    proc.wait()
