"""Workspaces (folder, git worktree), routing defaults and template values, end to end."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import iter_run_dirs, read_events, read_record
from hopper.store.layout import Layout
from hopper.workspace import folder_path, remove_folder


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "README").write_text("hi\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "init")
    return path


def only(layout: Layout):
    (run_dir,) = list(iter_run_dirs(layout.runs))
    return read_record(run_dir)


def worktree_job(repo: Path, script: str) -> str:
    return bash(script, workdir=str(repo), workspace="worktree")


def test_worktree_success_keeps_branch_removes_worktree(layout: Layout, tmp_path, hopper) -> None:
    repo = make_repo(tmp_path / "repo")
    script = (
        'echo "$HOPPER_BRANCH" > out.txt\ngit add out.txt\n'
        'git -c user.email=j@x -c user.name=j commit -q -m "job"\n'
    )
    drop(layout, "wt", worktree_job(repo, script))
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert rec.state is JobState.SUCCEEDED, rec.detail
    assert rec.branch == f"hopper/{rec.id}" and rec.ref == "HEAD" and rec.repo == str(repo)
    assert rec.workspace_path == str(layout.root / "worktrees" / rec.id)
    assert rec.workdir == rec.workspace_path
    assert not Path(rec.workspace_path).exists()
    assert git(repo, "show", f"{rec.branch}:out.txt") == rec.branch
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # the repo is untouched
    events = [e["event"] for e in read_events(layout.run_dir(rec.id))]
    assert "workspace_removed" in events


def test_worktree_failure_keeps_both(layout: Layout, tmp_path, hopper) -> None:
    repo = make_repo(tmp_path / "repo")
    drop(
        layout,
        "wt",
        bash(
            "touch half-done; exit 4",
            workdir=str(repo),
            workspace="worktree",
            branch="fix/thing",
            ref="main",
        ),
    )
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert (rec.state, rec.reason) == (JobState.FAILED, Reason.EXIT_NONZERO)
    assert rec.branch == "fix/thing" and rec.ref == "main"
    assert rec.workspace_path and (Path(rec.workspace_path) / "half-done").exists()
    assert git(repo, "rev-parse", "--verify", "fix/thing")
    events = [e["event"] for e in read_events(layout.run_dir(rec.id))]
    assert "workspace_kept" in events
    git(repo, "worktree", "remove", "--force", rec.workspace_path)


def test_worktree_of_a_plain_directory_fails_clearly(layout: Layout, tmp_path, hopper) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    drop(layout, "wt", worktree_job(plain, "true"))
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert rec.reason is Reason.WORKSPACE_FAILED and "not a git repository" in (rec.detail or "")


def workspace_events(layout: Layout, job_id: str) -> list[dict]:
    return [e for e in read_events(layout.run_dir(job_id)) if e["event"].startswith("workspace_")]


def test_folder_workspace_is_removed_after_a_success(layout: Layout, hopper) -> None:
    drop(layout, "f", bash("pwd; ls -A | wc -l; mkdir -p d/e; touch d/e/x", workspace="folder"))
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert rec.state is JobState.SUCCEEDED
    folder = layout.root / "workspaces" / rec.id
    assert rec.workspace_path == str(folder) and rec.workdir == str(folder)
    assert (layout.run_dir(rec.id) / "job.log").read_text().split() == [str(folder), "0"]
    # cleaned on success, like a worktree, with the same event (written on the hooks' thread)
    wait_for(lambda: workspace_events(layout, rec.id), what="the workspace event")
    assert not folder.exists()
    (ev,) = workspace_events(layout, rec.id)
    assert ev["event"] == "workspace_removed" and ev["path"] == str(folder)


def test_folder_workspace_is_kept_after_a_failure(layout: Layout, hopper) -> None:
    drop(layout, "f", bash("touch half-done; exit 3", workspace="folder"))
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert (rec.state, rec.reason) == (JobState.FAILED, Reason.EXIT_NONZERO)
    folder = layout.root / "workspaces" / rec.id
    assert (folder / "half-done").exists()
    (ev,) = workspace_events(layout, rec.id)
    assert ev["event"] == "workspace_kept" and ev["path"] == str(folder)
    assert ev["why"] == "the job failed"


def test_folder_workspace_is_removed_after_an_abort(
    layout: Layout, watchers, config_file: Path
) -> None:
    drop(layout, "f", bash("touch started; exec sleep 300", workspace="folder"))
    watchers.start()
    folder = layout.root / "workspaces"
    wait_for(lambda: list(folder.glob("*/started")), what="the job to start in its folder")
    (job_dir,) = list(folder.iterdir())
    (layout.run_dir(job_dir.name) / "ABORT").touch()
    wait_for(lambda: workspace_events(layout, job_dir.name), what="the workspace event")
    assert only(layout).state is JobState.ABORTED
    (ev,) = workspace_events(layout, job_dir.name)
    assert ev["event"] == "workspace_removed" and not job_dir.exists()


def test_a_folder_that_is_not_the_jobs_own_is_never_removed(layout: Layout, tmp_path) -> None:
    """remove_folder removes <root>/workspaces/<id> only, whatever job.json names, and a link
    there is not followed."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").touch()
    base = JobRecord(
        id="20261122-120000-000-x-abcd",
        name="x",
        state=JobState.SUCCEEDED,
        agent="bash",
        host="h",
        inbox_path="inbox/x.prompt.md",
        created_at=datetime(2026, 11, 22, tzinfo=UTC),
        workspace="folder",
    )
    named = base.model_copy(update={"workspace_path": str(precious)})
    assert "is not this job's folder" in (remove_folder(layout, named) or "")
    link = folder_path(layout, base.id)
    link.parent.mkdir(parents=True)
    link.symlink_to(precious)
    linked = base.model_copy(update={"workspace_path": str(link)})
    assert "is a symbolic link" in (remove_folder(layout, linked) or "")
    assert (precious / "keep").exists() and link.is_symlink()
    link.unlink()
    link.mkdir()
    own = base.model_copy(update={"workspace_path": str(link), "session": "talk"})
    assert "session 'talk' may run in it" in (remove_folder(layout, own) or "")
    assert link.is_dir()
    assert remove_folder(layout, linked) is None and not link.exists()


