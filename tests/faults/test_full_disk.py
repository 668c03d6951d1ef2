"""The root on a small real filesystem (tmpfs) that fills up while a job runs.

job.json stays valid, the watcher stays up and says why it is stuck, the
supervisor keeps its exit status until it can write it, and everything
carries on when space returns.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Watchers, drop, wait_for
from hopper.core.states import JobState
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


@pytest.fixture
def small_root(tmp_path: Path) -> Iterator[Layout]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        layout = Layout(mount / "root")
        layout.ensure()
        yield layout
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_disk_full_while_running(small_root: Layout, config_file: Path, tmp_path: Path) -> None:
    layout = small_root
    gate = tmp_path / "gate"
    log = tmp_path / "watcher.log"
    drop(layout, "first", f'+++\nagent = "bash"\n+++\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n')
    w = Watchers(layout, config_file)
    proc = w.start(stderr=log)
    try:
        wait_for(
            lambda: any(
                (d / "job.json").exists() and read_record(d).state is JobState.RUNNING
                for d in layout.runs.iterdir()
            ),
            what="job running",
        )
        (run_dir,) = list(layout.runs.iterdir())
        filler = layout.root / "filler"
        fill(filler)
        gate.touch()
        wait_for(lambda: "No space left on device" in log.read_text(), what="a clear report")
        for _ in range(50):  # readers never see a torn record while writes fail
            json.loads((run_dir / "job.json").read_text())
        assert proc.poll() is None, "the watcher stays up"
        assert read_record(run_dir).state is JobState.RUNNING
        filler.unlink()
        wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="carries on")
        drop(layout, "second", '+++\nagent = "bash"\n+++\necho after\n')
        wait_for(
            lambda: (
                sum(
                    1
                    for d in layout.runs.iterdir()
                    if (d / "job.json").exists() and read_record(d).state is JobState.SUCCEEDED
                )
                == 2
            ),
            what="the next job runs",
        )
    finally:
        w.stop_all()
