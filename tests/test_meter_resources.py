"""resources.json from the supervisor's meter: rewritten when the figures change, only
its mtime moved when they do not (proc/meter.py, proc/rundir.py ``RunDir.touch``).

1,000 jobs that sleep made the supervisors create and rename 1,000 files a second
with the same content, and the watcher's ABORT watch read 2,000 inotify events a
second for them (docs/performance.md, issue 16).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import wait_for
from hopper.proc.meter import RESOURCES_FILE, REWRITE_EVERY, Meter
from hopper.proc.rundir import RunDir


def _meter(run_dir: Path) -> Meter:
    return Meter(RunDir(str(run_dir)), None, None, None, note=lambda name, **fields: None)


def _age(path: Path) -> None:
    """Move the file's times an hour back, so a refresh shows."""
    old = path.stat().st_mtime - 3600
    os.utime(path, (old, old))


def test_unchanged_figures_keep_the_file_and_refresh_its_mtime(tmp_path: Path) -> None:
    """The same figures again: the same inode (no new file, no rename), the mtime now."""
    meter = _meter(tmp_path)
    path = tmp_path / RESOURCES_FILE
    meter.write_resources(live=True)
    first = path.stat()
    wait_for(
        lambda: time.time_ns() > first.st_mtime_ns + 50_000_000,
        what="the clock to pass the file's mtime by more than the timestamp granularity",
    )
    meter.write_resources(live=True)
    now = path.stat()
    assert now.st_ino == first.st_ino, "rewritten although nothing changed"
    assert now.st_mtime_ns > first.st_mtime_ns, "the sign of life (mtime) was not refreshed"
    assert path.read_bytes() == json.dumps(meter.resources(live=True)).encode() + b"\n"
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_unchanged_figures_are_rewritten_every_so_often(tmp_path: Path) -> None:
    """An edit the stamp cannot see lasts at most REWRITE_EVERY samples."""
    meter = _meter(tmp_path)
    path = tmp_path / RESOURCES_FILE
    meter.write_resources(live=True)
    inodes = {path.stat().st_ino}
    for _ in range(REWRITE_EVERY):
        meter.write_resources(live=True)
        inodes.add(path.stat().st_ino)
    assert len(inodes) == 1
    held = os.open(path, os.O_RDONLY)  # keeps the old inode from being reused
    try:
        meter.write_resources(live=True)
        assert path.stat().st_ino not in inodes
    finally:
        os.close(held)


def test_changed_figures_are_written(tmp_path: Path) -> None:
    meter = _meter(tmp_path)
    path = tmp_path / RESOURCES_FILE
    meter.write_resources(live=True)
    meter.cpu = 1.5
    meter.write_resources(live=True)
    assert json.loads(path.read_bytes())["cpu_seconds"] == 1.5
    meter.write_resources(live=False)  # the final figures: no rss_bytes, processes
    assert "processes" not in json.loads(path.read_bytes())


@pytest.mark.parametrize("how", ["replaced", "edited", "removed", "link"])
def test_a_file_the_job_touched_is_written_again(tmp_path: Path, how: str) -> None:
    """A job can write into its run directory: whatever it left at resources.json
    (another file, an edit in place of the same size, nothing, a symlink) is not kept
    fresh as if it were the supervisor's; the figures are written again."""
    meter = _meter(tmp_path)
    path = tmp_path / RESOURCES_FILE
    meter.write_resources(live=True)
    ours = path.read_bytes()
    forged = ours.replace(b'"cpu_seconds": 0.0', b'"cpu_seconds": 9.9')
    assert len(forged) == len(ours)
    if how == "replaced":
        tmp = tmp_path / "forged"
        tmp.write_bytes(forged)
        os.replace(tmp, path)
    elif how == "edited":
        with open(path, "r+b") as fh:
            fh.write(forged)
        _age(path)  # even with its mtime put back an hour: the mtime is not ours
    elif how == "removed":
        path.unlink()
    else:
        (tmp_path / "elsewhere").write_bytes(forged)
        path.unlink()
        path.symlink_to(tmp_path / "elsewhere")
    meter.write_resources(live=True)
    assert not path.is_symlink()
    assert path.read_bytes() == ours
    assert (tmp_path / "elsewhere").read_bytes() == forged if how == "link" else True


def test_a_failed_touch_falls_back_to_a_write(tmp_path: Path) -> None:
    """No stamp (the last write failed, or none yet): the file is written."""
    files = RunDir(str(tmp_path))
    assert files.touch(RESOURCES_FILE, None) is None
    assert files.touch(RESOURCES_FILE, (1, 2, 3)) is None  # nothing there
    stamp = files.replace(RESOURCES_FILE, b"{}\n", durable=False)
    assert files.touch(RESOURCES_FILE, stamp) is not None
    assert files.touch(RESOURCES_FILE, (stamp[0], stamp[1] + 1, stamp[2])) is None
