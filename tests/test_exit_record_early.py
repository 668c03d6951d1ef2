"""A job's end said before its exit.json's fsyncs (``ended``), filed after them
(``done``): the supervisor's side and the fork client's, in-process.

The supervisor renames exit.json in, says ``ended``, then fsyncs the file and its
directory and says ``done`` (proc/rundir.py ``RunDir.place`` then ``settle``,
proc/supervise.py ``Supervisor.place_record`` then ``settle_record``, as
``serve`` returns them to the fork server: ``Served.ending``, ``finish``); the
fork client marks the handle
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


def test_a_placed_file_is_in_place_whole_before_its_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = RunDir(str(tmp_path))
    seen = _calls(monkeypatch, tmp_path)
    placed = files.place("exit.json", b"{}\n")
    seen.append("placed " + (tmp_path / "exit.json").read_text())
    files.settle(placed, durable=True)
    assert seen == ["placed {}\n", "fsync file", "fsync dir"]
    with pytest.raises(OSError):
        os.fstat(placed.fd)  # settled: its descriptor closed
    assert sorted(os.listdir(tmp_path)) == ["exit.json"]  # no temp file left


def test_a_replace_that_is_not_durable_fsyncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _calls(monkeypatch, tmp_path)
    RunDir(str(tmp_path)).replace("resources.json", b"{}\n", durable=False)
    assert seen == []


def test_an_exit_record_in_place_is_made_durable_even_when_an_fsync_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placed (whole, before any fsync), then settled: an fsync refused (EIO) is
    retried until it lands, the file placed again first, as ever."""
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

    data = sup.exit_data(started=True)
    placed = sup.place_record(data)
    assert placed is not None
    record = json.loads((tmp_path / "exit.json").read_text())
    seen.append(f"ended started={record['started']}")
    assert sup.settle_record(placed, data)
    assert seen == ["ended started=True", "fsync file", "fsync dir"]
    assert json.loads((tmp_path / "exit.json").read_text()) == json.loads(data)
    assert sorted(os.listdir(tmp_path)) == ["exit.json"]  # no temp file left


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
