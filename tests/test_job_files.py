"""A job's own files (a bash job's script.sh) are written by its supervisor, not the watcher.

The script is made from admission.json, which is what start runs (written at
claim). So the watcher makes no file of its own for it (one inode fewer per
job, tests/test_inode_budget.py): the launch spec carries the text, and the
job's supervisor writes it at the release, before it opens the job's gate,
with no fsync. What the job sees is what it saw: ``bash --noprofile --norc
<run>/script.sh``, its ``$0``, ``BASH_SOURCE`` and bash's error lines. And
``runs/<id>/work/`` is made only for a job that runs there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from conftest import bash, drop, wait_for
from hopper.agents.base import JobContext, Preparation
from hopper.agents.registry import builtin_agents
from hopper.config import Config
from hopper.core.admission import StartSpec
from hopper.core.prompt import parse
from hopper.core.record import JobRecord
from hopper.prepare import in_scratch, prepare
from hopper.proc import spawn
from hopper.proc.protocol import LaunchSpec, ProtocolError
from hopper.proc.rundir import RunDir
from hopper.store.admission import write_admission
from hopper.store.layout import Layout
from test_prepare import _record

Hopper = Callable[..., CompletedProcess[str]]
# What the job prints of itself: how bash names its script, and an error line.
SELF = 'echo "0=$0 source=${BASH_SOURCE[0]} pwd=$PWD"\nno-such-command-for-hopper\n'


def _launch(run_dir: Path, files: dict[str, str]) -> tuple[spawn.Supervisor, int]:
    spec = LaunchSpec(
        argv=["bash", "--noprofile", "--norc", str(run_dir / "script.sh")],
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
        files=files,
    )
    proc = spawn.launch(run_dir, spec)
    return proc, spawn.read_pid(proc)  # forked, held at its gate


def _exit_record(run_dir: Path, proc: spawn.Supervisor) -> dict[str, object]:
    assert proc.wait(timeout=30) == 0
    record: dict[str, object] = json.loads((run_dir / "exit.json").read_bytes())
    return record


# -- the supervisor's side -----------------------------------------------------------------
def test_the_supervisor_writes_the_script_at_the_release_and_the_job_runs_it_as_before(
    tmp_path: Path,
) -> None:
    proc, pid = _launch(tmp_path, {"script.sh": SELF})
    # Written while the watcher commits `running`, before the release; not yet run (and
    # job.log not opened here: an open waits for the release, proc/gate.py).
    wait_for(lambda: (tmp_path / "script.sh").exists(), what="script.sh before the release")
    assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "bash"
    spawn.release(proc)
    done = _exit_record(tmp_path, proc)
    assert (done["started"], done["exit_code"]) == (True, 127)
    script = tmp_path / "script.sh"
    assert script.read_text() == SELF and (script.stat().st_mode & 0o777) == 0o644
    log = (tmp_path / "job.log").read_text()
    assert f"0={script} source={script} pwd={tmp_path}\n" in log
    assert f"{script}: line 2: no-such-command-for-hopper: command not found" in log
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_start_refused_at_the_gate_never_runs_its_script(tmp_path: Path) -> None:
    proc, _ = _launch(tmp_path, {"script.sh": "echo ran\n"})
    spawn.refuse(proc)
    assert _exit_record(tmp_path, proc)["started"] is False
    assert "ran" not in (tmp_path / "job.log").read_text()


def test_a_link_or_directory_planted_at_a_name_is_replaced_never_followed(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    elsewhere = tmp_path / "elsewhere.sh"
    elsewhere.write_text("echo not mine\n")
    (run_dir / "script.sh").symlink_to(elsewhere)  # an earlier attempt's job planted these
    (run_dir / "notes.md").mkdir()
    (run_dir / "notes.md" / "keep").write_text("kept\n")
    proc, _ = _launch(run_dir, {"script.sh": "echo mine\n", "notes.md": "text\n"})
    spawn.release(proc)
    assert _exit_record(run_dir, proc)["started"] is True
    assert elsewhere.read_text() == "echo not mine\n"
    assert not (run_dir / "script.sh").is_symlink()
    assert (run_dir / "job.log").read_text() == "mine\n"
    assert (run_dir / "notes.md").read_text() == "text\n"
    (aside,) = run_dir.glob(".notes.md.displaced.*")
    assert (aside / "keep").read_text() == "kept\n"


def test_a_file_that_cannot_be_written_refuses_the_job_saying_which(tmp_path: Path) -> None:
    name = "s" * 250  # its temporary's name is too long for the filesystem
    proc, _ = _launch(tmp_path, {name: "echo ran\n"})
    spawn.release(proc)
    done = _exit_record(tmp_path, proc)
    assert done["started"] is False
    assert f"cannot write {name} in {tmp_path}: File name too long" in str(done["error"])
    assert (tmp_path / "job.log").read_text() == ""  # bash never ran


def test_a_file_in_a_deleted_run_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files = RunDir(str(run_dir))
    run_dir.rmdir()  # nothing can be made in a deleted directory
    with pytest.raises(FileNotFoundError, match=f"cannot write script.sh in {run_dir}"):
        files.put("script.sh", b"true\n")
    os.close(files.fd)


def _launch_in(run_dir: Path, cwd: Path, script: str) -> tuple[spawn.Supervisor, int]:
    """A job whose cwd (``runs/<id>/work/``) its supervisor makes (``make_cwd``)."""
    spec = LaunchSpec(
        argv=["bash", "--noprofile", "--norc", "-c", script],
        cwd=str(cwd),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
        make_cwd=True,
    )
    proc = spawn.launch(run_dir, spec)
    return proc, spawn.read_pid(proc)


def test_the_supervisor_makes_work_before_the_release_and_the_job_runs_there(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    proc, _ = _launch_in(tmp_path, work, "pwd; touch here")
    wait_for(work.is_dir, what="work/ before the release")
    assert not (work / "here").exists()  # not run yet
    spawn.release(proc)
    assert _exit_record(tmp_path, proc)["started"] is True
    assert (tmp_path / "job.log").read_text() == f"{work}\n" and (work / "here").exists()


def test_a_work_directory_already_there_is_kept(tmp_path: Path) -> None:
    """A run directory from before (an older hopper's, an earlier attempt's) has work/."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "earlier").write_text("kept\n")
    proc, _ = _launch_in(tmp_path, work, "cat earlier")
    spawn.release(proc)
    assert _exit_record(tmp_path, proc)["started"] is True
    assert (tmp_path / "job.log").read_text() == "kept\n"


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_a_link_or_file_planted_at_work_is_moved_aside_never_followed(
    tmp_path: Path, planted: str
) -> None:
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    elsewhere.mkdir()
    work = run_dir / "work"
    if planted == "symlink":
        work.symlink_to(elsewhere)
    else:
        work.write_text("not a directory\n")
    proc, _ = _launch_in(run_dir, work, "pwd -P; touch here")
    spawn.release(proc)
    assert _exit_record(run_dir, proc)["started"] is True
    assert work.is_dir() and not work.is_symlink()
    assert (run_dir / "job.log").read_text() == f"{work.resolve()}\n"
    assert (work / "here").exists() and list(elsewhere.iterdir()) == []
    (aside,) = run_dir.glob(".work.displaced.*")
    assert aside.is_symlink() if planted == "symlink" else aside.read_text() == "not a directory\n"


