"""A job's end said before its exit.json's fsyncs (``ended``), filed after them
(``done``): the supervisor's side and the fork client's, in-process.

The supervisor renames exit.json in, says ``ended``, then fsyncs the file and its
directory and says ``done`` (proc/rundir.py ``RunDir.replace``'s ``placed``,
proc/supervise.py ``Supervisor.record``); the fork client marks the handle
``ended`` without taking it off its live supervisors (proc/forkclient.py). The
relay is in tests/test_forkserver_linked.py, the watcher's side in
tests/test_deferred_filing.py.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest

from hopper.proc import forkclient, supervise
from hopper.proc.protocol import LaunchSpec
from hopper.proc.rundir import RunDir


def _calls(monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> list[str]:
    """What happens, in order: each fsync (of the file or of the directory)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        seen.append("fsync dir" if is_dir else "fsync file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_placed_is_called_with_the_file_in_place_before_its_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = RunDir(str(tmp_path))
    seen = _calls(monkeypatch, tmp_path)

    def placed() -> None:
        seen.append("placed " + (tmp_path / "exit.json").read_text())

    files.replace("exit.json", b"{}\n", durable=True, placed=placed)
    assert seen == ["placed {}\n", "fsync file", "fsync dir"]
    assert sorted(os.listdir(tmp_path)) == ["exit.json"]  # no temp file left


def test_a_replace_that_is_not_durable_fsyncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _calls(monkeypatch, tmp_path)
    RunDir(str(tmp_path)).replace("resources.json", b"{}\n", durable=False)
    assert seen == []


def test_the_supervisor_says_ended_once_before_the_fsyncs_even_when_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync refused (EIO) is retried until it lands, as ever; ``ended`` was said
    once, with exit.json whole."""
    spec = LaunchSpec(argv=["true"], cwd=str(tmp_path), env={}, log=str(tmp_path / "job.log"))
    sup = supervise.Supervisor(str(tmp_path), spec)
    seen = _calls(monkeypatch, tmp_path)
    real = os.fsync
    refuse = [True]

    def fsync(fd: int) -> None:
        if refuse[0]:
            refuse[0] = False
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(supervise.time, "sleep", lambda seconds: None)

    def ended() -> None:
        record = json.loads((tmp_path / "exit.json").read_text())
        seen.append(f"ended started={record['started']}")

    assert sup.record(started=True, ended=ended)
    assert seen == ["ended started=True", "fsync file", "fsync dir"]


def test_the_fork_client_marks_an_ended_supervisor_and_keeps_it_live_until_done() -> None:
    server = forkclient.ForkServer()
    ours, theirs = socket.socketpair()
    theirs.close()
    pid = os.getpid()
    handle = forkclient.Forked(pid, ours, server, server.generation)
    server._live[pid] = handle
    try:
        server._report(b"ended %d" % pid)
        assert (handle.ended, handle.done, handle.returncode) == (True, False, None)
        assert server._live.get(pid) is handle  # its done (or exit) is still to come
        server._report(b"done %d" % pid)
        assert (handle.done, handle.returncode) == (True, 0)
        assert pid not in server._live
        server._report(b"ended %d" % pid)  # one for a handle it no longer has: ignored
    finally:
        handle.stdin.close()
        handle.stdout.close()
