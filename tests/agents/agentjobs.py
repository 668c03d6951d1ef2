"""Helpers for agent jobs end to end: a config pointing hopper's agents at the model server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents_env import (
    CLAUDE_VERSIONS,
    CODEX_VERSIONS,
    claude_bin,
    claude_env,
    codex_bin,
    codex_env,
)
from conftest import FAST_CONFIG
from hopper.store.layout import Layout

# The version matrix: each installed CLI version as "agent@version" (pinned first).
CLAUDES = [f"claude@{v}" for v in CLAUDE_VERSIONS]
CODEXES = [f"codex@{v}" for v in CODEX_VERSIONS]
MATRIX = CLAUDES + CODEXES


def versioned(agent_at: str) -> tuple[str, dict[str, str]]:
    """``"claude@2.1.197"`` -> ``("claude", {"claude_version": "2.1.197"})`` for agent_config."""
    agent, _, version = agent_at.partition("@")
    return agent, ({f"{agent}_version": version} if version else {})


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v)  # strings and lists of strings: JSON is valid TOML here


def agent_config(
    config_file: Path,
    tmp_path: Path,
    url: str,
    *,
    claude_retries: int = 0,
    codex_retries: int = 0,
    claude_version: str | None = None,
    codex_version: str | None = None,
    **tables: dict[str, Any],
) -> dict[str, dict[str, str]]:
    """Write the config: fast timings, [agents.claude] and [agents.codex] for the server.

    ``claude_version`` / ``codex_version`` pick an installed CLI version (default: pinned);
    ``claude_retries`` / ``codex_retries`` are the CLIs' own retries (default: none).
    """
    home = tmp_path / "agent-home"
    envs = {
        "claude": claude_env(home, url, max_retries=claude_retries),
        "codex": codex_env(home, url, retries=codex_retries),
    }
    base: dict[str, dict[str, Any]] = {
        "claude": {
            "bin": claude_bin(claude_version),
            "permission_mode": "bypassPermissions",
            "retry_backoff": "0.1s",
        },
        "codex": {
            "bin": codex_bin(codex_version),
            "sandbox": "workspace-write",
            "retry_backoff": "0.1s",
        },
    }
    for name, extra in tables.items():
        base.setdefault(name, {}).update(extra)
    text = FAST_CONFIG
    for name, table in base.items():
        text += f"\n[agents.{name}]\n"
        text += "".join(f"{k} = {_value(v)}\n" for k, v in table.items() if v is not None)
        if name in envs:
            text += f"[agents.{name}.env]\n"
            text += "".join(f"{k} = {_value(v)}\n" for k, v in envs[name].items())
    config_file.write_text(text)
    return envs


def prompt(agent: str, body: str, **options: Any) -> str:
    front = "".join(f"{k} = {_value(v)}\n" for k, v in options.items())
    return f'+++\nagent = "{agent}"\n{front}+++\n{body}\n'


Hopper = Callable[..., subprocess.CompletedProcess[str]]  # the `hopper` fixture's type


def jobs(layout: Layout) -> list[Path]:
    """The run directories under the root, in claim order."""
    return sorted(d for d in layout.runs.iterdir() if not d.name.startswith("."))
