"""Supervisors forked by the fork server (proc/forkserver.py) and its client
(proc/forkclient.py), started through proc/spawn.py."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
from collections.abc import Collection
from pathlib import Path

import psutil
import pytest

from conftest import Watchers, bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.proc import forkclient, identity, spawn
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


def _spec(run_dir: Path, script: str) -> spawn.LaunchSpec:
    return spawn.LaunchSpec(
        argv=["sh", "-c", script],
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )


def _gated(gate: Path, code: int) -> str:
    return f"while [ ! -e {gate} ]; do sleep 0.02; done; exit {code}"


def _start(server: forkclient.ForkServer | None, run_dir: Path, script: str) -> spawn.Supervisor:
    run_dir.mkdir(exist_ok=True)
    proc = spawn.launch(run_dir, _spec(run_dir, script), server)
    spawn.read_pid(proc)
    spawn.release(proc)
    return proc


def _exit(run_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run_dir / "exit.json").read_text())
    return data


def test_a_forked_supervisor_runs_its_job_in_a_session_of_its_own(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    proc = _start(server, tmp_path / "run", "echo hello; exit 3")
    assert isinstance(proc, forkclient.Forked)
    sup = psutil.Process(proc.pid)
    assert sup.ppid() == server.pid  # not booted: forked by the server
    assert os.getsid(proc.pid) == proc.pid  # setsid: it outlives the server and the watcher
    assert proc.wait(timeout=30) == 0
    record = _exit(tmp_path / "run")
    assert (record["started"], record["exit_code"], record["supervisor_pid"]) == (True, 3, proc.pid)
    assert (tmp_path / "run" / "job.log").read_text() == "hello\n"


def test_the_fork_server_wakes_the_watcher_with_sigchld(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    proc = _start(server, tmp_path / "run", _gated(gate, 0))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        while signal.sigtimedwait({signal.SIGCHLD}, 0) is not None:
            pass  # anything pending from before
        gate.touch()
        info = signal.sigtimedwait({signal.SIGCHLD}, 30)
        assert info is not None and info.si_pid == server.pid
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert proc.wait(timeout=30) == 0


def test_a_supervisor_says_done_once_its_exit_record_is_durable_and_waits_for_the_next(
    server: forkclient.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `done PID` report comes with exit.json already in place: the watcher files
    the job then; the supervisor (the spare given this start) does not exit but waits,
    out of the run directory, for the next job (test_forkserver_reuse.py)."""
    run_dir = tmp_path / "run"
    gate = tmp_path / "gate"
    proc = _start(server, run_dir, _gated(gate, 4))
    assert isinstance(proc, forkclient.Forked)
    heard: list[tuple[bytes, bool, bool]] = []  # message, exit.json there, handle done
    report = server._report

    def spy(msg: bytes) -> None:
        report(msg)
        if msg.split(b" ")[1:2] == [str(proc.pid).encode()]:
            heard.append((msg.split(b" ")[0], (run_dir / "exit.json").exists(), proc.done))

    monkeypatch.setattr(server, "_report", spy)
    gate.touch()
    assert proc.wait(timeout=30) == 0  # its job is over
    assert heard == [(b"done", True, True)]
    assert _exit(run_dir)["exit_code"] == 4
    sup = psutil.Process(proc.pid)
    assert sup.status() != psutil.STATUS_ZOMBIE
    # out of the run directory right after its `done` (it says done first)
    wait_for(lambda: sup.cwd() == "/", what="the done supervisor to leave the run directory")


