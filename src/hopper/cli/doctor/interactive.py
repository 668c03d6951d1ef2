"""The check of interactive mode: can Claude Code start unattended in a terminal hopper holds?

Read only: it says what hopper will add to the CLI's own config at a session's
start (agents/claude_config.py) and what hopper cannot add for you (an API key
or a login; a key you rejected).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hopper.agents.claude_config import (
    ClaudeConfigError,
    config_dir,
    config_path,
    needs,
    read_config,
)
from hopper.cli.doctor.check import Check, Status

NAME = "agent claude interactive"


def check_claude_interactive(env: Mapping[str, str], version: str, mode: str) -> Check:
    """What interactive Claude (``version``, as ``--version`` said) lacks with ``env``
    (the agent's environment); ``mode`` is ``[agents.claude] mode``."""
    try:
        path = config_path(env)
        config = read_config(path)
    except ClaudeConfigError as exc:
        return Check(NAME, "warn", f"{exc.message} ({exc.path})", exc.hint)
    key = env.get("ANTHROPIC_API_KEY") or None
    need = needs(config, path, Path.cwd(), key)
    logged_in = (
        bool(config.get("oauthAccount")) or (config_dir(env) / ".credentials.json").is_file()
    )
    ahead = [m for m in need.missing() if "hasTrustDialogAccepted" not in m]
    sets = f"; hopper sets at the first start: {', '.join(ahead)}" if ahead else ""
    where = f"{version}, config {path}{sets}; each workdir is trusted as a session starts"
    if need.key_rejected:
        return Check(
            NAME,
            "warn",
            f"{where}; ANTHROPIC_API_KEY is rejected in the CLI's config: "
            "interactive claude will not use it",
            f"remove the key's entry from customApiKeyResponses.rejected in {path}",
        )
    if not key and not logged_in:
        status: Status = "warn" if mode == "interactive" else "ok"
        return Check(
            NAME,
            status,
            f"{where}; no ANTHROPIC_API_KEY and no login: interactive claude would stop "
            "at its login screen",
            "set ANTHROPIC_API_KEY in [agents.claude] env, or log in once: claude /login",
        )
    auth = "API key" if key else "logged-in account"
    return Check(NAME, "ok", f"{where}; {auth}: mode = {mode} can start unattended")
