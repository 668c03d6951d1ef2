""" "did you mean": a mistyped command (exit 2) or job id or name (exit 1), through
the commands themselves."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from hopper.core.states import JobState
from hopper.store.layout import Layout
from test_cli_lookup import job

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_a_mistyped_command_names_the_closest_one() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hopper", "stauts", "--root", "/nonexistent"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "hopper: unknown command 'stauts'; did you mean 'status'?\n"


def test_a_command_like_nothing_lists_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hopper", "zzzz"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "unknown command 'zzzz'; the commands: run, submit, status" in result.stderr
    assert "did you mean" not in result.stderr


@pytest.mark.parametrize("command", ["status", "logs", "abort", "retry", "wait", "events"])
def test_a_mistyped_job_name_names_the_closest_job(
    command: str, layout: Layout, hopper: Run
) -> None:
    job(layout, "nightly-build", JobState.RUNNING)
    job(layout, "deploy", JobState.FAILED)
    result = hopper(command, "nigthly-build")
    assert result.returncode == 1, result.stderr
    assert "no job with id, id prefix or name 'nigthly-build'" in result.stderr
    assert "did you mean 'nightly-build'?" in result.stderr


def test_a_mistyped_id_names_the_closest_id(layout: Layout, hopper: Run) -> None:
    record = job(layout, "deploy", JobState.FAILED)
    typo = record.id.replace("0001", "0010")
    result = hopper("logs", typo)
    assert result.returncode == 1
    assert f"did you mean {record.id!r}?" in result.stderr


def test_nothing_close_suggests_nothing(layout: Layout, hopper: Run) -> None:
    job(layout, "deploy")
    result = hopper("status", "qqqqqq")
    assert result.returncode == 1
    assert "no job with id, id prefix or name 'qqqqqq'" in result.stderr
    assert "did you mean" not in result.stderr
