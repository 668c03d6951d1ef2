"""The agent CLIs hopper installs for itself: ``hopper agents install``.

hopper ships its own copy of ``tools/agents/package.json`` and its lock
(``hopper/agents/npm/``). ``hopper agents install`` writes the part of them a
user needs — the pinned Claude Code and Codex, not the older versions the test
suite's version matrix adds under npm aliases — into a folder and runs
``npm ci`` there, so every file npm fetches is the one the lock's integrity
hash names. The folders, in the order the agent lookup tries them after
``[agents.X] bin`` and PATH:

1. ``$XDG_DATA_HOME/hopper/agents`` (``~/.local/share/hopper/agents``): per
   user, the default;
2. ``<sys.prefix>/share/hopper/agents``: beside this installed hopper, for
   every user of it (``sudo hopper agents install --system`` for the service);
3. ``tools/agents`` of a source checkout (``scripts/install-agents``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import hopper
from hopper.store.atomic import write_atomic

#: The CLIs hopper drives, by command name: their npm packages.
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"}
MANIFEST = "package.json"
LOCK = "package-lock.json"
REPO_TOOLS = Path(hopper.__file__).resolve().parents[2] / "tools" / "agents"


class InstallFailed(RuntimeError):
    """npm is missing, or npm ci failed, or the installed CLIs do not run."""


def user_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_DATA_HOME/hopper/agents``, else ``~/.local/share/hopper/agents``."""
    data = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or "~") / ".local" / "share")
    return Path(data).expanduser() / "hopper" / "agents"


def system_dir() -> Path:
    """Beside this hopper's own installation (its virtualenv's prefix)."""
    return Path(sys.prefix) / "share" / "hopper" / "agents"


def bin_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where installed CLIs are looked for, in order (after the config and PATH)."""
    return [d / "node_modules" / ".bin" for d in (user_dir(env), system_dir(), REPO_TOOLS)]


def shipped() -> tuple[dict[str, Any], dict[str, Any]]:
    """The package.json and lock shipped with hopper."""
    folder = resources.files("hopper.agents") / "npm"
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    lock = json.loads((folder / LOCK).read_text(encoding="utf-8"))
    return manifest, lock


def pinned_only(
    manifest: dict[str, Any], lock: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``manifest`` and ``lock`` without the npm-alias dependencies (pure).

    The test suite's older versions are installed under aliases
    (``"claude-code-2.1.197": "npm:@anthropic-ai/claude-code@2.1.197"``); a
    user needs only the pinned ones, so the aliases, and every lock entry
    under them, are dropped. What is kept is byte-for-byte the lock's entry,
    integrity hash included.
    """
    deps: dict[str, str] = manifest.get("dependencies", {})
    aliases = {name for name, spec in deps.items() if str(spec).startswith("npm:")}
    kept = {name: spec for name, spec in deps.items() if name not in aliases}
    new_manifest = {
        "name": "hopper-agents",
        "version": "0.0.0",
        "private": True,
        "description": "The coding-agent CLIs hopper drives, installed by hopper agents install.",
        "dependencies": kept,
    }

    def aliased(key: str) -> bool:
        top = key.removeprefix("node_modules/").split("/node_modules/")[0]
        return top in aliases

    packages = {k: v for k, v in lock.get("packages", {}).items() if k and not aliased(k)}
    root = {**lock.get("packages", {}).get("", {}), "name": "hopper-agents", "dependencies": kept}
    root.pop("license", None)
    new_lock = {**lock, "name": "hopper-agents", "packages": {"": root, **packages}}
    return new_manifest, new_lock


def ci_argv(prefix: Path, npm: str = "npm") -> list[str]:
    """The npm command: a clean install of exactly the lock, from the cache where it can."""
    return [
        npm,
        "ci",
        "--prefix",
        str(prefix),
        "--prefer-offline",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]


def write_manifest(prefix: Path) -> None:
    """Put the pinned package.json and lock into ``prefix`` (atomically each)."""
    manifest, lock = pinned_only(*shipped())
    prefix.mkdir(parents=True, exist_ok=True)
    write_atomic(prefix / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    write_atomic(prefix / LOCK, (json.dumps(lock, indent=2) + "\n").encode())


def install(prefix: Path, npm: str = "npm", timeout: float = 900) -> dict[str, Path]:
    """``npm ci`` the pinned CLIs into ``prefix``; returns each command's binary.

    npm's own output goes to this process's stdout/stderr. Raises
    :class:`InstallFailed` with what to do when npm is missing or fails, or a
    binary does not run afterwards.
    """
    write_manifest(prefix)
    try:
        done = subprocess.run(ci_argv(prefix, npm), check=False, timeout=timeout)
    except FileNotFoundError:
        raise InstallFailed(
            f"{npm!r} not found: the agent CLIs install with npm "
            "(Debian: apt-get install -y nodejs npm; Node.js 22 or later)"
        ) from None
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"npm ci did not finish in {timeout:.0f}s") from None
    if done.returncode != 0:
        raise InstallFailed(f"npm ci in {prefix} exited {done.returncode} (its message is above)")
    _finish_claude(prefix)
    binaries = {name: prefix / "node_modules" / ".bin" / name for name in PACKAGES}
    for path in binaries.values():
        if not _runs(path):
            raise InstallFailed(f"{path} was installed but does not run ({path} --version failed)")
    return binaries


def _finish_claude(prefix: Path) -> None:
    """Claude Code's install script puts the native binary in place; an npm that skips
    scripts (ignore-scripts) leaves a placeholder, so run it by hand then."""
    package = prefix / "node_modules" / PACKAGES["claude"]
    script = package / "install.cjs"
    if script.exists() and not _runs(package / "bin" / "claude.exe"):
        subprocess.run(["node", str(script)], cwd=package, check=False, timeout=300)


def _runs(binary: Path) -> bool:
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            check=False,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
