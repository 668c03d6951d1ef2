"""Starting a session host that outlives its starter, with a deadline on every wait.

:func:`launch` (the executor's side) runs ``python -I -m hopper.sessionhost``
(or ``argv``) with the spec on stdin; that process calls :func:`detach`,
which forks the host into a new session, reports its pid and exits. The host's
stderr goes to the session's host.log. Standard library only.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from hopper.sessionhost.agentapi import InteractiveAgent
from hopper.sessionhost.contract import HOST_LOG, REQUESTS_DIR
from hopper.sessionhost.host import serve
from hopper.sessionhost.spec import HostSpec

HOST_ARGV = (sys.executable, "-I", "-m", "hopper.sessionhost")
LAUNCH_TIMEOUT = 15.0


class LaunchFailed(Exception):
    """The host did not report its pid in time, or its first process failed."""


def launch(spec: HostSpec, argv: Sequence[str] = HOST_ARGV, timeout: float = LAUNCH_TIMEOUT) -> int:
    """Start a host for ``spec``; its pid. Raises :class:`LaunchFailed`."""
    session_dir = Path(spec.session_dir)
    os.makedirs(session_dir / REQUESTS_DIR, mode=0o700, exist_ok=True)
    log_fd = os.open(
        session_dir / HOST_LOG,
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log_fd)
    assert proc.stdin is not None and proc.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        proc.stdin.write(json.dumps(asdict(spec)).encode() + b"\n")
        proc.stdin.close()
        data = b""
        fd = proc.stdout.fileno()
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LaunchFailed(f"the session host did not start within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
        proc.wait(max(0.1, deadline - time.monotonic()))
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc.kill()
        proc.wait()
        raise LaunchFailed(f"the session host did not start: {exc}") from exc
    finally:
        proc.stdout.close()
    try:
        pid = json.loads(data.partition(b"\n")[0])["pid"]
    except (ValueError, KeyError, TypeError) as exc:
        raise LaunchFailed(
            f"the session host did not report its pid (see {session_dir / HOST_LOG})"
        ) from exc
    if not isinstance(pid, int):
        raise LaunchFailed(f"the session host reported {data[:80]!r}")
    return pid


def detach(spec: HostSpec, agent_for: Callable[[HostSpec], InteractiveAgent]) -> int:
    """In the first process: fork the host away, report its pid, return."""
    agent = agent_for(spec)  # an unknown agent fails here, before any pid is reported
    pid = os.fork()
    if pid:
        return 0
    os.setsid()
    sys.stdout.write(json.dumps({"pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.chdir(spec.session_dir)
    code = serve(spec, agent)
    os._exit(code)
