"""The watcher as systemd sees it: sd_notify on a real socket, SIGHUP, on_stop policies."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from conftest import Watchers, bash, drop, wait_for
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout


def running_dir(layout: Layout) -> Path:
    wait_for(
        lambda: any(
            (d / "job.json").exists() and read_record(d).state is JobState.RUNNING
            for d in layout.runs.iterdir()
        ),
        what="a running job",
    )
    (run_dir,) = list(layout.runs.iterdir())
    return run_dir


def test_notify_ready_watchdog_stopping(layout: Layout, config_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(20)
    w = Watchers(layout, config_file)
    proc = w.start(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"})
    try:
        seen: list[str] = []
        while not any("READY=1" in m for m in seen):
            seen.append(sock.recv(4096).decode())
        while not any("WATCHDOG=1" in m for m in seen):
            seen.append(sock.recv(4096).decode())
        assert any("STATUS=" in m for m in seen)
        proc.terminate()
        while not any("STOPPING=1" in m for m in seen):
            seen.append(sock.recv(4096).decode())
        assert proc.wait(timeout=20) == 0
    finally:
        w.stop_all()
        sock.close()


def test_jobs_do_not_inherit_notify_socket(layout: Layout, hopper) -> None:
    drop(layout, "env", bash('echo "socket=${NOTIFY_SOCKET:-none}"'))
    assert hopper("run", "--until-idle", env={"NOTIFY_SOCKET": "/nonexistent"}).returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    assert (run_dir / "job.log").read_text() == "socket=none\n"


def test_sighup_reexecs_and_keeps_running_jobs(layout: Layout, watchers) -> None:
    gate = layout.root / "gate"
    drop(layout, "kept", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done"))
    proc = watchers.start()
    run_dir = running_dir(layout)
    pid = read_record(run_dir).pid
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any(e["event"] == "adopted" for e in read_events(run_dir)), what="adopted")
    assert proc.poll() is None, "same process, new image"
    assert read_record(run_dir).pid == pid
    gate.touch()
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="finished")
    assert (run_dir / "job.log").read_text() == "done\n"


def test_on_stop_detach_leaves_jobs_for_the_next_watcher(
    layout: Layout, config_file: Path, watchers
) -> None:
    config_file.write_text(config_file.read_text() + 'on_stop = "detach"\n')
    gate = layout.root / "gate"
    drop(layout, "detached", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    proc = watchers.start()
    run_dir = running_dir(layout)
    proc.terminate()
    assert proc.wait(timeout=20) == 0
    assert read_record(run_dir).state is JobState.RUNNING
    watchers.start()
    wait_for(lambda: any(e["event"] == "adopted" for e in read_events(run_dir)), what="adopted")
    gate.touch()
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, what="finished")


def test_on_stop_wait_lets_jobs_finish(layout: Layout, config_file: Path, watchers) -> None:
    config_file.write_text(config_file.read_text() + 'on_stop = "wait"\n')
    gate = layout.root / "gate"
    drop(layout, "waited", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done"))
    proc = watchers.start()
    run_dir = running_dir(layout)
    proc.terminate()
    drop(layout, "not-started", bash("echo no"))
    gate.touch()
    assert proc.wait(timeout=20) == 0
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert list(layout.inbox.glob("*.prompt.md")), "no new claims while stopping"


def test_retries_keep_each_attempts_log(layout: Layout, hopper) -> None:
    counter = layout.root / "count"
    script = f"echo attempt >> {counter}; n=$(wc -l < {counter}); echo run $n; [ $n -ge 3 ]"
    drop(layout, "flaky", f'+++\nagent = "bash"\nretries = 2\n+++\n{script}\n')
    assert hopper("run", "--until-idle", env={}).returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert (record.state, record.attempt) == (JobState.SUCCEEDED, 3)
    assert (run_dir / "job.1.log").read_text() == "run 1\n"
    assert (run_dir / "job.2.log").read_text() == "run 2\n"
    assert (run_dir / "job.log").read_text() == "run 3\n"
    scheduled = [e for e in read_events(run_dir) if e["event"] == "retry_scheduled"]
    assert [e["attempt"] for e in scheduled] == [1, 2]


def test_retries_exhausted_fail(layout: Layout, hopper) -> None:
    drop(layout, "hopeless", '+++\nagent = "bash"\nretries = 1\n+++\nexit 4\n')
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert (record.state, record.reason, record.attempt) == (JobState.FAILED, "exit_nonzero", 2)
