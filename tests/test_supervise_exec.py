"""The job's program is looked up in its PATH before the gate (proc/supervise.py: ``program``).

execvpe walks PATH with one execve per entry, ~0.1 ms each, between the
watcher's release and the job's first instruction; the gated job does that
walk while it waits, and after the gate execs the file it found. What runs,
and the error when nothing can, stay execvpe's: a file that will not exec,
a relative PATH entry, or no such program fall back to execvpe itself.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from conftest import wait_for
from hopper.proc import spawn, supervise
from hopper.proc.protocol import LaunchSpec
from hopper.proc.supervise import program


def _tool(folder: Path, name: str, body: str, *, executable: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body)
    path.chmod(0o755 if executable else 0o644)
    return path


def _start(
    run_dir: Path, argv: list[str], path: str, cwd: Path | None = None
) -> tuple[spawn.Supervisor, int]:
    spec = LaunchSpec(
        argv=argv,
        cwd=str(cwd or run_dir),
        env={"PATH": path},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )
    proc = spawn.launch(run_dir, spec)
    return proc, spawn.read_pid(proc)  # forked, on its way to the gate


def _at_gate(pid: int) -> bool:
    """The gated job sleeps at its gate: a spawned one in its open of job.log (the
    supervisor's lease), a forked one in its read of the gate pipe."""
    wchan = Path(f"/proc/{pid}/wchan").read_text()
    return "break_lease" in wchan or "pipe_read" in wchan


def _finish(run_dir: Path, started: tuple[spawn.Supervisor, int]) -> dict[str, object]:
    proc, _ = started
    spawn.release(proc)
    assert proc.wait(timeout=30) == 0
    exit_record: dict[str, object] = json.loads((run_dir / "exit.json").read_bytes())
    return exit_record


# -- the lookup ---------------------------------------------------------------------------
def test_the_first_executable_regular_file_on_path_is_the_program(tmp_path: Path) -> None:
    (tmp_path / "a" / "tool").mkdir(parents=True)  # a directory of that name: skipped
    _tool(tmp_path / "b", "tool", "#!/bin/sh\n", executable=False)  # not executable: skipped
    found = _tool(tmp_path / "c", "tool", "#!/bin/sh\n")
    _tool(tmp_path / "d", "tool", "#!/bin/sh\n")
    path = os.pathsep.join(str(tmp_path / d) for d in "abcd")
    assert program("tool", {"PATH": path}) == str(found)


def test_names_with_a_slash_run_as_given_and_nothing_found_is_left_to_execvpe(
    tmp_path: Path,
) -> None:
    assert program("./tool", {"PATH": "/usr/bin"}) == "./tool"
    assert program("/bin/sh", {}) == "/bin/sh"
    assert program("", {"PATH": "/usr/bin"}) is None
    assert program("no-such-program-for-hopper", {"PATH": str(tmp_path)}) is None
    # No PATH at all: execvpe's default, os.defpath (/bin:/usr/bin).
    assert program("sh", {}) == os.path.join(os.defpath.split(os.pathsep)[0], "sh")


def test_a_relative_path_entry_before_the_program_leaves_the_walk_to_execvpe(
    tmp_path: Path,
) -> None:
    found = _tool(tmp_path / "abs", "tool", "#!/bin/sh\n")
    assert program("tool", {"PATH": f"bin:{tmp_path / 'abs'}"}) is None
    assert program("tool", {"PATH": f":{tmp_path / 'abs'}"}) is None  # "" is the cwd too
    assert program("tool", {"PATH": f"{tmp_path / 'abs'}:bin"}) == str(found)


# -- the real supervisor ------------------------------------------------------------------
def test_the_program_is_found_while_the_job_waits_at_its_gate(tmp_path: Path) -> None:
    """A program that appears earlier on PATH after the fork is not the one run:
    the walk happened before the gate (execvpe after it would have run the new one)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    _tool(second, "tool", "#!/bin/sh\necho second\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    started = _start(run_dir, ["tool"], f"{first}:{second}:/usr/bin:/bin")
    wait_for(lambda: _at_gate(started[1]), what="the job waiting at its gate")
    _tool(first, "tool", "#!/bin/sh\necho first\n")
    record = _finish(run_dir, started)
    assert (record["started"], record["exit_code"]) == (True, 0)
    assert (run_dir / "job.log").read_text() == "second\n"


def test_a_file_found_that_will_not_exec_falls_back_to_the_next_one_on_path(
    tmp_path: Path,
) -> None:
    """execvpe skips a file the kernel refuses (no #! line: ENOEXEC) and runs the
    next; so does the start when the file it found first is that one."""
    _tool(tmp_path / "a", "tool", "echo not a program\n")
    _tool(tmp_path / "b", "tool", "#!/bin/sh\necho from b\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = f"{tmp_path / 'a'}:{tmp_path / 'b'}:/usr/bin:/bin"
    assert program("tool", {"PATH": path}) == str(tmp_path / "a" / "tool")
    record = _finish(run_dir, _start(run_dir, ["tool"], path))
    assert (record["started"], record["exit_code"]) == (True, 0)
    assert (run_dir / "job.log").read_text() == "from b\n"


def test_a_relative_path_entry_is_searched_from_the_jobs_working_directory(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    _tool(work / "bin", "tool", "#!/bin/sh\necho relative\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = _finish(run_dir, _start(run_dir, ["tool"], "bin:/usr/bin:/bin", cwd=work))
    assert (record["started"], record["exit_code"]) == (True, 0)
    assert (run_dir / "job.log").read_text() == "relative\n"


def test_a_program_found_nowhere_fails_the_start_with_execvpes_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = _finish(run_dir, _start(run_dir, ["no-such-program-for-hopper"], "/usr/bin:/bin"))
    assert record["started"] is False
    assert isinstance(record["error"], str)
    assert record["error"].startswith("FileNotFoundError")
    assert "no-such-program-for-hopper" in record["error"]


def test_a_program_that_is_not_executable_anywhere_fails_with_permission_denied(
    tmp_path: Path,
) -> None:
    tool = _tool(tmp_path / "a", "tool", "#!/bin/sh\n", executable=False)
    assert not tool.stat().st_mode & stat.S_IXUSR
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = _finish(run_dir, _start(run_dir, ["tool"], str(tmp_path / "a")))
    assert record["started"] is False
    assert isinstance(record["error"], str)
    assert record["error"].startswith("PermissionError")  # root too: exec needs an x bit


def test_a_start_that_may_wait_long_at_its_gate_is_forked_the_others_spawned(
    tmp_path: Path,
) -> None:
    """A spawned job's gate is a lease the kernel ends after lease-break-time (45 s);
    a start ahead (``long_gate``: released when a slot frees) waits on a pipe."""
    waits = {}
    for long_gate in (False, True):
        run_dir = tmp_path / f"run-{long_gate}"
        run_dir.mkdir()
        spec = LaunchSpec(
            argv=["/bin/sh", "-c", "echo ran"],
            cwd=str(run_dir),
            env={"PATH": "/usr/bin:/bin"},
            log=str(run_dir / "job.log"),
            long_gate=long_gate,
        )
        proc = spawn.launch(run_dir, spec)
        pid = spawn.read_pid(proc)
        wait_for(lambda pid=pid: _at_gate(pid), what="the job at its gate")
        waits[long_gate] = Path(f"/proc/{pid}/wchan").read_text()
        record = _finish(run_dir, (proc, pid))
        assert (record["started"], record["exit_code"]) == (True, 0)
        assert (run_dir / "job.log").read_text() == "ran\n"
    assert "break_lease" in waits[False]
    assert "pipe_read" in waits[True]


def test_the_fork_servers_first_instances_need_no_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """warm()'s throwaway Supervisor opens "/" (its RunDir); without a descriptor to
    spare it is skipped, not an error: the fork server and a booted supervisor
    start as before (supervise._first_instances only saves memory)."""

    def no_descriptor(path: str) -> None:
        raise OSError(errno.EMFILE, "Too many open files", path)

    monkeypatch.setattr(supervise, "RunDir", no_descriptor)
    supervise._first_instances()  # no exception

    monkeypatch.undo()
    before = set(os.listdir("/proc/self/fd"))
    supervise._first_instances()
    assert set(os.listdir("/proc/self/fd")) <= before  # "/" closed again
