"""``hopper doctor``: check a root and its environment, and say how to fix each problem.

Each check is a function that returns :class:`Check` values (ok, warn or fail,
a one-line finding, and a fix for anything not ok). What a check reads from
the machine (``stat``, free space, ``/proc``, the process table, an agent's
``--version``) is a parameter, so each problem can be shown in a test.

Exit codes: 0 nothing failed (warnings allowed), 1 at least one check failed,
2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import stat as stat_mod
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from hopper.agents.driven import find_binary
from hopper.cli.common import EXIT_FAILED, EXIT_OK, add_root_args
from hopper.cli.config import check_config
from hopper.config import Config, config_path
from hopper.core.prompt import BadPrompt
from hopper.core.states import JobState
from hopper.errors import ConfigError
from hopper.store.inbox import scan
from hopper.store.index import JobIndex
from hopper.store.layout import Layout, resolve_root

Status = Literal["ok", "warn", "fail"]

#: Free space on the root's filesystem: below these, warn / fail.
WARN_FREE_BYTES = 1 << 30
FAIL_FREE_BYTES = 100 << 20
WARN_FREE_INODES = 10_000
FAIL_FREE_INODES = 1_000
#: A running job's heartbeat older than this many heartbeat intervals (at
#: least MIN_STALE_SECONDS) means no watcher is looking after it.
STALE_HEARTBEATS = 3
MIN_STALE_SECONDS = 30.0
AGENT_CLIS = ("claude", "codex")
INOTIFY_DIR = Path("/proc/sys/fs/inotify")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    fix: str = ""


def ok(name: str, message: str) -> Check:
    return Check(name, "ok", message)


# -- the root ----------------------------------------------------------------------


def check_root(layout: Layout) -> list[Check]:
    """The root exists and has its three folders (hopper run creates them)."""
    if not layout.root.is_dir():
        return [
            Check(
                "root",
                "fail",
                f"{layout.root} does not exist (or is not a directory)",
                "start the watcher once (hopper run / systemctl start hopper) to create it, "
                "or point --root, $HOPPER_ROOT or the config's root at the right place",
            )
        ]
    missing = [p.name for p in (layout.inbox, layout.runs, layout.processed) if not p.is_dir()]
    if missing:
        return [
            Check(
                "root",
                "warn",
                f"{layout.root} lacks {', '.join(missing)}/",
                "the watcher creates them at start; start it, or mkdir them",
            )
        ]
    return [ok("root", f"{layout.root} with inbox/, runs/ and processed/")]


def check_one_filesystem(layout: Layout, stat: Callable[[Path], os.stat_result] = os.stat) -> Check:
    """Claiming and finalizing are rename(2): inbox, runs and processed share a filesystem."""
    devices: dict[str, int] = {}
    for path in (layout.root, layout.inbox, layout.runs, layout.processed):
        try:
            devices[path.name if path != layout.root else "root"] = stat(path).st_dev
        except FileNotFoundError:
            continue
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{name} on device {dev:#x}" for name, dev in devices.items())
        return Check(
            "filesystem",
            "fail",
            f"the root spans filesystems: {where}; claims would not be atomic renames",
            "keep inbox/, runs/ and processed/ on one filesystem: no separate mounts or "
            "symlinks to other disks inside the root (move the whole root instead)",
        )
    return ok("filesystem", "inbox/, runs/ and processed/ are on one filesystem")


def probe_write(directory: Path) -> None:
    """Create, fsync and remove a dot-file in ``directory`` (the watcher ignores dot-files)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".hopper-doctor-", suffix=".tmp")
    try:
        os.write(fd, b"ok\n")
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def check_writable(layout: Layout, probe: Callable[[Path], None] = probe_write) -> Check:
    failed: list[str] = []
    for path in (layout.inbox, layout.runs, layout.processed):
        if not path.is_dir():
            continue
        try:
            probe(path)
        except OSError as exc:
            failed.append(f"{path}: {exc.strerror or exc}")
    if failed:
        user = _user_name()
        return Check(
            "writable",
            "fail",
            "cannot write: " + "; ".join(failed),
            f"run as the service user (sudo -u hopper hopper doctor), join its group "
            f"(usermod -aG hopper {user}), or fix the owner (chown -R hopper:hopper ROOT); "
            "a full disk shows here too",
        )
    return ok("writable", f"{_user_name()} can write inbox/, runs/ and processed/")


def check_degraded(
    writable: Check,
    processes: Callable[[], list[tuple[int, list[str]]]] | None = None,
) -> Check:
    """A watcher up on a root that takes no writes runs degraded: it claims nothing.

    The watcher cannot write that down anywhere under the root, so this is
    judged from here: the write probe of :func:`check_writable` failed and a
    ``hopper run`` process is up (its sd_notify STATUS and log say the same).
    """
    if writable.status != "fail":
        return ok("degraded", "no: the root takes writes")
    procs = (processes or watcher_processes)()
    if not procs:
        return ok("degraded", "no watcher is up (see the watcher check)")
    pids = ", ".join(str(pid) for pid, _ in procs[:5])
    return Check(
        "degraded",
        "fail",
        f"DEGRADED: the watcher (pid {pids}) is up but the root takes no writes "
        f"({writable.message}); it claims and starts nothing until it can write again; "
        "running jobs go on",
        "free space (hopper prune, delete old runs/ and processed/) or remount the root "
        "read-write; the watcher leaves degraded mode by itself within a second, no restart",
    )


