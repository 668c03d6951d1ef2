"""identity: a process's start time from one read of /proc/<pid>/stat, as psutil's."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from hopper.proc import identity


def test_start_time_is_psutils() -> None:
    for pid in (os.getpid(), 1):
        started = identity.start_time(pid)
        assert started is not None
        assert abs(started - psutil.Process(pid).create_time()) < 0.01


def test_no_such_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert identity.start_time(proc.pid) is None
    assert not identity.is_alive(proc.pid, 1.0)
    assert identity.start_time(0) is None and identity.start_time(-1) is None


def test_is_alive_needs_the_same_start() -> None:
    me = os.getpid()
    started = identity.start_time(me)
    assert started is not None
    assert identity.is_alive(me, started)
    assert not identity.is_alive(me, started - 1)  # a reused pid: another process
    assert not identity.is_alive(None, started)
    assert not identity.is_alive(me, None)


def test_a_zombie_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = identity.start_time(proc.pid)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    try:
        assert identity.start_time(proc.pid) == started  # still there, as psutil says
        assert not identity.is_alive(proc.pid, started)
    finally:
        proc.wait()


def test_boot_time_read_again_after_a_while() -> None:
    identity._boot = (123.0, -1e9)  # read long ago: read again
    assert identity._boot_time() == psutil.boot_time()
    identity._boot = (123.0, identity.time.monotonic())  # fresh: kept
    assert identity._boot_time() == 123.0
    identity._boot = None
