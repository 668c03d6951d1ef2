"""Environments for running the real agent CLIs offline against tests/modelserver.py.

* ``claude_bin(version)`` / ``codex_bin(version)`` — a binary installed by
  ``scripts/install-agents`` under ``tools/agents/node_modules``, or None; no
  version = the pinned one. ``CLAUDE_VERSIONS`` / ``CODEX_VERSIONS`` are every
  version tools/agents/package.json installs (the pinned one first, then the
  oldest supported, installed under npm aliases such as ``claude-code-2.1.197``).
  Bin names collide, so each version's binary is found by its package directory.
* ``claude_env(home, url)`` — env for ``claude -p``: an isolated HOME, the local
  server as ANTHROPIC_BASE_URL, a dummy key, no non-essential traffic, no
  auto-updater, IS_SANDBOX=1 (lets root use ``--permission-mode
  bypassPermissions``) and retries capped at 0 (override CLAUDE_CODE_MAX_RETRIES).
* ``codex_env(home, url)`` — env for ``codex exec``: an isolated HOME and
  CODEX_HOME=<home>/.codex whose config.toml points a custom provider at
  ``<url>/v1`` (Responses API), with retries capped at 0 (pass ``retries=``).

Both start from a minimal base environment (PATH, LANG, TERM), not os.environ,
so a developer's real keys and config never leak into a test run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENTS_DIR = REPO / "tools" / "agents"
AGENTS_MODULES = AGENTS_DIR / "node_modules"
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_PACKAGE = "@openai/codex"
BIN_IN_PACKAGE = {CLAUDE_PACKAGE: "bin/claude.exe", CODEX_PACKAGE: "bin/codex.js"}

CLAUDE_KEY = "sk-ant-test-offline"
CODEX_KEY_VAR = "HOPPER_TEST_MODEL_KEY"
CODEX_KEY = "sk-test-offline"
CODEX_PROVIDER = "hopper_test"
# A model slug Codex knows (avoids its "Model metadata ... not found" warning item).
CODEX_MODEL = "gpt-5.5"


def _versions(package: str) -> dict[str, str]:
    """version -> package directory under node_modules, from tools/agents/package.json."""
    deps = json.loads((AGENTS_DIR / "package.json").read_text())["dependencies"]
    found: dict[str, str] = {}
    for key, spec in deps.items():
        if key == package:
            found = {spec: key, **found}  # the pinned version first
        elif spec.startswith(f"npm:{package}@"):
            found[spec.rsplit("@", 1)[1]] = key
    return found


CLAUDE_VERSIONS = _versions(CLAUDE_PACKAGE)
CODEX_VERSIONS = _versions(CODEX_PACKAGE)


def _bin(package: str, versions: dict[str, str], version: str | None) -> str | None:
    directory = versions[version] if version else next(iter(versions.values()))
    p = AGENTS_MODULES / directory / BIN_IN_PACKAGE[package]
    return str(p) if p.exists() and os.access(p, os.X_OK) else None


def claude_bin(version: str | None = None) -> str | None:
    return _bin(CLAUDE_PACKAGE, CLAUDE_VERSIONS, version)


def codex_bin(version: str | None = None) -> str | None:
    return _bin(CODEX_PACKAGE, CODEX_VERSIONS, version)


def _base_env(home: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


def claude_env(home: Path | str, url: str, *, max_retries: int = 0) -> dict[str, str]:
    """Environment for an offline ``claude -p`` against the server at ``url``."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    env = _base_env(home)
    env.update(
        {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": CLAUDE_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
            # Root may use bypassPermissions only inside a declared sandbox.
            "IS_SANDBOX": "1",
        }
    )
    return env


def codex_config(url: str, *, retries: int = 0, model: str = CODEX_MODEL) -> str:
    return (
        f'model = "{model}"\n'
        f'model_provider = "{CODEX_PROVIDER}"\n'
        "[analytics]\nenabled = false\n"
        f"[model_providers.{CODEX_PROVIDER}]\n"
        'name = "hopper test server"\n'
        f'base_url = "{url.rstrip("/")}/v1"\n'
        f'env_key = "{CODEX_KEY_VAR}"\n'
        'wire_api = "responses"\n'
        f"request_max_retries = {retries}\n"
        f"stream_max_retries = {retries}\n"
        "stream_idle_timeout_ms = 10000\n"
    )


def codex_env(home: Path | str, url: str, *, retries: int = 0) -> dict[str, str]:
    """Environment for an offline ``codex exec``; writes ``<home>/.codex/config.toml``."""
    home = Path(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(url, retries=retries))
    env = _base_env(home)
    env.update({"CODEX_HOME": str(codex_home), CODEX_KEY_VAR: CODEX_KEY})
    return env
