"""Shell completion: ``hopper completion bash|zsh|fish`` loaded into the real shells,
completing a command and a job name from the root; ``hopper _complete-jobs``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hopper.core.states import JobState
from hopper.store.layout import Layout
from test_cli_lookup import job

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def shell_env(tmp_path: Path, layout: Layout, config_file: Path) -> dict[str, str]:
    """An environment where ``hopper`` on PATH is this checkout's, serving the test root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "hopper"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m hopper "$@"\n')
    wrapper.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOPPER_ROOT": str(layout.root),
        "HOPPER_CONFIG": str(config_file),
        "HOME": str(tmp_path),
    }


def _script(shell: str, tmp_path: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "hopper", "completion", shell],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / f"hopper.{shell}"
    path.write_text(result.stdout)
    return path


def _need(shell: str) -> str:
    found = shutil.which(shell)
    assert found, f"{shell} is not installed (.ci/run installs it: apt-get install {shell})"
    return found


def _bash_complete(script: Path, env: dict[str, str], line: str) -> list[str]:
    """COMPREPLY after the completion function ran on ``line`` in an interactive bash."""
    words = line.split(" ")
    code = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}\nCOMP_POINT=${{#COMP_LINE}}\n"
        "_shtab_hopper\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    result = subprocess.run(
        [_need("bash"), "--norc", "--noprofile", "-i", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [w for w in result.stdout.splitlines() if w]


def test_bash_completes_a_command_and_a_job_name(
    layout: Layout, hopper: Run, shell_env: dict[str, str], tmp_path: Path
) -> None:
    job(layout, "nightly-build", JobState.FAILED)
    job(layout, "nightly-docs")
    job(layout, "deploy")
    script = _script("bash", tmp_path)
    assert _bash_complete(script, shell_env, "hopper sta") == ["status"]
    assert sorted(_bash_complete(script, shell_env, "hopper logs night")) == [
        "nightly-build",
        "nightly-docs",
    ]
    assert _bash_complete(script, shell_env, "hopper retry 20261122-120000-000-dep") == [
        "20261122-120000-000-deploy-0001"
    ]
    assert _bash_complete(script, shell_env, "hopper submit --after dep") == ["deploy"]


def test_fish_completes_a_command_and_a_job_name(
    layout: Layout, hopper: Run, shell_env: dict[str, str], tmp_path: Path
) -> None:
    job(layout, "nightly-build")
    script = _script("fish", tmp_path)
    fish = _need("fish")
    syntax = subprocess.run([fish, "--no-execute", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr

    def complete(line: str) -> list[str]:
        result = subprocess.run(
            [fish, "--no-config", "-c", f"source {script}; complete -C {line!r}"],
            capture_output=True,
            text=True,
            env=shell_env,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return [w.split("\t")[0] for w in result.stdout.splitlines()]

    assert "status" in complete("hopper stat")
    assert "nightly-build" in complete("hopper abort night")


def test_zsh_script_loads_under_compinit(tmp_path: Path) -> None:
    zsh = _need("zsh")
    script = _script("zsh", tmp_path)
    syntax = subprocess.run([zsh, "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    functions = tmp_path / "zfunc"
    functions.mkdir()
    shutil.copy(script, functions / "_hopper")  # the README's way: a file on $fpath
    loaded = subprocess.run(
        [
            zsh,
            "-f",
            "-c",
            f"fpath=({functions} $fpath); autoload -U compinit && compinit -u -D "
            "&& print -r -- ${_comps[hopper]} && autoload +X _hopper && whence -w _hopper "
            f'&& eval "$(<{script})" && print -r -- ${{_comps[hopper]}}',
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["_hopper", "_hopper:", "function", "_shtab_hopper"]
    assert "_complete-jobs" in script.read_text()


def test_completion_of_an_unknown_shell_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hopper", "completion", "tcsh"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "invalid choice: 'tcsh'" in result.stderr


def test_complete_jobs_lists_ids_and_names_by_prefix(layout: Layout, hopper: Run) -> None:
    job(layout, "Nightly-Build")
    job(layout, "with space")
    result = hopper("_complete-jobs", "night")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Nightly-Build"]
    everything = hopper("_complete-jobs").stdout.splitlines()
    assert "20261122-120000-000-with space-0001" in everything  # ids always
    assert "with space" not in everything  # a name one shell word cannot hold


def test_complete_jobs_says_nothing_when_the_root_cannot_be_read(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "hopper", "_complete-jobs", "--root", str(not_a_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "")


def test_complete_jobs_reads_the_index_without_pydantic_on_a_thousand_jobs(
    layout: Layout, hopper: Run
) -> None:
    """What keeps a tab press quick is structural: the index, and no pydantic import.
    (Its time is a benchmark's business, not a test's: 0.49-0.58 s on 1,000 jobs at
    load 7, about what `hopper status ID` takes.)"""
    for n in range(1000):
        job(layout, f"job-{n:04d}")
    assert len(hopper("_complete-jobs").stdout.splitlines()) == 2000  # builds the index
    result = hopper("_complete-jobs", "job-09")
    assert result.stdout.splitlines() == [f"job-{n:04d}" for n in range(900, 1000)]
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hopper", "_complete-jobs", "job-09"],
        env={**os.environ, "HOPPER_ROOT": str(layout.root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert len(traced.stdout.splitlines()) == 100
    imported = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines()}
    assert any(m.startswith("hopper.store.index") for m in imported)  # it read the index
    assert not any(m.split(".")[0] == "pydantic" for m in imported), "pydantic was imported"


def test_the_hidden_command_is_the_one_main_dispatches() -> None:
    from hopper.cli import completion, main

    assert completion.COMPLETE_JOBS == main.COMPLETE_JOBS
    assert completion.COMPLETE_JOBS not in main.COMMANDS  # not listed, not completed
