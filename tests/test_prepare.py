"""prepare.py in-process: the job's environment, its working directory."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.agents.base import Preparation
from hopper.config import Config
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.prepare import SERVICE_ONLY_ENV, job_environment, scratch_dir, workdir_of
from hopper.proc import treekill
from hopper.store.layout import Layout


def _record(**fields: object) -> JobRecord:
    base = JobRecord(
        id="20260101-000000-abcd",
        name="x",
        state=JobState.QUEUED,
        agent="bash",
        host="h",
        owner="h:1:2",
        inbox_path="inbox/x.prompt.md",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return base.model_copy(update=fields)


def test_environment_layers_and_hopper_variables(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    run_dir = tmp_path / "runs" / "r"
    config = Config(env={"A": "config", "B": "config"})
    prep = Preparation(argv=["true"], env={"B": "agent", "C": "agent"})
    inherited = {"A": "watcher", "PATH": "/bin", **{name: "1" for name in SERVICE_ONLY_ENV}}
    own = {"C": "prompt", "HOPPER_JOB_ID": "forged"}
    record = _record(branch="hopper/x")
    env = job_environment(layout, config, record, run_dir, prep, own, inherited)
    assert env["PATH"] == "/bin"
    assert (env["A"], env["B"], env["C"]) == ("config", "agent", "prompt")
    assert not SERVICE_ONLY_ENV & env.keys()
    assert env["HOPPER_JOB_ID"] == record.id  # hopper's own variables cannot be forged
    assert env[treekill.JOB_TOKEN_ENV].startswith(f"{record.id}:")
    assert env["HOPPER_RUN_DIR"] == str(run_dir)
    assert env["HOPPER_ROOT"] == str(tmp_path)
    assert env["HOPPER_BRANCH"] == "hopper/x"
    assert "HOPPER_BRANCH" not in job_environment(layout, config, _record(), run_dir, prep, {}, {})


def test_scratch_dir_replaces_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "work").symlink_to(elsewhere)
    work = scratch_dir(run_dir)
    assert work == run_dir / "work" and work.is_dir() and not work.is_symlink()
    assert elsewhere.is_dir()  # the link went, not what it pointed to


def test_workdir_of(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert workdir_of(_record(), run_dir) == run_dir / "work"
    # a retry names the work/ its first start ran in, made again by its executor
    assert workdir_of(_record(workdir=str(run_dir / "work")), run_dir) == run_dir / "work"
    assert workdir_of(_record(workdir=str(tmp_path)), run_dir) == tmp_path
    assert workdir_of(_record(workspace_path="/ws", workdir="rel"), run_dir) == Path("/ws")
    with pytest.raises(BadPrompt, match="is relative"):
        workdir_of(_record(workdir="rel/dir"), run_dir)
    with pytest.raises(BadPrompt, match="does not exist"):
        workdir_of(_record(workdir=str(tmp_path / "missing")), run_dir)


def test_inherited_environment_follows_the_watchers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept between jobs, made again when os.environ changes; never the service's."""
    from hopper.prepare import inherited_environment

    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("HOPPER_TEST_VAR", "one")
    first = inherited_environment()
    assert first["HOPPER_TEST_VAR"] == "one" and "NOTIFY_SOCKET" not in first
    first["HOPPER_TEST_VAR"] = "changed by a caller"  # a copy: the next job's is intact
    assert inherited_environment()["HOPPER_TEST_VAR"] == "one"
    monkeypatch.setenv("HOPPER_TEST_VAR", "two")
    assert inherited_environment()["HOPPER_TEST_VAR"] == "two"
    monkeypatch.delenv("HOPPER_TEST_VAR")
    assert "HOPPER_TEST_VAR" not in inherited_environment()
    expected = {k: v for k, v in os.environ.items() if k not in SERVICE_ONLY_ENV}
    assert inherited_environment() == expected
