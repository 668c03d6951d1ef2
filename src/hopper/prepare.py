"""Getting a queued job ready to start: workspace, working directory, agent, environment.

What every executor needs before it launches anything, and nothing about how
it launches: the folder or worktree (``workspace.py``), the working
directory, the agent adapter's argv and files, and the job's environment.
The agent's files (a bash job's script.sh) are made from admission.json, and
are not written here, nor is ``runs/<id>/work/``: the executor puts them in the
run directory when it launches (a supervised job's supervisor writes them and
makes work/ at the release, before exec: no inode of the watcher's per job;
executors/supervised.py).
Raises :class:`WorkspaceFailed`, :class:`BadPrompt` or :class:`AdmissionLost`;
the caller files the job as failed with that reason (``lost`` for the last).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hopper import workspace
from hopper.agents.base import Agent, JobContext, Preparation
from hopper.agents.registry import lookup
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import WorkspaceReady
from hopper.core.prompt import BadPrompt, PromptSpec
from hopper.core.record import JobRecord
from hopper.core.templates import template_values
from hopper.proc import treekill
from hopper.store.admission import ADMISSION_FILE, AdmissionUnusable, read_admission
from hopper.store.layout import Layout

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
    """``runs/<id>/work/``, made: a job's working directory unless it names one.

    Not the run directory itself, where hopper's records live: a job that
    tidies its working directory (``rm -f *.md``) cannot remove prompt.md.
    Whatever a job planted at the name (a link) is replaced, never followed.
    """
    work = run_dir / WORK_DIR
    try:
        os.mkdir(work)  # the usual case, nothing there yet: one system call
        return work
    except FileExistsError:
        pass
    if work.is_symlink() or (work.exists() and not work.is_dir()):
        work.unlink()
    work.mkdir(exist_ok=True)
    return work


def inherited_environment() -> dict[str, str]:
    """The watcher's environment minus the service manager's variables: a copy, made
    again only when ``os.environ`` changed (compared by its raw mapping, at C speed:
    decoding every variable per job cost more than the rest of the environment)."""
    global _inherited
    raw = getattr(os.environ, "_data", None)
    if not isinstance(raw, dict):  # not CPython's os._Environ: no cache
        return {k: v for k, v in os.environ.items() if k not in SERVICE_ONLY_ENV}
    if _inherited is None or _inherited[0] != raw:
        env = {k: v for k, v in os.environ.items() if k not in SERVICE_ONLY_ENV}
        _inherited = (dict(raw), env)
    return dict(_inherited[1])


_inherited: tuple[dict[object, object], dict[str, str]] | None = None


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


def in_scratch(workdir: Path, run_dir: Path) -> bool:
    """Whether a job runs in ``runs/<id>/work/``, which its executor then makes (a
    supervised job's supervisor, at the release: no directory of the watcher's)."""
    return workdir == run_dir / WORK_DIR


def workdir_of(record: JobRecord, run_dir: Path) -> Path:
    """The job's working directory: its workspace, its ``workdir``, or ``runs/<id>/work/``
    (not made here: only a job that runs there gets one, :func:`in_scratch`).

    Raises :class:`BadPrompt` for a relative or missing ``workdir``.
    """
    if record.workspace_path:
        return Path(record.workspace_path)
    raw = record.workdir
    scratch = run_dir / WORK_DIR
    # A retry's record names the work/ its first start ran in: still its executor's to
    # make (that start may have ended before its supervisor made it)
    if not raw or raw == str(scratch):
        return scratch
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


class AdmissionLost(Exception):
    """A queued job's admission.json, the job as admitted at claim, is gone or not its own.

    The job is lost with it (filed ``lost``): its prompt.md is never parsed in
    its place, as a job that deleted admission.json and rewrote prompt.md
    would otherwise choose what its retry runs. ``detail`` names the file,
    what happened and what to do.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def admitted_prompt(
    layout: Layout, record: JobRecord, run_dir: Path, max_prompt_bytes: int
) -> PromptSpec:
    """The prompt as admitted at claim, from ``admission.json``; prompt.md is never read.

    Raises :class:`AdmissionLost` when there is no admission.json (deleted, or
    lost to a power cut between claim and start) or it is not the one hopper
    wrote for this job (a link, not JSON, another job's).
    """
    path = run_dir / ADMISSION_FILE
    try:
        start = read_admission(run_dir, record.id, max_prompt_bytes)
    except AdmissionUnusable as exc:
        what = f"is not the one hopper wrote at claim ({exc.why})"
    else:
        if start is not None:
            return start.prompt()
        what = "is missing (deleted after the claim, by a job?)"
    where = layout.relative(path) if path.is_relative_to(layout.root) else str(path)
    raise AdmissionLost(
        f"{where}, the job as admitted at claim, {what}; hopper never runs prompt.md "
        "in its place, so the job is lost (to run it again, check the prompt filed under "
        f"processed/ and submit it: hopper retry {record.id})"
    )


def prepare(
    layout: Layout,
    config: Config,
    agents: dict[str, Agent],
    record: JobRecord,
    run_dir: Path,
) -> Prepared:
    """The agent's preparation (its files not yet written), the working directory
    (``runs/<id>/work/`` not made here: by the executor, :func:`in_scratch`), the
    environment.

    ``record`` already carries its workspace (:func:`with_workspace`); the
    prompt is the one admitted at claim (:func:`admitted_prompt`). Raises
    :class:`BadPrompt` when the workdir, a session or the agent's CLI cannot
    be used, :class:`AdmissionLost` when admission.json is gone or not the job's.
    """
    spec = admitted_prompt(layout, record, run_dir, config.max_prompt_bytes)
    workdir = workdir_of(record, run_dir)
    agent = lookup(agents, record.agent)
    values = template_values(record, workdir)
    budget = {
        "max_cost_usd": record.max_cost_usd,
        "max_tokens": record.max_tokens,
        "prices": {model: row.model_dump() for model, row in config.prices.items()},
        # an earlier attempt's spend (job.json's usage): a retry goes on counting from it
        "spent_before": record.usage.model_dump(exclude_none=True) if record.usage else None,
    }
    job = JobContext(record.id, record.name, run_dir, workdir, spec, values, budget)
    prep = agent.prepare(job)
    cwd = prep.workdir or workdir
    own = job_environment(layout, config, record, run_dir, prep, spec.options.env, {})
    # the same as job_environment(..., os.environ): later entries win, keys in order
    env = inherited_environment()
    env.update(own)
    return Prepared(prep, cwd, env, own)