def check_free_space(
    root: Path,
    usage: Callable[[Path], Any] = shutil.disk_usage,
    statvfs: Callable[[Path], Any] = os.statvfs,
) -> Check:
    total, _, free = usage(root)[:3]
    vfs = statvfs(root)
    inodes = vfs.f_favail if vfs.f_files else None  # some filesystems have no inode count
    text = f"{_size(free)} free of {_size(total)}" + (
        f", {inodes:,} inodes free" if inodes is not None else ""
    )
    fix = (
        "free space: hopper prune / delete old runs/ and processed/ entries, or move the "
        "root to a bigger disk (docs/operations.md: disk full)"
    )
    if free < FAIL_FREE_BYTES or (inodes is not None and inodes < FAIL_FREE_INODES):
        return Check("disk", "fail", f"almost full: {text}", fix)
    if free < WARN_FREE_BYTES or (inodes is not None and inodes < WARN_FREE_INODES):
        return Check("disk", "warn", f"low: {text}", fix)
    return ok("disk", text)


def check_inotify(layout: Layout, proc: Path = INOTIFY_DIR) -> Check:
    """inotify needs one watch per inbox directory (the rescan catches up without)."""
    try:
        limit = int((proc / "max_user_watches").read_text().strip())
    except (OSError, ValueError):
        return Check(
            "inotify",
            "warn",
            f"cannot read {proc / 'max_user_watches'}: no inotify; new prompts are found "
            "by the periodic rescan only",
            "lower rescan_interval in the config if pick-up is too slow",
        )
    dirs = _count_dirs(layout.inbox)
    fix = (
        "raise the limit: echo fs.inotify.max_user_watches=524288 | "
        "sudo tee /etc/sysctl.d/60-hopper.conf && sudo sysctl --system"
    )
    if dirs >= limit:
        return Check(
            "inotify",
            "fail",
            f"the inbox has {dirs:,} directories, max_user_watches is {limit:,}: "
            "new prompts are seen only at the periodic rescan",
            fix,
        )
    if dirs * 2 >= limit:
        return Check(
            "inotify",
            "warn",
            f"the inbox has {dirs:,} directories, over half of max_user_watches ({limit:,}), "
            "which every process of this user shares",
            fix,
        )
    return ok("inotify", f"{dirs:,} inbox directories to watch, max_user_watches {limit:,}")


def _count_dirs(inbox: Path) -> int:
    if not inbox.is_dir():
        return 0
    return sum(1 for _ in os.walk(inbox))


# -- config and agents -----------------------------------------------------------


def check_configuration(cli: str | None, env: Mapping[str, str]) -> tuple[Check, Config | None]:
    try:
        config, warnings = check_config(cli, env)
    except ConfigError as exc:
        return (
            Check(
                "config",
                "fail",
                exc.render().replace("\n  hint: ", "; "),
                "fix the key named; hopper config check shows the result",
            ),
            None,
        )
    path = config_path(cli, env)
    if warnings:
        return Check("config", "warn", warnings[0], "chmod 600 the file"), config
    where = f"{path} is valid" if path else "no config file: the built-in defaults apply"
    return ok("config", where), config


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
            checks.append(ok(f"agent {name}", f"{binary}: {version(binary)}"))
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


# -- the watcher -------------------------------------------------------------------


def watcher_processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of processes that look like ``hopper run`` on this host."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info.get("cmdline") or []
        if proc.info["pid"] != os.getpid() and _is_watcher(argv):
            found.append((proc.info["pid"], list(argv)))
    return found


def _is_watcher(argv: list[str]) -> bool:
    for i, arg in enumerate(argv[:-1]):
        if os.path.basename(arg) == "hopper" and argv[i + 1] == "run":
            return True
    return False


