"""A start that goes wrong at the fork server, its spare or a supervisor costs only its job.

Each ordering the watcher can meet, made to happen with real processes: a
supervisor reported gone before its handle is made (it died before it
reported its job's pid: its run directory gone, no inode for job.log, its
fork refused), the fork server lost between its pid answer and the handle,
the fork server's own fork refused. Every wait ends by a deadline.
"""

from __future__ import annotations

import errno
import os
import resource
import select
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import wait_for
from hopper.proc import forkclient, spawn

Cause = Callable[[Path, pytest.MonkeyPatch], Path]


def _spec(run_dir: Path, script: str) -> spawn.LaunchSpec:
    return spawn.LaunchSpec(
        argv=["sh", "-c", script],
        cwd="/",
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )


class SigChld:
    """The next SIGCHLD from a given pid (the fork server's, sent once it has reaped
    a supervisor and written its ``exit`` report), SIGCHLD blocked here meanwhile
    (only here: a server started after the block would inherit it)."""

    def __init__(self) -> None:
        self.old: set[signal.Signals] | None = None

    def block(self) -> None:
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        self.drain()

    def drain(self) -> None:
        while signal.sigtimedwait({signal.SIGCHLD}, 0) is not None:
            pass  # anything pending from before

    def wait(self, pid: int) -> None:
        while True:
            info = signal.sigtimedwait({signal.SIGCHLD}, 30)
            assert info is not None, "no SIGCHLD from the fork server within 30s"
            if info.si_pid == pid:
                return


@pytest.fixture
def sigchld() -> Iterator[SigChld]:
    waiter = SigChld()
    yield waiter
    if waiter.old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, waiter.old)


def _run_dir_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return tmp_path / "removed"  # the supervisor cannot chdir into it


def _no_inode_for_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    opts = "size=1m,nr_inodes=8"
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mount)], check=True)
    run_dir = mount / "run"
    run_dir.mkdir()
    try:
        for n in range(100):
            (mount / f"f{n}").touch()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        pytest.fail("the tmpfs never ran out of inodes")
    return run_dir


def _fork_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOPPER_CRASH_AT", "supervisor.fork")  # read by the fork server
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return run_dir


@pytest.fixture
def unmount(tmp_path: Path) -> Iterator[None]:
    yield
    if (tmp_path / "small").is_dir():
        subprocess.run(["umount", "-l", str(tmp_path / "small")], check=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("cause", "code"),
    [(_run_dir_gone, errno.ENOENT), (_no_inode_for_the_log, errno.ENOSPC), (_fork_refused, 11)],
    ids=["run_dir_gone", "no_inode_for_job_log", "supervisor_fork_refused"],
)
def test_an_exit_reported_before_its_handle_is_kept_and_the_start_fails(
    cause: Cause,
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sigchld: SigChld,
    unmount: None,
) -> None:
    """Was: the report was dropped and the watcher waited for it for good."""
    run_dir = cause(tmp_path, monkeypatch)
    server = forkclient.ForkServer()
    server.start()
    sigchld.block()
    try:
        start = spawn.begin(run_dir, _spec(run_dir, "exit 0"), server)
        assert server.pid is not None
        sigchld.wait(server.pid)  # the supervisor died before its pid line, and was reported
        server.collect()  # the loop reads the pid answer and the exit report: no handle yet
        with pytest.raises(spawn.SpawnFailed, match="the supervisor could not start its job") as e:
            start.collect()
        assert e.value.errno == code  # a cause that passes (EAGAIN, ENOSPC) is told as such
    finally:
        server.close()
    assert not (run_dir / "exit.json").exists()