def test_routes_give_defaults_and_inbox_init(layout: Layout, config_file: Path, tmp_path, hopper):
    projects = tmp_path / "projects"
    (projects / "app").mkdir(parents=True)
    config_file.write_text(
        config_file.read_text()
        + f'[routes."acme/{{repo}}"]\nworkdir = "{projects}/{{repo}}"\ngroup = "acme-{{repo}}"\n'
        + 'priority = 2\n[routes.night]\nagent = "bash"\n'
    )
    result = hopper("inbox", "init")
    assert result.returncode == 0, result.stderr
    assert (layout.inbox / "acme").is_dir() and (layout.inbox / "night").is_dir()
    drop(layout, "where", "pwd\n", sub="acme/app")
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert rec.state is JobState.SUCCEEDED, rec.detail
    assert rec.workdir == str(projects / "app")
    assert (rec.group, rec.priority) == ("acme-app", 2)
    assert (layout.run_dir(rec.id) / "job.log").read_text().strip() == str(projects / "app")


def test_template_values_in_a_configured_command(layout: Layout, config_file: Path, hopper):
    config_file.write_text(
        config_file.read_text()
        + '[agents.echo]\nargv = ["echo", "id=${job.id}", "name=${job.name}", "home=$HOME"]\n'
    )
    drop(layout, "tpl", '+++\nagent = "echo"\n+++\nhello\n')
    assert hopper("run", "--until-idle").returncode == 0
    rec = only(layout)
    assert rec.state is JobState.SUCCEEDED, rec.detail
    log = (layout.run_dir(rec.id) / "job.log").read_text()
    assert f"id={rec.id} name=tpl home=$HOME" in log
