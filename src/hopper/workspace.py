"""Where a job runs: its workdir, an empty folder, or a git worktree on its own branch.

``workspace = "folder"``: ``<root>/workspaces/<job_id>/``, created empty;
removed after a success or an abort, kept after a failure for debugging (the
events ``workspace_removed`` / ``workspace_kept`` as for a worktree).
``workspace = "worktree"``: ``git worktree add -b hopper/<job_id>
<root>/worktrees/<job_id> <ref>`` in the repository at ``workdir``. After a
success the worktree is removed (``git worktree remove``, never forced: a
worktree with uncommitted changes is kept and the event says why) and the
branch is kept; after a failure both are kept for debugging.

Making a workspace is idempotent, so a retry or a start interrupted by a
crash reuses what the first attempt made. Every git call is an argv; the
branch and ref were validated as safe names when the prompt was parsed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hopper.core.record import JobRecord
from hopper.store.layout import Layout

log = logging.getLogger(__name__)

GIT_TIMEOUT = 120.0
BRANCH_PREFIX = "hopper/"


class WorkspaceFailed(Exception):
    """The folder or worktree could not be made; the message says why and what to do."""


@dataclass(frozen=True)
class Workspace:
    path: Path
    branch: str | None = None
    ref: str | None = None
    repo: Path | None = None


def folder_path(layout: Layout, job_id: str) -> Path:
    return layout.root / "workspaces" / job_id


def worktree_path(layout: Layout, job_id: str) -> Path:
    return layout.root / "worktrees" / job_id


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )


def _expand(raw: str | None, what: str) -> Path:
    if not raw or not (raw.startswith("/") or raw.startswith("~")):
        raise WorkspaceFailed(
            f"{what} {raw!r} must be an absolute path (or start with ~) to a git repository"
        )
    return Path(os.path.expanduser(raw))


def prepare(layout: Layout, record: JobRecord) -> Workspace | None:
    """Make (or find again) the job's workspace; None for ``workspace = "none"``."""
    if record.workspace == "folder":
        path = folder_path(layout, record.id)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceFailed(f"cannot create {path}: {exc.strerror}") from None
        return Workspace(path)
    if record.workspace != "worktree":
        return None
    repo = _expand(record.repo or record.workdir, "workdir")
    branch = record.branch or f"{BRANCH_PREFIX}{record.id}"
    ref = record.ref or "HEAD"
    path = worktree_path(layout, record.id)
    if (path / ".git").exists():
        return Workspace(path, branch, ref, repo)  # a retry, or a start cut short
    try:
        top = _git(repo, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceFailed(f"cannot run git: {exc}") from None
    if top.returncode != 0:
        raise WorkspaceFailed(
            f"workdir {repo} is not a git repository ({top.stderr.strip()}); "
            'workspace = "worktree" needs one'
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    exists = _git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    if exists.returncode == 0:
        args = ["worktree", "add", str(path), branch]
    else:
        args = ["worktree", "add", "-b", branch, str(path), ref]
    try:
        done = _git(repo, *args)
    except subprocess.TimeoutExpired:
        raise WorkspaceFailed(f"git worktree add timed out after {GIT_TIMEOUT:g}s") from None
    if done.returncode != 0:
        raise WorkspaceFailed(
            f"git worktree add failed in {repo}: {done.stderr.strip()} "
            f"(check that ref {ref!r} exists and branch {branch!r} is not checked out elsewhere)"
        )
    log.info("job=%s worktree=%s branch=%s ref=%s", record.id, path, branch, ref)
    return Workspace(path, branch, ref, repo)


def remove_worktree(record: JobRecord) -> str | None:
    """After a success: remove the worktree, keep the branch. None if removed, else why not."""
    if record.workspace != "worktree" or not record.workspace_path or not record.repo:
        return "not a worktree job"
    path = Path(record.workspace_path)
    if not path.exists():
        return None
    try:
        done = _git(Path(os.path.expanduser(record.repo)), "worktree", "remove", str(path))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"git worktree remove failed: {exc}"
    if done.returncode != 0:
        return f"kept: {done.stderr.strip() or 'git worktree remove failed'}"
    return None


def remove_folder(layout: Layout, record: JobRecord) -> str | None:
    """After a success or an abort: remove the job's folder. None if removed, else why not.

    Only ``<root>/workspaces/<job_id>`` is ever removed, whatever job.json says, and
    links inside it are removed, never followed (shutil.rmtree)."""
    path = folder_path(layout, record.id)
    if record.workspace != "folder" or record.workspace_path != str(path):
        return f"kept: {record.workspace_path} is not this job's folder {path}"
    if record.session:  # its first job's folder is where the session goes on (driven.py)
        return f"kept: session {record.session!r} may run in it"
    if path.is_symlink():
        return f"kept: {path} is a symbolic link, not the folder hopper made"
    failed: list[str] = []
    shutil.rmtree(path, onerror=lambda _f, p, info: failed.append(f"{p}: {info[1]}"))
    if failed and path.exists():
        return f"kept: cannot remove {failed[0]} ({len(failed)} errors)"
    return None
