"""Checks of the agents: bash, the agent CLIs and their versions, custom agents."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

from hopper.agents.driven import find_binary
from hopper.cli.doctor.check import Check, ok
from hopper.cli.doctor.interactive import check_claude_interactive
from hopper.config import Config
from hopper.core.prompt import BadPrompt

AGENT_CLIS = ("claude", "codex")


def agent_version(binary: str, timeout: float = 20.0) -> str:
    """The first line ``binary --version`` prints; OSError or TimeoutExpired if it cannot."""
    result = subprocess.run(
        [binary, "--version"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    lines = (result.stdout or result.stderr).strip().splitlines()
    if result.returncode != 0:
        raise OSError(f"exit {result.returncode}: {lines[-1] if lines else 'no output'}")
    return lines[0] if lines else "?"


def check_agents(
    config: Config,
    find: Callable[[str, str | None], str] = find_binary,
    version: Callable[[str], str] = agent_version,
    which: Callable[[str], str | None] = shutil.which,
    env: Mapping[str, str] | None = None,
) -> list[Check]:
    """bash must be there (the watcher serves bash jobs with nothing else installed);
    a missing agent CLI is a warning naming the one command that installs it."""
    bash = which("bash")
    checks: list[Check] = [
        ok("agent bash", f"{bash}: bash jobs can run")
        if bash
        else Check(
            "agent bash",
            "fail",
            "bash is not on PATH: bash jobs cannot run",
            "install bash, or put it on the watcher's PATH",
        )
    ]
    for name in AGENT_CLIS:
        table = config.agents.get(name)
        default = name == config.default_agent
        try:
            binary = find(name, table.bin if table else None)
        except BadPrompt:
            checks.append(
                Check(
                    f"agent {name}",
                    "warn",
                    f"the {name} CLI is not installed: {name} jobs fail until it is"
                    + (" (it is the default agent: so do prompts naming none)" if default else ""),
                    "hopper agents install (the pinned CLIs, with npm, for this user), "
                    f"or set [agents.{name}] bin = PATH in the config",
                )
            )
            continue
        try:
            said = version(binary)
            checks.append(ok(f"agent {name}", f"{binary}: {said}"))
            if name == "claude":
                agent_env = {**(os.environ if env is None else env), **config.env}
                agent_env.update(table.env if table else {})
                mode = table.mode if table else "headless"
                checks.append(check_claude_interactive(agent_env, said, mode))
        except (OSError, subprocess.TimeoutExpired) as exc:
            checks.append(
                Check(
                    f"agent {name}",
                    "fail" if default else "warn",
                    f"{binary} --version failed: {exc}",
                    "reinstall it (hopper agents install); node must be on PATH",
                )
            )
    for name, table in sorted(config.agents.items()):
        if table.argv and not shutil.which(os.path.expanduser(table.argv[0])):
            checks.append(
                Check(
                    f"agent {name}",
                    "warn",
                    f"custom agent: {table.argv[0]!r} is not an executable on PATH",
                    f"install it or give its absolute path in [agents.{name}] argv",
                )
            )
    return checks
