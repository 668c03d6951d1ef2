"""The supervisor's sample walks its own tree (/proc/PID/task/TID/children), not all of /proc.

The walk is proc/proctree.py; the sample that uses it, proc/meter.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from conftest import wait_for
from hopper.proc import proctree, supervise
from hopper.proc.protocol import LaunchSpec


@pytest.fixture
def family() -> Iterator[subprocess.Popen[bytes]]:
    """A shell with two sleeping children: three processes below the test."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    wait_for(lambda: len(psutil.Process(proc.pid).children()) == 2, what="two sleeps")
    yield proc
    for child in psutil.Process(proc.pid).children():
        child.kill()
    proc.wait()


def _supervisor(tmp_path: Path) -> supervise.Supervisor:
    spec = LaunchSpec(argv=["true"], cwd=str(tmp_path), env={}, log=str(tmp_path / "job.log"))
    return supervise.Supervisor(str(tmp_path), spec)


def test_the_tree_walk_finds_exactly_what_the_full_scan_finds(
    family: subprocess.Popen[bytes],
) -> None:
    walked = proctree.tree()
    assert walked is not None
    scanned = proctree.scan()
    expected = proctree.below(scanned, zombies=True)
    assert set(walked) == set(expected)
    mine = {family.pid, *(c.pid for c in psutil.Process(family.pid).children())}
    assert mine <= set(walked)
    assert os.getpid() not in walked  # below us, not us


def test_without_the_children_file_the_sample_scans_all_of_proc(
    family: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup = _supervisor(tmp_path)
    sup.meter.sample()
    walked = json.loads((tmp_path / "resources.json").read_text())
    real_read = proctree._read

    def no_children(path: str, whole: bool = False) -> bytes:
        if path.endswith("/children"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_read(path, whole)

    monkeypatch.setattr(proctree, "_read", no_children)
    assert proctree.tree() is None
    sup.meter.sample()
    scanned = json.loads((tmp_path / "resources.json").read_text())
    assert scanned["processes"] == walked["processes"] >= 3
    assert scanned["rss_bytes"] > 0 and walked["rss_bytes"] > 0
