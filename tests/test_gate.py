"""The job's process at its gate (proc/gate.py): spawned, or forked when it cannot be.

Real processes: the test process stands in for the supervisor. Both ways must
hand the program the same process (argv, $0, environment, working directory,
descriptors, signals, process group), hold it until the release, and report
the same error text when it cannot run.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import wait_for
from hopper.proc import gate

pytestmark = pytest.mark.skipif(not gate.load(), reason="no posix_spawn gate on this system")

ENV = {"PATH": "/usr/bin:/bin", "ODD VALUE": "a b\tc", "EMPTY": "", "LANG": "C.UTF-8"}
SLEEP = "/usr/bin/sleep"


@pytest.fixture(autouse=True)
def _sigmask() -> Iterator[None]:
    """gate.spawn blocks SIGURG in its caller (the supervisor); give the test's back."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _log(tmp_path: Path) -> int:
    return os.open(tmp_path / "job.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC)


def _start(way: str, argv: list[str], cwd: Path, log_fd: int) -> gate.Gated:
    if way == "spawn":
        assert gate.spawnable(argv[0], argv, ENV)
        job = gate.spawn(argv[0], argv, ENV, str(cwd), log_fd)
        assert job is not None
        return job
    return gate.fork(argv[0], argv, ENV, str(cwd), log_fd)


def _wait(pid: int) -> int:
    return os.waitpid(pid, 0)[1]


def _at_gate(pid: int) -> bool:
    wchan = Path(f"/proc/{pid}/wchan").read_text()
    return "break_lease" in wchan or "pipe_read" in wchan


def _inheritable() -> list[str]:
    return [fd for fd in os.listdir("/proc/self/fd") if int(fd) > 2 and _open_inheritable(int(fd))]


def _open_inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False  # the listing's own descriptor, closed by now


def _process(pid: int) -> dict[str, object]:
    """What the program got: everything a job can see of its start."""
    proc = Path(f"/proc/{pid}")
    status = dict(
        line.split(":\t", 1) for line in (proc / "status").read_text().splitlines() if ":\t" in line
    )
    environ = [e for e in (proc / "environ").read_bytes().split(b"\0") if e]
    return {
        "exe": os.readlink(proc / "exe"),
        "argv": (proc / "cmdline").read_bytes().split(b"\0")[:-1],
        "env": sorted(environ),
        "cwd": os.readlink(proc / "cwd"),
        "fds": sorted(os.listdir(proc / "fd")),
        "stdin": os.readlink(proc / "fd" / "0"),
        "stdout": os.readlink(proc / "fd" / "1"),
        "stderr": os.readlink(proc / "fd" / "2"),
        "pgid": os.getpgid(pid) == pid,
        "blocked": status["SigBlk"].strip(),
        "ignored": status["SigIgn"].strip(),
    }


def _run(way: str, tmp_path: Path) -> dict[str, object]:
    """Start ``sleep 30`` one way; check it waits for its release; what it got."""
    work = tmp_path / way
    work.mkdir()
    log_fd = _log(work)
    passed_on = _inheritable()
    job = _start(way, [SLEEP, "30"], work, log_fd)
    try:
        wait_for(lambda: _at_gate(job.pid), what="the job at its gate")
        assert os.readlink(f"/proc/{job.pid}/exe") == os.path.realpath(sys.executable)  # not run
        assert job.release() == ""
        wait_for(lambda: os.readlink(f"/proc/{job.pid}/exe") == SLEEP, what="the exec")
        # and done: the kernel shows the new exe before it closes the close-on-exec
        # descriptors (begin_new_exec); once sleep sleeps, the exec is long over
        wait_for(lambda: "nanosleep" in Path(f"/proc/{job.pid}/wchan").read_text(), what="sleep")
        seen = _process(job.pid)
        # What the test process leaves inheritable the program inherits either way (a
        # supervisor has none of its own to pass on): only 0, 1 and 2 are the start's.
        fds = seen.pop("fds")
        assert isinstance(fds, list) and {"0", "1", "2"} | set(passed_on) <= set(fds)
        # Another thread of this test process (a watcher left by an earlier test: watchdog
        # makes its inotify descriptors inheritable) may open one between the listing and
        # the start; none of the start's own (job.log, /dev/null, the gate's placeholder,
        # a pipe) may ever reach the program.
        others = {fd: os.readlink(f"/proc/{job.pid}/fd/{fd}") for fd in fds}
        leaked = {
            fd: target
            for fd, target in others.items()
            if fd not in ("0", "1", "2", *passed_on)
            and (target in (str(work / "job.log"), os.devnull) or target.startswith("pipe:"))
        }
        assert not leaked, others
    finally:
        os.kill(job.pid, signal.SIGKILL)  # whatever failed: no job left behind
        assert os.WTERMSIG(_wait(job.pid)) == signal.SIGKILL
        os.close(log_fd)
    return seen


def test_the_program_waits_for_the_release_then_gets_the_same_process_either_way(
    tmp_path: Path,
) -> None:
    spawned, forked = _run("spawn", tmp_path), _run("fork", tmp_path)
    for seen, way in ((spawned, "spawn"), (forked, "fork")):
        work = tmp_path / way
        assert seen.pop("cwd") == str(work)
        assert seen.pop("stdout") == seen.pop("stderr") == str(work / "job.log")
    assert spawned == forked
    assert spawned["exe"] == SLEEP
    assert spawned["argv"] == [SLEEP.encode(), b"30"]
    assert spawned["env"] == sorted(f"{k}={v}".encode() for k, v in ENV.items())
    assert spawned["stdin"] == "/dev/null"
    assert spawned["pgid"] is True
    assert spawned["blocked"] == "0000000000000000"
    ignored = int(str(spawned["ignored"]), 16)
    for sig in gate.RESET:
        assert not ignored & (1 << (sig - 1))


@pytest.mark.parametrize("way", ["spawn", "fork"])
def test_a_refused_job_never_runs(tmp_path: Path, way: str) -> None:
    log_fd = _log(tmp_path)
    job = _start(way, ["/bin/sh", "-c", "echo ran"], tmp_path, log_fd)
    wait_for(lambda: _at_gate(job.pid), what="the job at its gate")
    job.refuse()
    assert not Path(f"/proc/{job.pid}").exists()  # killed and reaped
    os.close(log_fd)
    assert (tmp_path / "job.log").read_text() == ""


@pytest.mark.parametrize("way", ["spawn", "fork"])
def test_a_missing_working_directory_fails_with_the_same_text_either_way(
    tmp_path: Path, way: str
) -> None:
    log_fd = _log(tmp_path)
    job = _start(way, ["/bin/sh", "-c", "echo ran"], tmp_path / "gone", log_fd)
    error = job.release()
    os.close(log_fd)
    assert error == f"FileNotFoundError: [Errno 2] No such file or directory: '{tmp_path / 'gone'}'"
    assert not Path(f"/proc/{job.pid}").exists()
    assert (tmp_path / "job.log").read_text() == ""


def test_a_program_removed_after_the_lookup_fails_the_start_naming_it(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    log_fd = _log(tmp_path)
    job = _start("spawn", [str(tool)], tmp_path, log_fd)
    tool.unlink()
    error = job.release()
    os.close(log_fd)
    assert error == f"FileNotFoundError: [Errno 2] No such file or directory: '{tool}'"
    assert not Path(f"/proc/{job.pid}").exists()


def test_a_gate_that_gives_way_before_the_release_never_runs_the_job(tmp_path: Path) -> None:
    """The lease ends without a release (the kernel's lease-break-time passed, here
    dropped by hand): the child's next step, entering a directory only a release
    puts in place, fails, and the release says the job did not start."""
    log_fd = _log(tmp_path)
    job = _start("spawn", ["/bin/sh", "-c", "echo ran"], tmp_path, log_fd)
    wait_for(lambda: _at_gate(job.pid), what="the job at its gate")
    fcntl.fcntl(log_fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    wait_for(lambda: not Path(f"/proc/{job.pid}").exists(), what="the child gone")
    error = job.release()
    os.close(log_fd)
    assert error.startswith("NotStarted: the job's gate gave way")
    assert (tmp_path / "job.log").read_text() == ""


GATED_THEN_DIE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import gate
assert gate.load()
log_fd = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC)
job = gate.spawn("/bin/sh", ["/bin/sh", "-c", "echo ran"], {}, "/", log_fd)
print(json.dumps({"pid": job.pid}), flush=True)
sys.stdin.readline()
os._exit(0)  # the supervisor dies with its job at the gate
"""


def test_a_job_at_its_gate_never_runs_once_its_supervisor_died(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    proc_dir = str(Path(gate.__file__).parent)
    sup = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", GATED_THEN_DIE, proc_dir, str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert sup.stdout is not None and sup.stdin is not None
    pid = json.loads(sup.stdout.readline())["pid"]
    wait_for(lambda: _at_gate(pid), what="the job at its gate")
    sup.stdin.close()
    assert sup.wait(timeout=30) == 0

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    wait_for(gone, what="the orphaned child gone without exec'ing")
    assert log.read_text() == ""


def test_a_job_log_held_open_elsewhere_takes_no_lease_and_the_job_is_forked(
    tmp_path: Path,
) -> None:
    log_fd = _log(tmp_path)
    with open(tmp_path / "job.log", "rb"):  # a reader: the kernel refuses the lease
        assert gate.spawn("/bin/sh", ["/bin/sh"], ENV, str(tmp_path), log_fd) is None
    os.close(log_fd)


def test_only_what_execs_exactly_as_a_fork_would_is_spawned(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("echo no interpreter line\n")  # ENOEXEC: execvpe tries the next
    script.chmod(0o755)
    assert gate.spawnable("/bin/sh", ["/bin/sh"], ENV)
    assert not gate.spawnable(None, ["sh"], ENV)  # not found ahead: execvpe's walk
    assert not gate.spawnable("./tool", ["./tool"], ENV)  # relative to the job's cwd
    assert not gate.spawnable(str(script), [str(script)], ENV)
    assert not gate.spawnable(str(tmp_path / "none"), ["none"], ENV)
    assert not gate.spawnable("/bin/sh", ["/bin/sh", "a\0b"], ENV)
    assert not gate.spawnable("/bin/sh", ["/bin/sh"], {"A=B": "c"})  # execve's ValueError
    assert not gate.spawnable("/bin/sh", ["/bin/sh"], {"": "c"})


def test_a_pid_that_cannot_be_read_drops_the_gate_and_leaves_the_start_to_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No descriptor to read the child's pid with: the lease is dropped, so the
    child's chdir into the placeholder fails and it exits without exec'ing; the
    caller forks the job instead."""
    seen: list[int] = []
    real = gate._children

    def no_descriptor(tid: int) -> list[int]:
        seen.extend(real(tid))
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(gate, "_children", no_descriptor)
    log_fd = _log(tmp_path)
    assert gate.spawn("/bin/sh", ["/bin/sh", "-c", "echo ran"], ENV, str(tmp_path), log_fd) is None
    os.close(log_fd)
    for pid in seen:
        assert not Path(f"/proc/{pid}").exists()  # reaped by glibc after its failure
    assert (tmp_path / "job.log").read_text() == ""
