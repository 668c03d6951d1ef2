"""Getting a queued job ready to start: workspace, working directory, agent, environment.

What every executor needs before it launches anything, and nothing about how
it launches: the folder or worktree (``workspace.py``), the working
directory, the agent adapter's argv and files, and the job's environment.
Raises :class:`WorkspaceFailed` or :class:`BadPrompt`; the caller files the
job as failed with that reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hopper import workspace
from hopper.agents.base import Agent, JobContext, Preparation
from hopper.agents.registry import lookup
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core import prompt as prompts
from hopper.core.lifecycle import WorkspaceReady
from hopper.core.prompt import BadPrompt, PromptSpec
from hopper.core.record import JobRecord
from hopper.core.templates import template_values
from hopper.intake import read_prompt
from hopper.proc import treekill
from hopper.store.admission import ADMISSION_FILE, AdmissionUnusable, read_admission
from hopper.store.atomic import write_atomic
from hopper.store.jobfile import PROMPT_FILE
from hopper.store.layout import Layout

log = logging.getLogger(__name__)

WORK_DIR = "work"  # the default working directory, inside the run directory

# The service manager's variables are for the watcher, not its jobs: a job that
# inherited NOTIFY_SOCKET could report READY or ping the watchdog in our name.
SERVICE_ONLY_ENV = frozenset(
    {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "INVOCATION_ID"}
)


@dataclass(frozen=True)
class Prepared:
    """A job ready to launch: how to run it, where, and with what environment."""

    prep: Preparation
    workdir: Path
    env: dict[str, str]  # the whole environment; holds secrets: never write or log it
    # What hopper sets (config, agent, prompt env, HOPPER_*), without what the watcher
    # inherited: what a container job gets. Secrets too: never write or log it.
    job_vars: dict[str, str] = field(default_factory=dict)


def scratch_dir(run_dir: Path) -> Path:
    """``runs/<id>/work/``: a job's working directory unless it names one.

    Not the run directory itself, where hopper's records live: a job that
    tidies its working directory (``rm -f *.md``) cannot remove prompt.md.
    Whatever a job planted at the name (a link) is replaced, never followed.
    """
    work = run_dir / WORK_DIR
    if work.is_symlink() or (work.exists() and not work.is_dir()):
        work.unlink()
    work.mkdir(exist_ok=True)
    return work


def with_workspace(layout: Layout, record: JobRecord) -> JobRecord:
    """Make the folder or worktree (a retry reuses it); its paths go into the record.

    Raises :class:`hopper.workspace.WorkspaceFailed`.
    """
    ws = workspace.prepare(layout, record)
    if ws is None:
        return record
    repo = str(ws.repo) if ws.repo else None
    return lifecycle.workspace_ready(
        record, WorkspaceReady(str(ws.path), ws.branch, ws.ref, repo)
    ).record


def workdir_of(record: JobRecord, run_dir: Path) -> Path:
    """The job's working directory: its workspace, its ``workdir``, or ``runs/<id>/work/``.

    Raises :class:`BadPrompt` for a relative or missing ``workdir``.
    """
    if record.workspace_path:
        return Path(record.workspace_path)
    if not record.workdir:
        return scratch_dir(run_dir)
    raw = record.workdir
    if not (raw.startswith("/") or raw.startswith("~")):
        raise BadPrompt(
            f"workdir {raw!r} is relative", hint="give an absolute path or one starting with ~"
        )
    path = Path(os.path.expanduser(raw))
    if not path.is_dir():
        raise BadPrompt(
            f"workdir {raw!r} does not exist or is not a directory",
            hint="create it, or fix the workdir key",
        )
    return path


def job_environment(
    layout: Layout,
    config: Config,
    record: JobRecord,
    run_dir: Path,
    prep: Preparation,
    own: Mapping[str, str],
    inherited: Mapping[str, str],
) -> dict[str, str]:
    """The job's environment, later entries winning.

    ``inherited`` (the watcher's, minus the service manager's variables), the
    config's ``env``, the agent's, the prompt's own ``env`` (``own``: never
    written to job.json, events or logs), then hopper's own variables.
    """
    return {
        **{k: v for k, v in inherited.items() if k not in SERVICE_ONLY_ENV},
        **config.env,
        **prep.env,
        **own,
        "HOPPER_JOB_ID": record.id,
        # How recovery finds the job's processes once its supervisor is gone.
        treekill.JOB_TOKEN_ENV: treekill.job_token(record.id),
        "HOPPER_RUN_DIR": str(run_dir),
        "HOPPER_ROOT": str(layout.root),
        **({"HOPPER_BRANCH": record.branch} if record.branch else {}),
    }


def admitted_prompt(record: JobRecord, run_dir: Path, max_prompt_bytes: int) -> PromptSpec:
    """The prompt as admitted at claim, from ``admission.json``; prompt.md is not read.

    A job with no usable admission.json — claimed by a hopper that did not
    keep one (queued across an upgrade), or one lost to a power cut, or one
    a job overwrote — is not failed: its prompt.md is read and parsed, as
    every start did before admission.json, and a warning says so.
    """
    why = "there is none (claimed by an older hopper, or lost in a crash)"
    try:
        start = read_admission(run_dir, record.id, max_prompt_bytes)
    except AdmissionUnusable as exc:
        start, why = None, f"it is not usable: {exc.why}"
    if start is not None:
        return start.prompt()
    log.warning(
        "job=%s no admission record in %s: %s; reading its prompt.md as admitted",
        record.id,
        run_dir / ADMISSION_FILE,
        why,
    )
    return prompts.parse(read_prompt(run_dir / PROMPT_FILE, max_prompt_bytes))


def prepare(
    layout: Layout,
    config: Config,
    agents: dict[str, Agent],
    record: JobRecord,
    run_dir: Path,
) -> Prepared:
    """The agent's preparation (its files written), the working directory, the environment.

    ``record`` already carries its workspace (:func:`with_workspace`); the
    prompt is the one admitted at claim (:func:`admitted_prompt`). Raises
    :class:`BadPrompt` when the workdir, a session or the agent's CLI cannot
    be used, or a job claimed before admission.json existed has a bad prompt.
    """
    spec = admitted_prompt(record, run_dir, config.max_prompt_bytes)
    workdir = workdir_of(record, run_dir)
    agent = lookup(agents, record.agent)
    values = template_values(record, workdir)
    prep = agent.prepare(JobContext(record.id, record.name, run_dir, workdir, spec, values))
    for name, content in prep.files.items():
        write_atomic(run_dir / name, content.encode(), durable=False)
    env = job_environment(layout, config, record, run_dir, prep, spec.options.env, os.environ)
    own = job_environment(layout, config, record, run_dir, prep, spec.options.env, {})
    return Prepared(prep, workdir, env, own)
