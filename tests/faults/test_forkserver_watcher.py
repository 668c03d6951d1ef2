"""The fork server's faults seen through a real watcher: files and commands only.

A supervisor whose fork of its job is refused (fault point supervisor.fork),
the fork server SIGKILLed again and again under load, and a job whose exit
record was written before the watcher asked it to stop: the watcher goes on
claiming, starting and finishing, honours SIGTERM, and every job ends with its
true state (exit.json wins).
"""

from __future__ import annotations

import signal
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from conftest import FAST_CONFIG, Watchers, bash, drop, hopper_cmd, wait_for
from hopper.core import lifecycle
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason, is_terminal
from hopper.store import ledger
from hopper.store.jobfile import read_exit, read_record
from hopper.store.layout import Layout


def _records(layout: Layout) -> dict[str, JobRecord]:
    out = {}
    for d in layout.runs.iterdir():
        if not d.name.startswith(".") and (d / "job.json").exists():
            rec = read_record(d)
            out[rec.name] = rec
    return out


def _fork_server_of(watcher: int) -> psutil.Process | None:
    try:
        children = psutil.Process(watcher).children()
    except psutil.NoSuchProcess:
        return None
    for child in children:
        try:
            if any(part.endswith("forkserver.py") for part in child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


@pytest.mark.timeout(180)
def test_supervisors_whose_fork_is_refused_cost_their_jobs_not_the_watcher(
    layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path
) -> None:
    """Was: after a few refused starts, the watcher waited for good in read_pid (the
    exit report read before the handle was made); no more claims, starts or
    finalizes, later prompts stayed queued, and SIGTERM was ignored."""
    config_file.write_text(FAST_CONFIG + "max_parallel = 2\n")
    tokens = tmp_path / "tokens"  # each file: one supervisor whose fork is refused
    tokens.mkdir()
    for n in range(6):
        (tokens / str(n)).touch()
    env = {"HOPPER_CRASH_AT": "supervisor.fork", "HOPPER_FAULT_TOKENS": str(tokens)}
    names = [f"job{n}" for n in range(10)]
    watcher = watchers.start(env=env, stderr=tmp_path / "watcher.log")
    for name in names:
        drop(layout, name, bash("sleep 0.2"))

    def settled() -> bool:
        recs = _records(layout)
        return len(recs) == len(names) and all(is_terminal(r.state) for r in recs.values())

    wait_for(settled, timeout=90, what="every job filed")
    assert list(tokens.iterdir()) == []  # all six refusals happened
    ends = {n: (r.state, r.reason) for n, r in _records(layout).items()}
    # The supervisor said why (EAGAIN): a cause that passes, so each start was tried again.
    assert set(ends.values()) == {(JobState.SUCCEEDED, Reason.COMPLETED)}, ends
    events = "".join((d / "events.jsonl").read_text() for d in layout.runs.iterdir())
    assert events.count('"start_failed"') == 6, events
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(timeout=30) == 0


@pytest.mark.timeout(300)
def test_killing_the_fork_server_under_load_leaves_every_job_its_true_state(
    layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path
) -> None:
    """Was (3 of 3 runs): a job with exit.json (exit 0) stayed ``running`` with its slot
    held for as long as the watcher lived: its pid answer was read before the server
    was lost, and its handle took the new server's generation."""
    config_file.write_text(FAST_CONFIG + "max_parallel = 2\n")
    names = [f"job{n:02d}" for n in range(24)]
    for name in names:
        drop(layout, name, bash("sleep 1.5"))
    watcher = watchers.start(stderr=tmp_path / "watcher.log")
    killed: set[int] = set()
    for _ in range(8):
        wait_for(
            lambda: (srv := _fork_server_of(watcher.pid)) is not None and srv.pid not in killed,
            timeout=30,
            what="a fork server to kill",
        )
        server = _fork_server_of(watcher.pid)
        assert server is not None
        server.kill()
        killed.add(server.pid)
        before = {n for n, r in _records(layout).items() if r.state is JobState.SUCCEEDED}
        wait_for(  # about 2.5 s apart, paced by the jobs (no bare sleep)
            lambda before=before: (
                len(  # type: ignore[misc]
                    {n for n, r in _records(layout).items() if r.state is JobState.SUCCEEDED}
                    - before
                )
                >= 2
                or len(before) >= len(names) - 2
            ),
            timeout=60,
            what="two more jobs done",
        )

    def all_done() -> bool:
        recs = _records(layout)
        return len(recs) == len(names) and all(is_terminal(r.state) for r in recs.values())

    wait_for(all_done, timeout=120, what="every job filed")
    recs = _records(layout)
    wrong = {n: (r.state, r.reason) for n, r in recs.items() if r.state is not JobState.SUCCEEDED}
    assert not wrong, wrong
    assert len(killed) == 8
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(timeout=30) == 0


def test_a_job_that_exited_before_the_shutdown_is_filed_from_its_exit_record(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    """Was: ``stop_requested = shutdown`` won over an exit record written before the stop
    was asked for (no stop signal sent): a job that exited 0 was filed aborted/shutdown."""
    gate, ran = layout.root / "gate", layout.root / "ran"
    drop(layout, "done", bash(f"touch {ran}; while [ ! -e {gate} ]; do sleep 0.05; done; exit 0"))
    watcher = watchers.start()
    wait_for(ran.exists, what="the job released and running")
    watcher.send_signal(signal.SIGKILL)
    watcher.wait()
    gate.touch()
    record = _records(layout)["done"]
    run_dir = layout.run_dir(record.id)
    wait_for(lambda: (run_dir / "exit.json").exists(), what="the supervisor's exit record")
    status = read_exit(run_dir)
    assert status is not None and status.exit_code == 0 and not status.stop_signal_sent
    # What a watcher that never saw the exit leaves at SIGTERM (on_stop = abort).
    fact = lifecycle.StopRequested(at=datetime.now(UTC), reason=Reason.SHUTDOWN)
    ledger.commit(run_dir, lifecycle.stop_requested(record, fact))
    done = subprocess.run(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config_file), "--until-idle"),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
