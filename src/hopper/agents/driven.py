"""The adapter of every agent the driver runs (Claude, Codex, custom): one class, one CLI.

What differs between them is the CLI's (agents/claude.py, codex.py, custom.py):
its command, the keys it adds to the spec, its argv and stream.

An agent job's argv is ``python -I -m hopper.agents.drive <run_dir>/agent.spec.json``;
the spec (written into the run dir, never containing the environment or any
secret) says which CLI to run and how. See ``hopper.agents.drive``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopper.agents import npm, sessionmap
from hopper.agents.base import Cli, JobContext, Preparation
from hopper.agents.drive import SPEC_FILE
from hopper.config import AgentConfig
from hopper.core.prompt import BadPrompt
from hopper.core.templates import expand_argv

PROMPT_BODY_FILE = "prompt.body.md"
DEFAULT_MAX_NUDGES = 2


def find_binary(name: str, configured: str | None) -> str:
    """The configured binary, else ``name`` on PATH, else one ``hopper agents install``
    put in place (per user, beside hopper, or a checkout's tools/agents)."""
    if configured:
        return os.path.expanduser(configured)
    found = shutil.which(name)
    if found:
        return found
    for folder in npm.bin_dirs(os.environ):
        local = folder / name
        if local.exists():
            return str(local)
    raise BadPrompt(
        f"agent {name!r}: the {name} CLI is not installed",
        hint=f"install it: hopper agents install (or set [agents.{name}] bin in the config)",
    )


def sessions_dir(run_dir: Path) -> str:
    """``<root>/sessions``: a run dir is ``<root>/runs/<job_id>``."""
    return str(run_dir.parent.parent / "sessions")


def session_cwd(job: JobContext, agent_name: str) -> Path:
    """Where the CLI of a session job runs: one directory for the whole session.

    The session's recorded workdir, else this job's own directory when it has
    one (a ``workdir``, a route's, a folder or worktree), else
    ``<root>/sessions/<name>/work``. A later prompt whose ``workdir`` key names
    another directory than the session's is a bad prompt: the CLIs keep a
    conversation per working directory (Claude 2.1.197 cannot resume it
    anywhere else), and a session that hops directories is a mistake to report.
    """
    name = job.spec.options.session
    assert name
    where = Path(sessions_dir(job.run_dir))
    entry = sessionmap.read_entry(where, name)
    recorded = entry.workdir if entry is not None and entry.agent == agent_name else None
    actual = job.workdir
    in_run = actual == job.run_dir or job.run_dir in actual.parents
    own = None if in_run else actual
    if recorded is None:
        if own is not None:
            return own
        folder = sessionmap.session_workdir(where, name)
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    named = job.spec.options.workdir
    if own is not None and named is not None:
        wanted = Path(os.path.expanduser(named))
        if wanted.resolve() == own.resolve() and own.resolve() != Path(recorded).resolve():
            raise BadPrompt(
                f"session {name!r} runs in {recorded}, but this prompt names workdir {named!r}",
                hint="drop the workdir key (the session's directory is used), give the "
                "session's, or start a new session name",
            )
    folder = Path(recorded)
    if folder == sessionmap.session_workdir(where, name):
        folder.mkdir(parents=True, exist_ok=True)
    if not folder.is_dir():
        raise BadPrompt(
            f"session {name!r} runs in {recorded}, which no longer exists",
            hint=f"recreate it, or remove {sessionmap.map_path(where, name)} to start afresh",
        )
    return folder


def prepare_driven(
    job: JobContext, agent_name: str, kind: str, cfg: AgentConfig, extra: dict[str, Any]
) -> Preparation:
    """The Preparation of a driver-run agent job; ``extra`` adds CLI-specific spec keys."""
    spec = job.spec
    body = spec.body.strip()
    if not body:
        raise BadPrompt("has no prompt text", hint="write the task below the front matter")
    opts = spec.options
    idle = spec.idle_timeout_seconds
    cwd = session_cwd(job, agent_name) if opts.session else job.workdir
    driver_spec: dict[str, Any] = {
        "kind": kind,
        "agent_name": agent_name,
        "job_id": job.job_id,
        "run_dir": str(job.run_dir),
        "workdir": str(cwd),
        "prompt_file": str(job.run_dir / PROMPT_BODY_FILE),
        "args": expand_argv(cfg.args, job.values),
        "model": cfg.model,
        "session": opts.session,
        "sessions_dir": sessions_dir(job.run_dir),
        "check": expand_argv(opts.check, job.values) if opts.check else opts.check,
        "max_nudges": (opts.max_nudges if opts.max_nudges is not None else DEFAULT_MAX_NUDGES),
        "idle_timeout": idle if idle is not None else cfg.idle_timeout,
        "on_idle": opts.on_idle or cfg.on_idle,
        "on_error": opts.on_error or cfg.on_error,
        "on_dead": opts.on_dead or cfg.on_dead,
        "api_retries": cfg.api_retries,
        "retry_backoff": cfg.retry_backoff,
        "grace": 5.0,
        **job.budget,
        **extra,
    }
    return Preparation(
        argv=[sys.executable, "-I", "-m", "hopper.agents.drive", str(job.run_dir / SPEC_FILE)],
        env=dict(cfg.env),
        files={
            PROMPT_BODY_FILE: body + "\n",
            SPEC_FILE: json.dumps(driver_spec, indent=2) + "\n",
        },
        stop_signals=[signal.SIGINT, signal.SIGTERM],
        workdir=cwd,
    )


@dataclass
class DrivenAgent:
    """``[agents.NAME]`` run by the driver through ``cli``."""

    name: str
    cli: Cli
    config: AgentConfig

    def prepare(self, job: JobContext) -> Preparation:
        extra: dict[str, Any] = {}
        if self.cli.binary is not None:
            extra["bin"] = find_binary(self.cli.binary, self.config.bin)
        extra.update(self.cli.spec_keys(self.config, lambda argv: expand_argv(argv, job.values)))
        return prepare_driven(job, self.name, self.cli.kind, self.config, extra)
