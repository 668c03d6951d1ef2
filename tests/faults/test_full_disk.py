"""The root on a small real filesystem (tmpfs) that fills up while a job runs.

job.json stays valid, the watcher stays up and says why it is stuck, the
supervisor keeps its exit status until it can write it, and everything
carries on when space returns.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import Watchers, drop, hopper_cmd, wait_for
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


# -- start-up on a full or read-only root: degraded, then recovered ---------------------


class NotifyLog:
    """The systemd end of NOTIFY_SOCKET: every datagram received, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[str] = []

    def drain(self) -> list[str]:
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.messages

    def saw(self, text: str) -> bool:
        return any(text in m for m in self.drain())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifyLog]:
    log = NotifyLog(tmp_path / "notify.sock")
    yield log
    log.close()


def doctor(layout: Layout, config_file: Path) -> str:
    out = subprocess.run(
        hopper_cmd("doctor", "--root", str(layout.root), "--config", str(config_file)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout + out.stderr


def n_succeeded(layout: Layout) -> int:
    return sum(
        1
        for d in layout.runs.iterdir()
        if (d / "job.json").is_file() and read_record(d).state is JobState.SUCCEEDED
    )


def assert_degraded_then_recovers(
    layout: Layout,
    config_file: Path,
    proc: subprocess.Popen[str],
    log: Path,
    notify: NotifyLog,
    heal: Callable[[], None],
) -> None:
    wait_for(lambda: "DEGRADED" in log.read_text() or proc.poll() is not None, what="degraded")
    assert proc.poll() is None, f"the watcher died:\n{log.read_text()}"
    wait_for(lambda: notify.saw("STATUS=DEGRADED"), what="a DEGRADED sd_notify STATUS")
    report = doctor(layout, config_file)
    assert "DEGRADED" in report, report
    assert n_succeeded(layout) == 0, "nothing is claimed while the root takes no writes"
    heal()
    wait_for(lambda: n_succeeded(layout) == 1, what="the waiting prompt runs after recovery")
    assert "recovered from degraded mode" in log.read_text()
    assert log.read_text().count("DEGRADED:") == 1, log.read_text()  # said once, not per turn
    assert proc.poll() is None
    assert "DEGRADED" not in doctor(layout, config_file)


def test_start_up_on_a_full_disk_comes_up_degraded(
    small_root: Layout, config_file: Path, tmp_path: Path, notify: NotifyLog
) -> None:
    layout = small_root
    log = tmp_path / "watcher.log"
    drop(layout, "waiting", '+++\nagent = "bash"\n+++\necho waited\n')
    filler = layout.root / "filler"
    fill(filler)
    w = Watchers(layout, config_file)
    proc = w.start(stderr=log, env={"NOTIFY_SOCKET": str(notify.path)})
    try:
        assert_degraded_then_recovers(layout, config_file, proc, log, notify, filler.unlink)
    finally:
        w.stop_all()


def test_start_up_on_a_read_only_root_comes_up_degraded(
    small_root: Layout, config_file: Path, tmp_path: Path, notify: NotifyLog
) -> None:
    layout = small_root
    mount = layout.root.parent
    log = tmp_path / "watcher.log"
    drop(layout, "waiting", '+++\nagent = "bash"\n+++\necho waited\n')
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)

    def writable_again() -> None:
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)

    w = Watchers(layout, config_file)
    proc = w.start(stderr=log, env={"NOTIFY_SOCKET": str(notify.path)})
    try:
        assert_degraded_then_recovers(layout, config_file, proc, log, notify, writable_again)
    finally:
        w.stop_all()


def test_sighup_while_the_disk_is_full_keeps_the_watcher(
    small_root: Layout, config_file: Path, tmp_path: Path, notify: NotifyLog
) -> None:
    layout = small_root
    log = tmp_path / "watcher.log"
    w = Watchers(layout, config_file)
    proc = w.start(stderr=log, env={"NOTIFY_SOCKET": str(notify.path)})
    try:
        wait_for(lambda: notify.saw("READY=1"), what="ready")
        hidden = layout.inbox / ".waiting.tmp"  # written now, dropped once the disk is full
        hidden.write_text('+++\nagent = "bash"\n+++\necho waited\n')
        filler = layout.root / "filler"
        fill(filler)
        proc.send_signal(signal.SIGHUP)  # re-exec: the new image starts on a full disk
        wait_for(lambda: notify.saw("RELOADING=1"), what="reloading")
        hidden.rename(layout.inbox / "waiting.prompt.md")  # a rename needs no space
        assert_degraded_then_recovers(layout, config_file, proc, log, notify, filler.unlink)
    finally:
        w.stop_all()


def test_submit_on_a_full_disk_says_so_and_leaves_nothing(
    small_root: Layout, tmp_path: Path
) -> None:
    layout = small_root
    fill(layout.root / "filler")
    prompt = tmp_path / "big.prompt.md"
    prompt.write_bytes(b"echo " + b"x" * 200_000 + b"\n")  # more than any page left free
    out = subprocess.run(
        hopper_cmd("submit", "--root", str(layout.root), str(prompt)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in layout.inbox.iterdir()) == [], "no .sub.*.tmp left behind"
