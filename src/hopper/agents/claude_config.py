"""Claude Code's own config file, and what an unattended interactive run needs in it.

Standard library only. Interactive Claude Code stops at a dialog on its first
run in a fresh HOME, and nobody is there to answer it. Three answers live in
the CLI's global config file (tried with 2.1.197 and 2.1.330, offline):

* ``hasCompletedOnboarding: true`` — else the welcome, theme and login screens;
* ``projects[<workdir>].hasTrustDialogAccepted: true`` — else "Is this a project
  you trust?" (the CLI walks up from its cwd, so the workdir itself is enough);
* ``customApiKeyResponses.approved`` holding the last 20 characters of
  ``ANTHROPIC_API_KEY`` — else "Do you want to use this API key?" (default No).
  A key the user put under ``rejected`` is left rejected: that was their answer.

The file is ``$CLAUDE_CONFIG_DIR/.claude.json`` (else ``~/.claude.json``), or
the legacy ``<config dir>/.config.json`` when that exists (the CLI prefers it).
:func:`merge_config` reads it (no blocking, size-capped), adds only what is
missing, and writes it back through a temporary file and a rename, keeping its
mode; a config that already has everything is not written at all. A file that
is not JSON is never overwritten: the error names it. A logged-in account
(``oauthAccount``, the credentials file) is not touched and keeps working.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopper.errors import HopperError
from hopper.store.atomic import write_atomic
from hopper.store.saferead import UnreadableFile, read_stat

CONFIG_CAP = 64 * 1024 * 1024  # the CLI keeps per-project history in it: it grows
KEY_SUFFIX = 20  # how much of an API key the CLI records as approved


class ClaudeConfigError(HopperError):
    """Claude Code's config file cannot be read or updated."""


@dataclass(frozen=True)
class ConfigNeeds:
    """What an unattended interactive run still lacks in the CLI's config (empty: nothing)."""

    path: Path
    onboarding: bool = False
    trust: tuple[str, ...] = ()
    approve_key: str | None = None  # the key's recorded suffix, to approve
    key_rejected: bool = False  # the user rejected this key: left as is

    def missing(self) -> list[str]:
        """Each missing answer, as a person reads it."""
        out = []
        if self.onboarding:
            out.append("hasCompletedOnboarding (first-run screens)")
        out += [f"projects[{p!r}].hasTrustDialogAccepted (trust dialog)" for p in self.trust]
        if self.approve_key:
            out.append("customApiKeyResponses.approved (API key dialog)")
        return out


def config_dir(env: Mapping[str, str]) -> Path:
    """The CLI's config directory: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser()
    return _home(env) / ".claude"


def config_path(env: Mapping[str, str]) -> Path:
    """The global config file the CLI reads, as it picks it (see the module doc)."""
    legacy = config_dir(env) / ".config.json"
    if legacy.is_file():
        return legacy
    base = Path(env["CLAUDE_CONFIG_DIR"]).expanduser() if env.get("CLAUDE_CONFIG_DIR") else None
    return (base or _home(env)) / ".claude.json"


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    if not home:
        raise ClaudeConfigError(
            "HOME is not set, so Claude Code's config cannot be found",
            hint="run the job with HOME set (or set CLAUDE_CONFIG_DIR)",
        )
    return Path(home)


def trust_keys(workdir: Path) -> tuple[str, ...]:
    """The project keys to trust for ``workdir``: as given and with links resolved."""
    given = os.path.abspath(workdir)
    real = os.path.realpath(workdir)
    return (given,) if given == real else (given, real)


def read_config(path: Path) -> dict[str, Any]:
    """The config's JSON object; ``{}`` when there is no file (or an empty one)."""
    try:
        data, _ = read_stat(path, CONFIG_CAP, hint="Claude Code's config must be a regular file")
    except FileNotFoundError:
        return {}
    except UnreadableFile as exc:
        raise ClaudeConfigError(exc.message, path=path, hint=exc.hint) from None
    if not data.strip():
        return {}
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ClaudeConfigError(
            f"is not valid JSON ({exc}); hopper does not overwrite it",
            path=path,
            hint="fix or move the file aside (the CLI recreates it), then run again",
        ) from None
    if not isinstance(obj, dict):
        raise ClaudeConfigError(
            "holds JSON that is not an object; hopper does not overwrite it",
            path=path,
            hint="fix or move the file aside (the CLI recreates it), then run again",
        )
    return obj


def needs(config: Mapping[str, Any], path: Path, workdir: Path, api_key: str | None) -> ConfigNeeds:
    """What ``config`` lacks for an unattended run in ``workdir`` (pure)."""
    projects = config.get("projects")
    projects = projects if isinstance(projects, dict) else {}
    untrusted = tuple(
        key
        for key in trust_keys(workdir)
        if not (isinstance(projects.get(key), dict) and projects[key].get("hasTrustDialogAccepted"))
    )
    approve, rejected = None, False
    if api_key:
        suffix = api_key[-KEY_SUFFIX:]
        answers = config.get("customApiKeyResponses")
        answers = answers if isinstance(answers, dict) else {}
        rejected = suffix in _strings(answers.get("rejected"))
        if not rejected and suffix not in _strings(answers.get("approved")):
            approve = suffix
    return ConfigNeeds(
        path=path,
        onboarding=config.get("hasCompletedOnboarding") is not True,
        trust=untrusted,
        approve_key=approve,
        key_rejected=rejected,
    )


def merged(config: Mapping[str, Any], need: ConfigNeeds) -> dict[str, Any]:
    """``config`` with the missing answers added, nothing else changed (pure)."""
    out = dict(config)
    if need.onboarding:
        out["hasCompletedOnboarding"] = True
    if need.trust:
        projects = dict(out["projects"]) if isinstance(out.get("projects"), dict) else {}
        for key in need.trust:
            entry = dict(projects[key]) if isinstance(projects.get(key), dict) else {}
            entry["hasTrustDialogAccepted"] = True
            projects[key] = entry
        out["projects"] = projects
    if need.approve_key:
        answers = out.get("customApiKeyResponses")
        answers = dict(answers) if isinstance(answers, dict) else {}
        answers["approved"] = [*_strings(answers.get("approved")), need.approve_key]
        answers.setdefault("rejected", [])
        out["customApiKeyResponses"] = answers
    return out


def merge_config(env: Mapping[str, str], workdir: Path) -> ConfigNeeds:
    """Add what an unattended run in ``workdir`` needs to the CLI's config; what was added.

    Written only when something is missing, atomically, keeping the file's mode
    (0600 for a new one); a link is written through to the file it names, so a
    user's dotfiles link stays a link."""
    path = config_path(env)
    target = Path(os.path.realpath(path))
    config = read_config(target)
    need = needs(config, path, workdir, env.get("ANTHROPIC_API_KEY"))
    if not need.missing():
        return need
    mode = 0o600
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(merged(config, need), indent=2, ensure_ascii=False) + "\n"
    try:
        write_atomic(target, data.encode(), mode=mode)
        os.chmod(target, mode)  # the umask may have narrowed it
    except OSError as exc:
        raise ClaudeConfigError(
            f"cannot be updated ({exc.strerror or exc})",
            path=target,
            hint="make it writable by the user hopper runs the agent as",
        ) from None
    return need


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
