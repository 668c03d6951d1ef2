"""executors/calls.py: engine commands off the loop, on real processes; and the starts that
wait on them at their deadline and at a stop (in-process, no engine)."""

from __future__ import annotations

import select
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from conftest import wait_for
from hopper.agents.base import Preparation
from hopper.config import Config
from hopper.core.record import JobRecord
from hopper.core.states import Reason
from hopper.executors.calls import Lane, run_command, wait_alive
from hopper.executors.container_runner import ContainerExecutor, ImageCheck
from hopper.executors.protocol import Deferred, Ended, Launch
from hopper.executors.session import SessionExecutor
from hopper.executors.slurm_runner import SlurmExecutor
from hopper.executors.slurm_start import SlurmStart


def hanging(tmp_path: Path) -> tuple[list[str], Path]:
    """A command that records its pid and its child's, then hangs (a child in its group)."""
    pids = tmp_path / "pids"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    script.chmod(0o755)
    return [str(script)], pids


def gone(pids: Path) -> bool:
    return all(not psutil.pid_exists(int(p)) for p in pids.read_text().split())


def test_a_command_past_its_deadline_is_killed_with_its_group(tmp_path: Path) -> None:
    argv, pids = hanging(tmp_path)
    began = time.monotonic()
    answer = run_command(argv, 0.5)
    assert time.monotonic() - began < 5.0
    assert answer.timed_out and answer.returncode is None and not answer.ok
    assert answer.why() == "`hang.sh` did not answer within 0.5s; it was killed"
    wait_for(lambda: gone(pids), what="the command and its child killed")


def test_an_answer_carries_status_and_output(tmp_path: Path) -> None:
    answer = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
    assert (answer.returncode, answer.stdout, answer.stderr) == (3, "out\n", "err\n")
    assert answer.why() == "" and not answer.timed_out


def test_a_command_that_cannot_run_says_why(tmp_path: Path) -> None:
    answer = run_command([str(tmp_path / "no-such-engine"), "image", "inspect", "x"], 10)
    assert answer.returncode is None and not answer.timed_out
    assert answer.why() == "`no-such-engine image inspect` could not run: No such file or directory"


def test_a_lane_answers_through_a_descriptor_and_wakes_the_loop(tmp_path: Path) -> None:
    woken = threading.Event()
    lane = Lane("test", wake=woken.set)
    gate = threading.Event()
    call = lane.submit(lambda: gate.wait(10) and lane.run(["sh", "-c", "echo hi"], 10))
    try:
        assert select.select([call], [], [], 0)[0] == []  # not done: nothing to read
        assert not call.done()
        gate.set()
        assert select.select([call], [], [], 10)[0] == [call]
        assert woken.wait(10)
        answer = call.result()
        assert answer is not False and answer.stdout == "hi\n"
    finally:
        call.close()
        lane.close()
    with pytest.raises(ValueError, match="closed"):
        call.fileno()


def test_closing_a_lane_kills_what_still_runs(tmp_path: Path) -> None:
    argv, pids = hanging(tmp_path)
    lane = Lane("test")
    call = lane.submit(lambda: lane.run(argv, 300))
    wait_for(lambda: pids.exists() and pids.read_text().strip(), what="the command running")
    began = time.monotonic()
    lane.close()
    wait_for(call.done, what="the call ended by the close")
    assert time.monotonic() - began < 10.0
    assert call.result().error == "the watcher is stopping"
    wait_for(lambda: gone(pids), what="the command and its child killed")
    after = lane.run(["true"], 10)  # a closed lane runs nothing more
    assert after.returncode is None and after.error == "the watcher is stopping"


def test_wait_alive_keeps_the_loop_alive_while_it_waits() -> None:
    lane = Lane("test")
    beats: list[float] = []
    try:
        value = wait_alive(lane.submit(lambda: time.sleep(1.0) or 7), lambda: beats.append(1))
    finally:
        lane.close()
    assert value == 7
    assert len(beats) >= 3, beats  # one every 0.2 s


def record() -> JobRecord:
    return JobRecord.model_validate(
        {
            "id": "20261126-060000-000-x-0000",
            "state": "queued",
            "agent": "bash",
            "inbox_path": "inbox/x.prompt.md",
            "name": "x",
            "host": "h",
            "created_at": "2026-11-26T06:00:00Z",
        }
    )


def pending_start(kind: type, tmp_path: Path) -> tuple[object, threading.Event, Lane]:
    """An ImageCheck or a SlurmStart whose engine call never answers (until released)."""
    gate = threading.Event()
    lane = Lane("test")
    executor = SimpleNamespace(
        ctx=SimpleNamespace(config=Config(), clock=None), uncertain=set[str]()
    )
    launch = SimpleNamespace(record=record(), run_dir=tmp_path)
    call = lane.submit(lambda: gate.wait(30))
    if kind is ImageCheck:
        start = ImageCheck(executor, launch, call, time.monotonic())  # type: ignore[arg-type]
    else:
        start = SlurmStart(executor, launch, call, 1.0)  # type: ignore[arg-type]
    return start, gate, lane


@pytest.mark.parametrize("kind", [ImageCheck, SlurmStart])
def test_a_start_waiting_on_an_engine_goes_back_to_the_queue_at_a_stop(
    kind: type, tmp_path: Path
) -> None:
    start, gate, lane = pending_start(kind, tmp_path)
    try:
        start.hurry()  # type: ignore[attr-defined]
        assert start.deadline == 0.0  # type: ignore[attr-defined]  # collected at once
        report = start.report()  # type: ignore[attr-defined]
        assert isinstance(report, Deferred) and report.record == record()
    finally:
        gate.set()
        lane.close()


def test_an_image_check_still_running_at_its_deadline_fails_its_job(tmp_path: Path) -> None:
    start, gate, lane = pending_start(ImageCheck, tmp_path)
    try:
        report = start.report()  # type: ignore[attr-defined]
    finally:
        gate.set()
        lane.close()
    assert isinstance(report, Ended) and report.reason is Reason.SPAWN_FAILED
    assert report.detail == "the image check did not finish within 60s (its engine call hung)"


@pytest.mark.parametrize("kind", [ContainerExecutor, SlurmExecutor, SessionExecutor])
def test_an_executor_that_calls_an_engine_never_begins_a_start_ahead(
    kind: type, tmp_path: Path
) -> None:
    """A start ahead must record and make nothing a withdraw cannot undo: a
    submission, an image check or a session host is real work, so the answer is Deferred (the
    job stays queued, as it is) and nothing reaches the engine's lane."""
    ctx = SimpleNamespace(
        config=Config(), clock=None, wake=lambda: None, keepalive=lambda: None, fork_server=None
    )
    executor = kind(ctx)
    submitted: list[object] = []
    executor.lane.submit = submitted.append
    launch = Launch(
        record(), tmp_path, Preparation(argv=["bash", "-c", "true"]), tmp_path, {}, ahead=True
    )
    try:
        answer = executor.start(launch)
    finally:
        executor.lane.close()
    assert isinstance(answer, Deferred) and answer.record == record()
    assert submitted == [] and list(tmp_path.iterdir()) == []  # no wrapper, no call