@pytest.mark.timeout(60)
def test_a_server_lost_between_its_pid_answer_and_the_handle_leaves_a_handle_that_ends(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """Was: the handle took the new server's generation; no server ever reported it,
    so it never ended (its job stayed ``running`` with exit.json written)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    gate = tmp_path / "gate"
    script = f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 0"
    start = spawn.begin(run_dir, _spec(run_dir, script), server)
    assert select.select([start], [], [], 30)[0], "no pid line from the supervisor"
    server.collect()  # the server's pid answer is read (it was sent before the pid line)
    lost = server.pid
    assert lost is not None
    os.kill(lost, signal.SIGKILL)
    psutil.Process(lost).wait(timeout=10)
    server.collect()  # the loss is noticed; the next start gets a new server
    (tmp_path / "other").mkdir()
    other = spawn.launch(tmp_path / "other", _spec(tmp_path / "other", "exit 0"), server)
    spawn.read_pid(other)
    spawn.release(other)
    assert server.pid not in (None, lost)
    proc, pid = start.collect()
    assert psutil.Process(pid).ppid() == proc.pid
    spawn.release(proc)
    gate.touch()
    wait_for(lambda: (run_dir / "exit.json").exists(), what="the job's exit record")
    proc.wait(timeout=30)  # known gone by pid and start time: its server is gone
    assert other.wait(timeout=30) == 0


@pytest.mark.timeout(60)
def test_a_fork_refused_by_the_fork_server_boots_the_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOPPER_CRASH_AT", "forkserver.fork")  # its spare's fork and the job's
    server = forkclient.ForkServer()
    server.start()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        start = spawn.begin(run_dir, _spec(run_dir, "exit 4"), server)
        proc, _ = start.collect()
        assert not isinstance(proc, forkclient.Forked)  # booted instead
        spawn.release(proc)
        assert proc.wait(timeout=30) == 0
    finally:
        server.close()
    assert '"exit_code":4' in (run_dir / "exit.json").read_text().replace(" ", "")


@pytest.mark.timeout(60)
def test_a_supervisor_that_never_reports_is_given_up_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the watcher read the pid line with no deadline."""
    silent = tmp_path / "silent.py"
    silent.write_text("import sys, time\nsys.stdin.readline()\ntime.sleep(600)\n")
    monkeypatch.setattr(spawn, "SUPERVISOR_SCRIPT", silent)  # booted: no fork server
    monkeypatch.setattr(spawn, "PID_WAIT", 1.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    start = spawn.begin(run_dir, _spec(run_dir, "exit 0"), None)
    with pytest.raises(spawn.SpawnFailed, match="did not report its job's pid within 1s"):
        start.collect()
    left = [c for c in psutil.Process().children() if str(silent) in c.cmdline()]
    assert left == []  # killed and reaped


@pytest.mark.timeout(120)
def test_no_descriptor_at_each_open_of_a_start_fails_that_start_only(
    server: forkclient.ForkServer, tmp_path: Path, sigchld: SigChld
) -> None:
    """EMFILE at each descriptor a supervisor opens for its start (the job's channel,
    its run directory, the gate and error pipes, job.log): the spare about to take
    the start is held to one more descriptor each time, and a supervisor that dies
    is reported before its handle is made. Every start ends by its deadline, as a
    running job or a failed start, never a hang (was: the first one hung)."""
    from test_forkserver import _spare

    sigchld.block()
    outcomes: list[str] = []
    served: set[int] = set()  # supervisors that ran a job wait for the next: not the spare
    for extra in range(8):
        spare = _spare(server, other_than=served)
        served.add(spare)
        held = len(os.listdir(f"/proc/{spare}/fd"))
        resource.prlimit(spare, resource.RLIMIT_NOFILE, (held + extra, held + extra))
        run_dir = tmp_path / f"run{extra}"
        run_dir.mkdir()
        sigchld.drain()  # the previous supervisor's
        start = spawn.begin(run_dir, _spec(run_dir, "exit 0"), server)
        supervisor = psutil.Process(spare)

        def died_or_forked(sup: psutil.Process = supervisor) -> bool:
            try:
                return sup.status() == psutil.STATUS_ZOMBIE or bool(sup.children())
            except psutil.NoSuchProcess:
                return True

        wait_for(died_or_forked, what="the supervisor to fork its job or die")
        if not psutil.pid_exists(spare) or supervisor.status() == psutil.STATUS_ZOMBIE:
            assert server.pid is not None
            sigchld.wait(server.pid)  # reported gone ...
            server.collect()  # ... and the report read before the handle is made
        try:
            proc, _ = start.collect()
        except spawn.SpawnFailed:
            outcomes.append("failed")
            continue
        assert proc.pid == spare
        spawn.release(proc)
        proc.wait(timeout=30)
        outcomes.append("ran" if (run_dir / "exit.json").exists() else "no record")
    assert outcomes[0] == "failed" and outcomes[-1] == "ran", outcomes
    assert "no record" not in outcomes, outcomes


@pytest.mark.timeout(60)
def test_a_fork_server_started_with_sigchld_blocked_still_reports_exits(
    tmp_path: Path, sigchld: SigChld
) -> None:
    """Was: the server inherited the blocked SIGCHLD across exec, never reaped, and
    no supervisor it forked was ever reported gone."""
    sigchld.block()  # before the server starts: it inherits the mask
    server = forkclient.ForkServer()
    server.start()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        proc = spawn.launch(run_dir, _spec(run_dir, "exit 3"), server)
        assert isinstance(proc, forkclient.Forked)
        spawn.read_pid(proc)
        spawn.release(proc)
        assert proc.wait(timeout=30) == 0  # reported by the server, which reaped it
    finally:
        server.close()