def check_watcher(
    layout: Layout,
    config: Config,
    now: float | None = None,
    processes: Callable[[], list[tuple[int, list[str]]]] = watcher_processes,
) -> Check:
    """Alive: a running job's heartbeat is fresh, or a ``hopper run`` process exists."""
    now = time.time() if now is None else now
    stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
    with JobIndex.open(layout) as index:
        index.refresh()
        jobs = index.jobs()
    running = [j for j in jobs if j.state is JobState.RUNNING]
    queued = [j for j in jobs if j.state is JobState.QUEUED]
    fix = (
        "start it: systemctl start hopper (or systemctl --user start hopper, or hopper run); "
        "journalctl -u hopper says why it stopped. A new watcher adopts running jobs"
    )
    if running:
        beats = [(now - j.heartbeat_at, j) for j in running if j.heartbeat_at is not None]
        fresh = [(age, j) for age, j in beats if age <= stale_after]
        if fresh:
            age, job = min(fresh, key=lambda x: x[0])
            return ok(
                "watcher",
                f"alive: {len(running)} running, job {job.id} heartbeat {age:.0f}s ago",
            )
        oldest = min((age for age, _ in beats), default=None)
        when = f"last heartbeat {oldest:.0f}s ago" if oldest is not None else "no heartbeat"
        return Check(
            "watcher",
            "fail",
            f"{len(running)} jobs are running but none has a fresh heartbeat ({when}, "
            f"expected every {config.heartbeat_interval:g}s): no watcher is looking after them",
            fix,
        )
    procs = processes()
    if procs:
        pids = ", ".join(str(pid) for pid, _ in procs[:5])
        return ok("watcher", f"a hopper run process is up (pid {pids}); no job running to time")
    waiting = sum(1 for _ in scan(layout.inbox)) if layout.inbox.is_dir() else 0
    if waiting or queued:
        return Check(
            "watcher",
            "fail",
            f"no watcher on this host, and {waiting} prompts wait in the inbox, "
            f"{len(queued)} jobs are queued",
            fix,
        )
    return Check(
        "watcher",
        "warn",
        "no hopper run process on this host (fine if another host serves this root)",
        fix,
    )


# -- systemd -----------------------------------------------------------------------


def check_watcher_degraded(
    layout: Layout,
    config: Config,
    processes: Callable[[], list[tuple[int, list[str]]]] = watcher_processes,
) -> Check:
    """:func:`check_watcher`, or on a root that takes no writes (the job index cannot
    be opened there) at least whether a watcher process is up."""
    try:
        return check_watcher(layout, config, processes=processes)
    except (OSError, sqlite3.Error) as exc:
        procs = processes()
        found = (
            f"a hopper run process is up (pid {', '.join(str(p) for p, _ in procs[:5])})"
            if procs
            else "no hopper run process is up"
        )
        return Check(
            "watcher",
            "warn" if procs else "fail",
            f"{found}; job heartbeats unreadable: the job index cannot be opened ({exc})",
            "free space or make the root writable (see the writable and degraded checks)",
        )


def check_notify_socket(env: Mapping[str, str]) -> Check:
    value = env.get("NOTIFY_SOCKET", "")
    if not value:
        if env.get("WATCHDOG_USEC"):
            return Check(
                "notify",
                "warn",
                "WATCHDOG_USEC is set without NOTIFY_SOCKET: a leftover from a service's env",
                "unset WATCHDOG_USEC WATCHDOG_PID in this shell",
            )
        return ok("notify", "NOTIFY_SOCKET not set (normal outside systemd)")
    if value.startswith("@"):
        return ok("notify", f"NOTIFY_SOCKET={value} (abstract socket)")
    if not value.startswith("/"):
        return Check(
            "notify",
            "warn",
            f"NOTIFY_SOCKET={value!r} is not a form hopper supports (a path or @name)",
            "hopper run will not notify systemd; use Type=notify with a local socket",
        )
    try:
        is_socket = stat_mod.S_ISSOCK(os.stat(value).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        return Check(
            "notify",
            "warn",
            f"NOTIFY_SOCKET={value} is not a socket: a hopper run started from here "
            "would notify nobody",
            "unset NOTIFY_SOCKET in this shell (it leaked from a service's environment)",
        )
    return ok("notify", f"NOTIFY_SOCKET={value} is a socket")


# -- the command -------------------------------------------------------------------


def run_checks(args: argparse.Namespace, env: Mapping[str, str]) -> list[Check]:
    config_check, config = check_configuration(args.config, env)
    effective = config or Config()
    layout = Layout(resolve_root(args.root, env, effective.root))
    checks = check_root(layout)
    if layout.root.is_dir():
        writable = check_writable(layout)
        checks += [
            check_one_filesystem(layout),
            writable,
            check_degraded(writable),
            check_free_space(layout.root),
            check_inotify(layout),
        ]
    checks.append(config_check)
    checks += check_agents(effective)
    if layout.root.is_dir():
        checks.append(check_watcher_degraded(layout, effective))
    checks.append(check_notify_socket(env))
    return checks


def render(checks: Iterable[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.status:<5} {c.name:<12} {c.message}")
        if c.fix and c.status != "ok":
            lines.append(f"{'':<5} {'':<12} fix: {c.fix}")
    return "\n".join(lines) + "\n"


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the root, the config and the environment")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object per check, as a list")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    checks = run_checks(args, os.environ)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        print(render(checks), end="")
        counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
        print(f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    failed = any(c.status == "fail" for c in checks)
    if failed and not args.json:
        print("hopper doctor: some checks failed (see fix: above)", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _user_name() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())