def test_supervisors_outlive_a_killed_fork_server_which_the_next_start_replaces(
    server: forkclient.ForkServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = tmp_path / "gate"
    first = _start(server, tmp_path / "a", _gated(gate, 4))
    old_server = server.pid
    assert old_server is not None
    os.kill(old_server, signal.SIGKILL)
    psutil.Process(old_server).wait(timeout=10)
    assert first.poll() is None  # its supervisor and job run on
    caplog.set_level(logging.WARNING, logger="hopper.proc.forkclient")
    second = _start(server, tmp_path / "b", "exit 5")
    assert isinstance(second, forkclient.Forked)
    assert server.pid not in (None, old_server)
    assert "starting a new one" in caplog.text
    assert second.wait(timeout=30) == 0
    assert _exit(tmp_path / "b")["exit_code"] == 5
    assert first.poll() is None
    gate.touch()
    first.wait(timeout=30)  # an orphan now: known gone by pid and start time
    assert _exit(tmp_path / "a")["exit_code"] == 4


def test_a_fork_server_that_does_not_answer_is_replaced(
    server: forkclient.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forkclient, "REPLY_TIMEOUT", 1.0)
    stuck = server.pid
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)
    proc = _start(server, tmp_path / "run", "exit 0")
    assert isinstance(proc, forkclient.Forked) and server.pid != stuck
    assert not psutil.pid_exists(stuck) or psutil.Process(stuck).status() == psutil.STATUS_ZOMBIE
    assert proc.wait(timeout=30) == 0


def _fake_server(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake_forkserver.py"
    script.write_text(
        "import socket, sys\n"
        "ctrl = socket.socket(fileno=int(sys.argv[1]))\n"
        "while True:\n"
        "    msg, fds, _, _ = socket.recv_fds(ctrl, 64, 4)\n"
        "    if not msg:\n"
        "        sys.exit(0)\n" + body
    )
    return script


def test_a_fork_server_that_breaks_the_protocol_is_replaced_then_supervisors_booted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = _fake_server(tmp_path, "    ctrl.send(b'?')\n")
    monkeypatch.setattr(forkclient, "FORKSERVER_SCRIPT", fake)
    caplog.set_level(logging.WARNING, logger="hopper.proc.forkclient")
    srv = forkclient.ForkServer()
    try:
        proc = _start(srv, tmp_path / "run", "exit 6")
        assert not isinstance(proc, forkclient.Forked)  # booted, as without a fork server
        assert proc.wait(timeout=30) == 0
        assert _exit(tmp_path / "run")["exit_code"] == 6
        assert "which is not a report" in caplog.text
        assert "failed twice" in caplog.text and "booting a supervisor instead" in caplog.text
    finally:
        srv.close()


def test_a_fork_error_is_reported_and_the_supervisor_booted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    body = "    ctrl.send(b'error cannot fork a supervisor: Resource temporarily unavailable')\n"
    monkeypatch.setattr(forkclient, "FORKSERVER_SCRIPT", _fake_server(tmp_path, body))
    caplog.set_level(logging.WARNING, logger="hopper.proc.forkclient")
    srv = forkclient.ForkServer()
    try:
        with pytest.raises(spawn.SpawnFailed, match="Resource temporarily unavailable"):
            srv.fork(b"{}\n")
        proc = _start(srv, tmp_path / "run", "exit 0")
        assert not isinstance(proc, forkclient.Forked)
        assert proc.wait(timeout=30) == 0
    finally:
        srv.close()


def test_a_fork_server_that_cannot_start_leaves_starts_to_booted_supervisors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forkclient, "FORKSERVER_SCRIPT", tmp_path / "missing.py")
    srv = forkclient.ForkServer()
    try:
        proc = _start(srv, tmp_path / "run", "exit 0")
        assert not isinstance(proc, forkclient.Forked)
        assert proc.wait(timeout=30) == 0
    finally:
        srv.close()


def test_a_bad_spec_is_refused_by_the_forked_supervisor(capfd: pytest.CaptureFixture[str]) -> None:
    server = forkclient.ForkServer()  # started here: its stderr is the captured one
    try:
        proc = server.fork(b'{"argv": "not a list"}\n')
        with pytest.raises(spawn.SpawnFailed, match="broke the handshake"):
            spawn.read_pid(proc)
        assert proc.wait(timeout=10) in (2, -signal.SIGKILL)  # it exits 2; read_pid also kills
    finally:
        server.close()
    assert "'argv' must be a list of strings" in capfd.readouterr().err