def test_a_work_directory_that_cannot_be_made_refuses_the_job_saying_why(
    tmp_path: Path,
) -> None:
    name = "w" * 300  # longer than the filesystem takes
    proc, _ = _launch_in(tmp_path, tmp_path / name, "touch ran")
    spawn.release(proc)
    done = _exit_record(tmp_path, proc)
    assert done["started"] is False
    assert f"cannot make {name}/ in {tmp_path}: File name too long" in str(done["error"])
    assert not (tmp_path / "ran").exists() and (tmp_path / "job.log").read_text() == ""


def test_an_unwritable_run_directory_refuses_the_job_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mkdir refused in the run directory (EACCES: a read-only one; the tests run as
    root, whom a mode does not stop, so the refusal is injected): the job is refused
    at the release with that reason, before its gate opens."""
    from hopper.proc import supervise

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = LaunchSpec(
        argv=["true"], cwd=str(run_dir / "work"), env={}, log=str(run_dir / "l"), make_cwd=True
    )
    sup = supervise.Supervisor(str(run_dir), spec)

    def refused(path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(supervise.os, "mkdir", refused)
    try:
        error = sup.write_job_files()
    finally:
        os.close(sup.files.fd)
    assert error.startswith("PermissionError: ")
    assert f"cannot make work/ in {run_dir}: Permission denied" in error
    assert not (run_dir / "work").exists()


@pytest.mark.parametrize("name", ["../x.sh", "a/b", "", ".", ".."])
def test_the_spec_refuses_a_file_name_outside_the_run_directory(name: str) -> None:
    line = json.dumps({"argv": ["true"], "cwd": "/", "env": {}, "log": "/l", "files": {name: ""}})
    with pytest.raises(ProtocolError, match="'files' must be an object of file names"):
        LaunchSpec.from_json(line)


# -- the watcher's side --------------------------------------------------------------------
def test_a_bash_job_sees_its_script_as_before(layout: Layout, hopper: Hopper) -> None:
    drop(layout, "self", bash(SELF.rstrip("\n")))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = layout.runs.iterdir()
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["state"], record["exit_code"]) == ("failed", 127)
    script, work = run_dir / "script.sh", run_dir / "work"
    assert script.read_text() == SELF
    log = (run_dir / "job.log").read_text()
    assert f"0={script} source={script} pwd={work}\n" in log
    assert f"{script}: line 2: no-such-command-for-hopper: command not found" in log


def test_a_script_near_the_prompt_size_cap_goes_whole_through_the_launch_spec(
    layout: Layout, hopper: Hopper
) -> None:
    """The script travels in the spec line (fork server socket, supervisor's stdin)."""
    lines = [f"# {i:06d} " + "\t\u00e9x" * 30 for i in range(8000)]  # ~900 KB, escaped in JSON
    text = "\n".join([*lines, 'echo "whole: $(wc -c < "$0")"'])
    drop(layout, "big", bash(text))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = layout.runs.iterdir()
    assert json.loads((run_dir / "job.json").read_text())["state"] == "succeeded"
    script = (run_dir / "script.sh").read_bytes()
    assert script == (text + "\n").encode()
    assert (run_dir / "job.log").read_text() == f"whole: {len(script)}\n"


def test_a_job_queued_by_an_older_hopper_runs_what_was_admitted(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    """An older hopper's run directory: admission.json, and the script.sh it wrote
    at a start a crash cut short (here: stale). The admitted script runs."""
    out, planted = tmp_path / "out", tmp_path / "planted"
    drop(layout, "old", bash(f"echo admitted > {out}"))
    crashed = hopper("run", "--until-idle", env={"HOPPER_CRASH_AT": "claim.after_record"})
    assert crashed.returncode != 0
    (run_dir,) = layout.runs.iterdir()
    assert json.loads((run_dir / "job.json").read_text())["state"] == "queued"
    # The queued record is written behind the start's begin (intake.py): the crash may
    # have cut that start short after its supervisor wrote script.sh (the admitted one).
    assert (run_dir / "admission.json").exists()
    (run_dir / "script.sh").write_text(f"touch {planted}\n")
    assert hopper("run", "--until-idle").returncode == 0
    assert json.loads((run_dir / "job.json").read_text())["state"] == "succeeded"
    assert out.read_text() == "admitted\n" and not planted.exists()
    assert (run_dir / "script.sh").read_text() == f"echo admitted > {out}\n"


# -- work/ ---------------------------------------------------------------------------------
def _queued(layout: Layout, text: str, **fields: object) -> tuple[JobRecord, Path]:
    record = _record(**{"id": "20261126-120000-000-x-abcd", **fields})
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_admission(run_dir, StartSpec.of(record.id, parse(text.encode())))
    return record, run_dir


def test_work_is_not_made_by_the_watcher_and_only_for_a_job_that_runs_in_it(
    layout: Layout, tmp_path: Path
) -> None:
    config = Config()
    agents = builtin_agents(config)
    record, run_dir = _queued(layout, bash("true"))
    ready = prepare(layout, config, agents, record, run_dir)
    assert ready.workdir == run_dir / "work" and in_scratch(ready.workdir, run_dir)
    assert not (run_dir / "work").exists()  # its supervisor makes it (above)
    assert not (run_dir / "script.sh").exists()  # the job writes it (above)

    own = tmp_path / "own"
    own.mkdir()
    record, run_dir = _queued(layout, bash("true"), id="20261126-120000-000-y-abcd")
    ready = prepare(
        layout, config, agents, record.model_copy(update={"workdir": str(own)}), run_dir
    )
    assert ready.workdir == own and not in_scratch(ready.workdir, run_dir)
    assert not (run_dir / "work").exists()


class _ElsewhereAgent:
    """An agent that runs the job in a directory of its own (as a session job does)."""

    name = "elsewhere"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def prepare(self, job: JobContext) -> Preparation:
        return Preparation(argv=["true"], workdir=self.folder)


def test_no_work_for_a_job_its_agent_runs_elsewhere(layout: Layout, tmp_path: Path) -> None:
    record, run_dir = _queued(layout, "do it\n", agent="elsewhere")
    agents = {"elsewhere": _ElsewhereAgent(tmp_path)}
    ready = prepare(layout, Config(), agents, record, run_dir)  # type: ignore[arg-type]
    assert ready.workdir == tmp_path and not in_scratch(ready.workdir, run_dir)
    assert not (run_dir / "work").exists()
