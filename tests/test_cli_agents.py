"""``hopper agents``: which CLI runs each agent; ``hopper agents install``: npm ci of the pins."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, hopper_cmd
from hopper.agents import npm
from hopper.cli import agents as agents_cli
from hopper.config import Config

REPO = Path(__file__).resolve().parents[1]


def fake_cli(folder: Path, name: str, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return path


def only_bash_path(tmp_path: Path) -> Path:
    """A PATH folder with bash and nothing else (no claude, codex, npm, node)."""
    folder = tmp_path / "path"
    folder.mkdir(exist_ok=True)
    bash = shutil.which("bash")
    assert bash
    (folder / "bash").symlink_to(bash)
    return folder


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        hopper_cmd(*args), capture_output=True, text=True, env=env, timeout=300, check=False
    )


# --- the shipped manifest -----------------------------------------------------------


def test_pinned_only_drops_the_aliases_and_keeps_the_pins_verbatim() -> None:
    manifest, lock = npm.shipped()
    kept_manifest, kept_lock = npm.pinned_only(manifest, lock)
    assert kept_manifest["dependencies"] == {
        "@anthropic-ai/claude-code": manifest["dependencies"]["@anthropic-ai/claude-code"],
        "@openai/codex": manifest["dependencies"]["@openai/codex"],
    }
    assert kept_lock["packages"][""]["dependencies"] == kept_manifest["dependencies"]
    for key, entry in kept_lock["packages"].items():
        if key:
            assert entry == lock["packages"][key]  # integrity hashes and all
            assert "claude-code-2" not in key and "codex-0" not in key
    aliased = [k for k in lock["packages"] if "claude-code-2." in k or "codex-0." in k]
    assert aliased, "the shipped lock no longer has the version matrix's aliases"
    assert "node_modules/@anthropic-ai/claude-code-linux-x64" in kept_lock["packages"]


def test_the_shipped_copy_is_tools_agents() -> None:
    shipped = npm.shipped()
    assert shipped[0] == json.loads((REPO / "tools/agents/package.json").read_text())
    assert shipped[1] == json.loads((REPO / "tools/agents/package-lock.json").read_text())


# --- hopper agents ----------------------------------------------------------------


def test_agents_lists_bin_source_and_version(tmp_path: Path) -> None:
    path = only_bash_path(tmp_path)
    fake_cli(path, "codex", "codex-cli 9.0.0")
    data = tmp_path / "data"
    fake_cli(data / "hopper/agents/node_modules/.bin", "claude", "9.9.9 (Claude Code)")
    mine = fake_cli(tmp_path / "bin", "my-agent", "1")
    config = tmp_path / "config.toml"
    config.write_text(FAST_CONFIG + f'[agents.mine]\nargv = ["{mine}", "{{prompt_file}}"]\n')
    env = {**os.environ, "PATH": str(path), "XDG_DATA_HOME": str(data)}
    result = cli("agents", "--json", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["claude"]["source"] == "hopper agents install"
    assert rows["claude"]["bin"] == str(data / "hopper/agents/node_modules/.bin/claude")
    assert rows["claude"]["version"] == "9.9.9 (Claude Code)"
    assert (rows["codex"]["source"], rows["codex"]["version"]) == ("PATH", "codex-cli 9.0.0")
    assert rows["bash"]["version"].startswith("GNU bash")
    assert (rows["mine"]["kind"], rows["mine"]["bin"]) == ("custom", str(mine))
    text = cli("agents", "list", "--config", str(config), env=env)
    assert text.returncode == 0
    header, *lines = text.stdout.splitlines()
    assert header.split() == ["AGENT", "BIN", "FROM", "VERSION"]
    assert any(line.startswith("claude ") and "9.9.9" in line for line in lines)


def test_agents_missing_cli_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh install: no CLI on PATH, none installed by hopper, no checkout's tools/."""
    monkeypatch.setenv("PATH", str(only_bash_path(tmp_path)))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(npm, "REPO_TOOLS", tmp_path / "no-tools")
    monkeypatch.setattr(npm, "system_dir", lambda: tmp_path / "no-system")
    infos = {i.name: i for i in agents_cli.describe(Config())}
    for name in ("claude", "codex"):
        assert (infos[name].bin, infos[name].source) == (None, "missing")
        assert infos[name].version == "not installed: hopper agents install"
    assert infos["bash"].source == "PATH"


