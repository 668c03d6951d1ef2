"""``hopper doctor``: each problem it claims to find, found (one test per check), and the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections import namedtuple
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import Watchers, wait_for
from hopper.agents import npm
from hopper.cli.doctor.agents import check_agents
from hopper.cli.doctor.check import Check
from hopper.cli.doctor.config import check_configuration
from hopper.cli.doctor.interactive import check_claude_interactive
from hopper.cli.doctor.root import (
    INOTIFY_DIR,
    check_free_space,
    check_inotify,
    check_one_filesystem,
    check_root,
    check_writable,
)
from hopper.cli.doctor.systemd import check_notify_socket
from hopper.cli.doctor.watcher import _is_watcher, check_watcher, watcher_processes
from hopper.cli.main import main
from hopper.config import Config
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.watchers import write_beat

Usage = namedtuple("Usage", "total used free")
VFS = namedtuple("VFS", "f_files f_favail")
GiB = 1 << 30


def statuses(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


# --- the root -------------------------------------------------------------------


def test_root_missing_fails(tmp_path: Path) -> None:
    (check,) = check_root(Layout(tmp_path / "nope"))
    assert check.status == "fail"
    assert "does not exist" in check.message and check.fix


def test_root_without_its_folders_warns(tmp_path: Path) -> None:
    (tmp_path / "inbox").mkdir()
    (check,) = check_root(Layout(tmp_path))
    assert check.status == "warn"
    assert "runs, processed" in check.message


def test_root_ok(layout: Layout) -> None:
    assert [c.status for c in check_root(layout)] == ["ok"]


def test_one_filesystem(layout: Layout) -> None:
    assert check_one_filesystem(layout).status == "ok"

    def split_stat(path: Path) -> os.stat_result:
        real = os.stat(path)
        if path == layout.processed:
            fields = list(real)
            fields[2] = real.st_dev + 1  # st_dev
            return os.stat_result(fields)
        return real

    check = check_one_filesystem(layout, stat=split_stat)
    assert check.status == "fail"
    assert "processed on device" in check.message
    assert "one filesystem" in check.fix


def test_one_filesystem_real_mount(layout: Layout) -> None:
    """A real second filesystem: processed/ as a symlink to /dev/shm (a tmpfs)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(layout.root).st_dev:
        pytest.skip("no /dev/shm on another filesystem here")
    target = shm / f"hopper-doctor-{os.getpid()}"
    target.mkdir()
    try:
        layout.processed.rmdir()
        layout.processed.symlink_to(target)
        assert check_one_filesystem(layout).status == "fail"
    finally:
        target.rmdir()


def test_writable(layout: Layout) -> None:
    check = check_writable(layout)
    assert check.status == "ok"
    assert [p.name for p in layout.inbox.iterdir()] == [], "the probe cleans up"

    def denied(path: Path) -> None:
        if path == layout.runs:
            raise PermissionError(13, "Permission denied")

    check = check_writable(layout, probe=denied)
    assert check.status == "fail"
    assert f"{layout.runs}: Permission denied" in check.message
    assert "usermod -aG hopper" in check.fix


