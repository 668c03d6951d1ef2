"""What the Claude, Codex and custom adapters share: a job run by the agent driver.

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
from pathlib import Path
from typing import Any

from hopper.agents import npm
from hopper.agents.base import JobContext, Preparation
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
    driver_spec: dict[str, Any] = {
        "kind": kind,
        "agent_name": agent_name,
        "job_id": job.job_id,
        "run_dir": str(job.run_dir),
        "workdir": str(job.workdir),
        "prompt_file": str(job.run_dir / PROMPT_BODY_FILE),
        "args": expand_argv(cfg.args, job.values),
        "model": cfg.model,
        "session": opts.session,
        "sessions_dir": sessions_dir(job.run_dir),
        "check": expand_argv(opts.check, job.values) if opts.check else opts.check,
        "max_nudges": (opts.max_nudges if opts.max_nudges is not None else DEFAULT_MAX_NUDGES),
        "idle_timeout": idle if idle is not None else cfg.idle_timeout,
        "on_idle": opts.on_idle or cfg.on_idle,
        "api_retries": cfg.api_retries,
        "retry_backoff": cfg.retry_backoff,
        "grace": 5.0,
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
    )