def test_closing_the_fork_server_leaves_its_supervisors_running(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    proc = _start(server, tmp_path / "run", _gated(gate, 0))
    old = server.pid
    assert old is not None
    server.close()
    assert not psutil.pid_exists(old)
    assert proc.poll() is None
    gate.touch()
    proc.wait(timeout=30)
    assert _exit(tmp_path / "run")["started"] is True


def test_an_unreleased_forked_supervisor_is_found_by_its_run_dir_and_abandoned(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = spawn.launch(run_dir, _spec(run_dir, "exit 0"), server)
    spawn.read_pid(proc)
    # (the gated job, a fork of its supervisor not yet exec'd, matches as well)
    assert proc.pid in [p.pid for p in identity.supervisors_of(str(run_dir))]
    spawn.abandon(proc)
    assert _exit(run_dir)["started"] is False


def _fork_server_of(watcher: int) -> psutil.Process | None:
    for child in psutil.Process(watcher).children():
        if any(part.endswith("forkserver.py") for part in child.cmdline()):
            return child
    return None


def test_the_watcher_replaces_a_dead_fork_server_and_its_running_jobs_go_on(
    layout: Layout, watchers: Watchers
) -> None:
    gate = layout.root / "gate"
    drop(layout, "long", bash(_gated(gate, 0)))
    watcher = watchers.start()

    def records() -> dict[str, JobRecord]:
        out = {}
        for d in layout.runs.iterdir():
            if not d.name.startswith(".") and (d / "job.json").exists():
                rec = read_record(d)
                out[rec.name] = rec
        return out

    wait_for(lambda: getattr(records().get("long"), "state", None) is JobState.RUNNING)
    first = _fork_server_of(watcher.pid)
    assert first is not None
    assert psutil.Process(records()["long"].supervisor_pid).ppid() == first.pid
    first.kill()
    drop(layout, "next", bash("echo next"))
    wait_for(lambda: getattr(records().get("next"), "state", None) is JobState.SUCCEEDED)
    second = _fork_server_of(watcher.pid)
    assert second is not None and second.pid != first.pid
    assert records()["long"].state is JobState.RUNNING
    gate.touch()
    wait_for(lambda: getattr(records().get("long"), "state", None) is JobState.SUCCEEDED)


def test_starts_are_begun_without_waiting_and_collected_in_any_order(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """spawn.begin hands the spec over and returns; the fork server's answers
    are matched to the requests in order, whichever start is collected first."""
    stopped = server.pid
    assert stopped is not None
    server.start()
    os.kill(stopped, signal.SIGSTOP)  # nothing is answered while it is stopped
    try:
        pending = []
        for name in ("a", "b", "c"):
            (tmp_path / name).mkdir()
            spec = _spec(tmp_path / name, f"exit {ord(name) - ord('a') + 3}")
            pending.append(spawn.begin(tmp_path / name, spec, server))  # returns at once
        ready, _, _ = select.select(pending, [], [], 0.2)
        assert ready == []  # no report yet: the server has not even forked
    finally:
        os.kill(stopped, signal.SIGCONT)
    procs = []
    for start in reversed(pending):  # the last asked first
        proc, pid = start.collect()
        assert isinstance(proc, forkclient.Forked) and psutil.Process(pid).ppid() == proc.pid
        spawn.release(proc)
        procs.append(proc)
    for proc in procs:
        assert proc.wait(timeout=30) == 0
    assert [_exit(tmp_path / n)["exit_code"] for n in ("a", "b", "c")] == [3, 4, 5]
    assert server.pid == stopped  # the same server answered all three


def test_a_start_the_watcher_never_collects_never_runs(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    start = spawn.begin(run_dir, _spec(run_dir, f"touch {tmp_path / 'ran'}"), server)
    select.select([start], [], [], 30)  # its supervisor has forked the gated job
    start.abandon()
    wait_for(lambda: (run_dir / "exit.json").exists(), what="the supervisor's exit record")
    assert _exit(run_dir)["started"] is False
    assert not (tmp_path / "ran").exists()


# -- the spare: a supervisor forked ahead of the next request ------------------------------
def _spare(server: forkclient.ForkServer, other_than: Collection[int] = ()) -> int:
    """The pid of the server's spare, once it waits (the one child not yet given a job:
    not one of ``other_than``, the supervisors that served one and wait for the next)."""
    assert server.pid is not None
    found: list[int] = []

    def idle(child: psutil.Process) -> bool:
        try:
            # Left the server (its own session): a child just forked is not waiting yet.
            settled = os.getsid(child.pid) == child.pid
            return settled and child.status() != psutil.STATUS_ZOMBIE and child.cwd() == "/"
        except (psutil.Error, ProcessLookupError):
            return False  # exited meanwhile

    def waiting() -> bool:
        children = psutil.Process(server.pid).children()
        found[:] = [c.pid for c in children if c.pid not in other_than and idle(c)]
        return len(found) == 1

    wait_for(waiting, what="the fork server's spare supervisor")
    return found[0]


def test_a_start_is_given_the_spare_forked_before_it_and_a_new_spare_follows(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    spare = _spare(server)
    assert os.getsid(spare) == spare  # in a session of its own before any job is known
    gate = tmp_path / "gate"
    proc = _start(server, tmp_path / "run", _gated(gate, 6))
    assert proc.pid == spare  # no fork on the start's path but the job's own
    assert psutil.Process(spare).cwd() == str(tmp_path / "run")
    follower = _spare(server, other_than=(spare,))
    assert follower != spare
    gate.touch()
    assert proc.wait(timeout=30) == 0
    record = _exit(tmp_path / "run")
    assert (record["started"], record["exit_code"], record["supervisor_pid"]) == (True, 6, spare)


def test_a_spare_that_died_is_replaced_by_a_fork_and_the_start_runs(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    dead = _spare(server)
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: dead not in [c.pid for c in psutil.Process(server.pid).children()])
    proc = _start(server, tmp_path / "run", "exit 7")
    assert isinstance(proc, forkclient.Forked) and proc.pid != dead
    assert proc.wait(timeout=30) == 0
    assert _exit(tmp_path / "run")["exit_code"] == 7
    _spare(server, other_than=(proc.pid,))  # and a new spare waits again


def test_a_supervisor_forked_for_a_start_says_done_before_its_exit(
    server: forkclient.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No spare (it died): the start's supervisor is forked for it and serves that one
    job; its `done` (supervise.serve returned a job done) comes with exit.json in
    place and before the `exit` of its reaping."""
    dead = _spare(server)
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: dead not in [c.pid for c in psutil.Process(server.pid).children()])
    run_dir = tmp_path / "run"
    gate = tmp_path / "gate"
    proc = _start(server, run_dir, _gated(gate, 5))
    assert isinstance(proc, forkclient.Forked) and proc.pid != dead
    heard: list[tuple[bytes, bool]] = []  # message, exit.json there
    report = server._report

    def spy(msg: bytes) -> None:
        report(msg)
        if msg.split(b" ")[1:2] == [str(proc.pid).encode()]:
            heard.append((msg.split(b" ")[0], (run_dir / "exit.json").exists()))

    monkeypatch.setattr(server, "_report", spy)
    gate.touch()
    assert proc.wait(timeout=30) == 0

    def both() -> bool:
        server.collect()  # reads the reports that follow the handle's end
        return len(heard) == 2

    wait_for(both, what="its done and exit reports")
    assert heard == [(b"done", True), (b"exit", True)]
    assert _exit(run_dir)["exit_code"] == 5


def test_the_spare_exits_with_the_fork_server_having_run_nothing(
    server: forkclient.ForkServer,
) -> None:
    spare = psutil.Process(_spare(server))
    server.close()

    def gone() -> bool:
        try:
            return spare.status() == psutil.STATUS_ZOMBIE  # orphaned; its reaper may be slow
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, what="the spare to exit with its fork server")
