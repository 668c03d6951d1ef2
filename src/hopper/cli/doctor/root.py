"""Checks of the root: its folders, one filesystem, writable, free space, inotify."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hopper.cli.doctor.check import FIX_FREE_SPACE, Check, ok
from hopper.store.layout import Layout

#: Free space on the root's filesystem: below these, warn / fail.
WARN_FREE_BYTES = 1 << 30
FAIL_FREE_BYTES = 100 << 20
WARN_FREE_INODES = 10_000
FAIL_FREE_INODES = 1_000
INOTIFY_DIR = Path("/proc/sys/fs/inotify")


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
    fix = f"{FIX_FREE_SPACE}; or move the root to a bigger disk"
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