@pytest.mark.parametrize(
    ("free", "inodes", "status"),
    [
        (50 * GiB, 1_000_000, "ok"),
        (GiB // 2, 1_000_000, "warn"),
        (50 << 20, 1_000_000, "fail"),
        (50 * GiB, 5_000, "warn"),
        (50 * GiB, 10, "fail"),
    ],
)
def test_free_space(tmp_path: Path, free: int, inodes: int, status: str) -> None:
    check = check_free_space(
        tmp_path,
        usage=lambda p: Usage(100 * GiB, 100 * GiB - free, free),
        statvfs=lambda p: VFS(2_000_000, inodes),
    )
    assert check.status == status, check.message
    if status != "ok":
        assert "docs/operations.md: A full disk" in check.fix  # the section's real title


def test_free_space_real(tmp_path: Path) -> None:
    check = check_free_space(tmp_path)
    assert check.status in ("ok", "warn", "fail")
    assert " free of " in check.message


def test_inotify_limits(layout: Layout, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    for i in range(5):
        (layout.inbox / f"team{i}").mkdir()
    (proc / "max_user_watches").write_text("1000\n")
    ok = check_inotify(layout, proc)
    assert ok.status == "ok" and "6 inbox directories" in ok.message
    (proc / "max_user_watches").write_text("10\n")
    assert check_inotify(layout, proc).status == "warn"
    (proc / "max_user_watches").write_text("6\n")
    check = check_inotify(layout, proc)
    assert check.status == "fail"
    assert "max_user_watches" in check.fix
    (proc / "max_user_watches").unlink()
    assert check_inotify(layout, proc).status == "warn"


def test_inotify_real_proc(layout: Layout) -> None:
    if not (INOTIFY_DIR / "max_user_watches").exists():
        pytest.skip("no inotify here")
    assert check_inotify(layout).status == "ok"


# --- config and agents ----------------------------------------------------------


def test_config_invalid_fails(tmp_path: Path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("max_paralel = 3\n")
    check, config = check_configuration(str(bad), {})
    assert (check.status, config) == ("fail", None)
    assert "unknown key 'max_paralel'" in check.message and str(bad) in check.message
    good = tmp_path / "good.toml"
    good.write_text('default_agent = "bash"\n')
    check, config = check_configuration(str(good), {})
    assert check.status == "ok" and config is not None


def fake_cli(tmp_path: Path, name: str, script: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_agents_found_missing_and_broken(tmp_path: Path) -> None:
    claude = fake_cli(tmp_path, "claude", 'echo "2.0.1 (Claude Code)"')
    codex = fake_cli(tmp_path, "codex", "echo 'node: not found' >&2; exit 127")
    bins = {"claude": claude, "codex": codex}

    def find(name: str, configured: str | None) -> str:
        return bins[name]

    home = {"HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-doctor-0123456789abcdefghij"}
    checks = check_agents(Config(default_agent="claude"), find=find, env=home)
    assert statuses(checks) == {
        "agent bash": "ok",
        "agent claude": "ok",
        "agent claude interactive": "ok",
        "agent codex": "warn",
    }
    assert "2.0.1 (Claude Code)" in checks[1].message
    assert "node: not found" in checks[3].message

    def missing(name: str, configured: str | None) -> str:
        raise BadPrompt(f"the {name} CLI is not installed")

    # Not installed is a warning even for the default agent: bash jobs still run, and
    # the fix is the one command that installs the CLIs for an installed hopper.
    checks = check_agents(Config(default_agent="codex"), find=missing)
    assert statuses(checks) == {"agent bash": "ok", "agent claude": "warn", "agent codex": "warn"}
    assert "default agent" in checks[2].message
    assert checks[2].fix.startswith("hopper agents install")
    checks = check_agents(Config(default_agent="bash"), find=missing)
    assert "fail" not in set(statuses(checks).values())


def test_interactive_claude_says_what_it_sets_and_what_it_cannot(tmp_path: Path) -> None:
    key = "sk-ant-doctor-0123456789abcdefghij"
    env = {"HOME": str(tmp_path), "ANTHROPIC_API_KEY": key}
    check = check_claude_interactive(env, "2.1.330 (Claude Code)", "interactive")
    assert check.status == "ok" and "2.1.330 (Claude Code)" in check.message
    assert "hasCompletedOnboarding" in check.message and "customApiKeyResponses" in check.message
    assert not (tmp_path / ".claude.json").exists()  # doctor only reads
    # nothing to authenticate with: a warning for mode = "interactive", a note otherwise
    bare = {"HOME": str(tmp_path)}
    check = check_claude_interactive(bare, "2.1.330", "interactive")
    assert check.status == "warn" and "login screen" in check.message
    assert "ANTHROPIC_API_KEY" in check.fix
    assert check_claude_interactive(bare, "2.1.330", "headless").status == "ok"
    # a logged-in account is enough; a complete config needs nothing set
    config = {"hasCompletedOnboarding": True, "oauthAccount": {"emailAddress": "me@example.org"}}
    (tmp_path / ".claude.json").write_text(json.dumps(config))
    check = check_claude_interactive(bare, "2.1.330", "interactive")
    assert check.status == "ok" and "logged-in account" in check.message
    assert "sets at the first start" not in check.message
    # a key the user rejected stays rejected: said, with the way out
    config["customApiKeyResponses"] = {"approved": [], "rejected": [key[-20:]]}
    (tmp_path / ".claude.json").write_text(json.dumps(config))
    check = check_claude_interactive(env, "2.1.330", "interactive")
    assert check.status == "warn" and "rejected" in check.message
    assert str(tmp_path / ".claude.json") in check.fix
    # a broken config is named, never rewritten
    (tmp_path / ".claude.json").write_text("{oops")
    check = check_claude_interactive(env, "2.1.330", "interactive")
    assert check.status == "warn" and str(tmp_path / ".claude.json") in check.message
    assert (tmp_path / ".claude.json").read_text() == "{oops"


def test_agents_without_bash_fails() -> None:
    checks = check_agents(
        Config(default_agent="bash"),
        find=lambda n, c: "x",
        version=lambda b: "1",
        which=lambda n: None,
    )
    assert statuses(checks)["agent bash"] == "fail"
    assert "bash jobs cannot run" in checks[0].message


def test_custom_agent_missing_executable() -> None:
    config = Config.model_validate(
        {"agents": {"mine": {"argv": ["/nonexistent/agent", "{prompt_file}"]}}}
    )
    checks = check_agents(config, find=lambda n, c: sys.executable, version=lambda b: "1")
    assert statuses(checks)["agent mine"] == "warn"


def test_agents_real_lookup_runs() -> None:
    """The real find/--version path (the repo's pinned CLIs, if installed)."""
    checks = check_agents(Config(default_agent="bash"))
    names = {c.name for c in checks}
    assert names - {"agent claude interactive"} == {"agent bash", "agent claude", "agent codex"}
    # the interactive check comes with a claude CLI that answered --version
    claude_ok = any(c.name == "agent claude" and c.status == "ok" for c in checks)
    assert ("agent claude interactive" in names) == claude_ok


# --- the watcher ----------------------------------------------------------------


def running_job(layout: Layout, job_id: str, heartbeat: datetime | None) -> None:
    run_dir = layout.run_dir(job_id)
    run_dir.mkdir(parents=True)
    now = datetime.now(UTC)
    write_record(
        run_dir,
        JobRecord(
            id=job_id,
            name=job_id,
            state=JobState.RUNNING,
            agent="bash",
            host="h",
            inbox_path=f"inbox/{job_id}.prompt.md",
            created_at=now,
            started_at=now,
            heartbeat_at=heartbeat,
        ),
    )


def test_watcher_alive_by_fresh_heartbeat(layout: Layout) -> None:
    running_job(layout, "20260101-000000-a-0001", datetime.now(UTC) - timedelta(seconds=3))
    write_beat(layout, host="h", pid=7, owner="h:7:1.0", started=0.0, running=1, queued=0)
    check = check_watcher(layout, Config(), processes=lambda: [])
    assert check.status == "ok"
    assert "serving this root: 1 watcher(s) beating, h pid 7" in check.message, check.message
    assert "1 running" in check.message


def test_running_jobs_with_fresh_heartbeats_but_no_watcher_file_fail(layout: Layout) -> None:
    running_job(layout, "20260101-000000-a-0001", datetime.now(UTC) - timedelta(seconds=3))
    check = check_watcher(layout, Config(), processes=lambda: [])
    assert check.status == "fail"
    assert "no watcher serves this root: no heartbeat file" in check.message


def test_watcher_down_by_stale_heartbeat(layout: Layout) -> None:
    running_job(layout, "20260101-000000-a-0001", datetime.now(UTC) - timedelta(minutes=10))
    check = check_watcher(layout, Config(), processes=lambda: [(1, ["hopper", "run"])])
    assert check.status == "fail"
    assert "last heartbeat 600s ago" in check.message
    assert "systemctl start hopper" in check.fix


def test_watcher_no_jobs(layout: Layout) -> None:
    """A `hopper run` on this host that writes no heartbeat here serves another root."""
    found = check_watcher(layout, Config(), processes=lambda: [(42, ["hopper", "run"])])
    assert found.status == "warn"
    assert "no watcher serves this root" in found.message
    assert "(pid 42) writes no heartbeat here: it serves another root" in found.message
    assert check_watcher(layout, Config(), processes=lambda: []).status == "warn"
    (layout.inbox / "waiting.prompt.md").write_text("echo hi\n")
    check = check_watcher(layout, Config(), processes=lambda: [])
    assert check.status == "fail"
    assert "1 prompts wait" in check.message


def test_watcher_process_detection() -> None:
    assert _is_watcher(["/opt/hopper/bin/python", "/opt/hopper/bin/hopper", "run"])
    assert not _is_watcher(["/usr/bin/hopper", "status"])
    assert not _is_watcher(["python", "-m", "hopper", "doctor"])


def test_watcher_found_for_real(watchers: Watchers) -> None:
    """A real `hopper run`, found in the process table (no job to time)."""
    pid = watchers.start().pid
    wait_for(
        lambda: any(p == pid for p, _ in watcher_processes()),
        what="the watcher in the process table",
    )


# --- systemd notify socket ------------------------------------------------------


def test_notify_socket(tmp_path: Path) -> None:
    assert check_notify_socket({}).status == "ok"
    assert check_notify_socket({"NOTIFY_SOCKET": "@hopper/x"}).status == "ok"
    assert check_notify_socket({"NOTIFY_SOCKET": "vsock:2:9"}).status == "warn"
    missing = check_notify_socket({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert missing.status == "warn" and "unset NOTIFY_SOCKET" in missing.fix
    assert check_notify_socket({"WATCHDOG_USEC": "1000"}).status == "warn"
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        assert check_notify_socket({"NOTIFY_SOCKET": str(path)}).status == "ok"


# --- the command ----------------------------------------------------------------


def doctor_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hopper", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_cli_healthy_root_exits_0(layout: Layout, config_file: Path) -> None:
    result = doctor_cli("--root", str(layout.root), "--config", str(config_file))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in ("root", "filesystem", "writable", "disk", "inotify", "config", "watcher"):
        assert any(line.split()[1:2] == [name] for line in lines), (name, result.stdout)
    assert lines[-1].startswith("doctor: ")


def test_cli_reports_failures_with_fixes_and_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text('on_stop = "never"\n')
    result = doctor_cli("--root", str(tmp_path / "missing"), "--config", str(bad))
    assert result.returncode == 1
    assert "fail  root" in result.stdout
    assert "fail  config" in result.stdout
    assert "fix: " in result.stdout


def test_cli_json(layout: Layout, config_file: Path) -> None:
    result = doctor_cli("--root", str(layout.root), "--config", str(config_file), "--json")
    assert result.returncode == 0, result.stderr
    checks = json.loads(result.stdout)
    assert {"name", "status", "message", "fix"} <= set(checks[0])
    assert {c["status"] for c in checks} <= {"ok", "warn"}


def test_fresh_install_without_agent_clis_exits_0(
    layout: Layout,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No claude or codex anywhere (PATH holds only bash; nothing installed by hopper, no
    checkout's tools/agents) and the default config (default agent claude): exit 0, and
    the missing CLIs are named with the command that installs them."""
    path = tmp_path / "path"
    path.mkdir()
    (path / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(npm, "REPO_TOOLS", tmp_path / "no-tools")
    monkeypatch.setattr(npm, "system_dir", lambda: tmp_path / "no-system")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    code = main(["doctor", "--root", str(layout.root), "--config", str(empty)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"^ok\s+agent bash", out, re.M)
    for name in ("claude", "codex"):
        assert re.search(rf"^warn\s+agent {name}\s+the {name} CLI is not installed", out, re.M)
    assert "(it is the default agent: so do prompts naming none)" in out
    assert "fix: hopper agents install" in out