# --- hopper agents install ----------------------------------------------------------


def test_install_dry_run_prints_the_npm_command(tmp_path: Path) -> None:
    prefix = tmp_path / "agents"
    result = cli("agents", "install", "--prefix", str(prefix), "--dry-run", env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    manifest, _ = npm.shipped()
    pin = manifest["dependencies"]["@anthropic-ai/claude-code"]
    assert f"@anthropic-ai/claude-code@{pin}" in result.stdout
    assert f"$ npm ci --prefix {prefix} --prefer-offline" in result.stdout
    assert not prefix.exists()


def test_install_default_prefix_is_per_user(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    result = cli("agents", "install", "--dry-run", env=env)
    assert f"into {tmp_path / 'data' / 'hopper' / 'agents'}" in result.stdout


def test_install_without_npm_fails_with_the_fix(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(only_bash_path(tmp_path))}
    result = cli("agents", "install", "--prefix", str(tmp_path / "agents"), env=env)
    assert result.returncode == 1
    assert "'npm' not found" in result.stderr and "apt-get install -y nodejs npm" in result.stderr


@pytest.mark.parametrize(
    ("npm_script", "message"),
    [
        ("echo 'npm ERR! 404' >&2; exit 3", "exited 3 (its message is above)"),
        ("exit 0", "was installed but does not run"),
    ],
)
def test_install_reports_a_failing_npm(tmp_path: Path, npm_script: str, message: str) -> None:
    path = only_bash_path(tmp_path)
    fake_cli(path, "npm", "x").write_text(f"#!/bin/sh\n{npm_script}\n")
    env = {**os.environ, "PATH": f"{path}:/usr/bin:/bin"}
    prefix = tmp_path / "agents"
    result = cli("agents", "install", "--prefix", str(prefix), env=env)
    assert result.returncode == 1
    assert message in result.stderr
    # what npm ci was given: the pins only, without the matrix's aliases
    assert set(json.loads((prefix / "package.json").read_text())["dependencies"]) == {
        "@anthropic-ai/claude-code",
        "@openai/codex",
    }


def test_install_into_an_impossible_prefix_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cli("agents", "install", "--prefix", str(blocker / "agents"), env=dict(os.environ))
    assert result.returncode == 1
    assert "agents install:" in result.stderr and "Not a directory" in result.stderr


def test_install_options_are_exclusive(tmp_path: Path) -> None:
    result = cli("agents", "install", "--system", "--prefix", str(tmp_path), env=dict(os.environ))
    assert result.returncode == 2


@pytest.mark.timeout(600)
def test_install_for_real_then_hopper_finds_them(tmp_path: Path) -> None:
    """npm ci of the shipped lock into a per-user dir (from npm's cache where it has the
    tarballs), then the lookup finds the CLIs there with PATH holding none."""
    if shutil.which("npm") is None:
        pytest.fail("npm not found: apt-get install -y nodejs npm")
    data = tmp_path / "data"
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(data),
        # npm reads NPM_CONFIG_* case-insensitively; the cache makes a re-run fast
        "NPM_CONFIG_CACHE": os.environ.get("NPM_CONFIG_CACHE", str(Path.home() / ".npm")),
    }
    try:
        result = cli("agents", "install", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        prefix = data / "hopper" / "agents"
        manifest, _ = npm.shipped()
        assert f"({manifest['dependencies']['@anthropic-ai/claude-code']} (Claude Code))" in (
            result.stdout
        )
        path = only_bash_path(tmp_path)
        (path / "node").symlink_to(shutil.which("node") or "node")  # the codex launcher
        listed = cli("agents", "--json", env={**env, "PATH": str(path)})
        rows = {r["name"]: r for r in json.loads(listed.stdout)}
        for name in ("claude", "codex"):
            assert rows[name]["bin"] == str(prefix / "node_modules" / ".bin" / name)
            assert rows[name]["source"] == "hopper agents install"
        assert rows["codex"]["version"] == f"codex-cli {manifest['dependencies']['@openai/codex']}"
    finally:
        shutil.rmtree(data, ignore_errors=True)  # ~800 MB of CLIs
