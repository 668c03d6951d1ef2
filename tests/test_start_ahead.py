"""A start ahead: the next job's supervisor forked while every slot is busy (issue 16).

At one slot the job after the running one is prepared and its supervisor
forked with the job gated, holding no slot; when the slot frees, only the
``running`` commit and the release are left. The job stays queued until
then: withdrawn (its ``started: false`` exit record removed) when it leaves
the queue or changes, and a crash meanwhile is the ``start.after_spawn``
case. Real watcher processes: only the local executor starts ahead.
"""

from __future__ import annotations

import json
import os
import select
import signal
from pathlib import Path

import psutil
import pytest

from conftest import Watchers, bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.pending_starts import ahead_hold, aheads
from hopper.proc import forkclient, identity, spawn
from hopper.proc.protocol import lease_break_time
from hopper.store.jobfile import ABORT_FILE, EXIT_FILE, read_record
from hopper.store.layout import Layout
from hopper.store.markers import PRIORITY_FILE

ONE_SLOT = "max_parallel = 1\n"
WAIT = 60.0  # seconds: a loaded machine forks slowly
POLL = 0.05  # the test config's poll_interval (conftest.FAST_CONFIG)


def _one_slot(config_file: Path) -> None:
    config_file.write_text(config_file.read_text() + ONE_SLOT)


def _record(layout: Layout, name: str) -> JobRecord | None:
    for d in layout.runs.iterdir():
        if not d.name.startswith(".") and (d / "job.json").exists():
            rec = read_record(d)
            if rec.name == name:
                return rec
    return None


def _state(layout: Layout, name: str) -> JobState | None:
    rec = _record(layout, name)
    return None if rec is None else rec.state


def _supervisors(layout: Layout, name: str) -> set[int]:
    """Pids of the supervisor processes (and gated jobs, same argv) in ``name``'s run dir."""
    rec = _record(layout, name)
    if rec is None:
        return set()
    return {p.pid for p in identity.supervisors_of(str(layout.run_dir(rec.id)))}


def _ahead(layout: Layout, name: str) -> set[int]:
    """Supervisors of ``name`` while its record still says queued (a start ahead)."""
    pids = _supervisors(layout, name)
    return pids if pids and _state(layout, name) is JobState.QUEUED else set()


def _forked_ahead(layout: Layout) -> tuple[set[int], JobRecord]:
    """Wait until "second"'s supervisor is forked ahead: its pids and queued record."""
    wait_for(
        lambda: _ahead(layout, "second"), timeout=WAIT, what="second's supervisor forked ahead"
    )
    pids = _ahead(layout, "second")
    second = _record(layout, "second")
    assert second is not None
    return pids, second


def _busy_then_next(
    layout: Layout, watchers: Watchers, config_file: Path, next_script: str
) -> Path:
    """One slot held by a gated job ("first"), "second" dropped behind it; the gate."""
    _one_slot(config_file)
    gate = layout.root / "gate"
    drop(layout, "first", bash(f"while [ ! -e {gate} ]; do sleep 0.02; done"))
    watchers.start()
    wait_for(
        lambda: _state(layout, "first") is JobState.RUNNING, timeout=WAIT, what="first running"
    )
    drop(layout, "second", bash(next_script))
    return gate


def test_the_next_jobs_supervisor_is_forked_while_the_slot_is_busy(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    ran = layout.root / "ran"
    gate = _busy_then_next(layout, watchers, config_file, f"echo x >> {ran}")
    ahead, second = _forked_ahead(layout)
    assert second.state is JobState.QUEUED
    run_dir = layout.run_dir(second.id)
    assert not ran.exists()  # gated: nothing of it runs before it is recorded running
    assert not (run_dir / EXIT_FILE).exists()
    # Its job waits at a spawned job's gate, the lease on job.log (proc/gate.py),
    # which the kernel ends after lease-break-time (45 s by default): the start
    # ahead is begun afresh before then (tests/test_ahead_hold.py). Where no hold
    # fits (an unreadable lease-break-time), it waits on a forked job's pipe.
    held = ahead_hold(lease_break_time(), POLL) is not None
    waits = "__break_lease" if held else "pipe_read"
    gated = [c for p in ahead for c in psutil.Process(p).children()]
    wait_for(
        lambda: all(waits in Path(f"/proc/{c.pid}/wchan").read_text() for c in gated),
        what=f"the job ahead waiting at its gate ({waits})",
    )
    gate.touch()
    wait_for(
        lambda: _state(layout, "second") is JobState.SUCCEEDED,
        timeout=WAIT,
        what="second succeeded",
    )
    done = _record(layout, "second")
    assert done is not None and done.supervisor_pid in ahead  # the very supervisor forked ahead
    assert gated
    assert ran.read_text() == "x\n"
    assert json.loads((run_dir / EXIT_FILE).read_text())["started"] is True


def test_a_start_ahead_is_withdrawn_when_its_job_is_aborted(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    ran = layout.root / "ran"
    gate = _busy_then_next(layout, watchers, config_file, f"touch {ran}")
    _, second = _forked_ahead(layout)
    run_dir = layout.run_dir(second.id)
    (run_dir / ABORT_FILE).touch()
    wait_for(
        lambda: _state(layout, "second") is JobState.ABORTED, timeout=WAIT, what="second aborted"
    )
    assert _supervisors(layout, "second") == set()  # withdrawn before it was filed
    assert not (run_dir / EXIT_FILE).exists()
    record = _record(layout, "second")
    assert record is not None and record.reason is Reason.ABORTED and record.pid is None
    gate.touch()
    wait_for(
        lambda: _state(layout, "first") is JobState.SUCCEEDED, timeout=WAIT, what="first succeeded"
    )
    assert not ran.exists()


def test_a_start_ahead_of_a_job_that_changed_is_withdrawn_and_begun_afresh(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    """A priority change rewrites the queued record: the start ahead, begun from
    the old one, is withdrawn (its started=false exit.json removed, so it cannot
    be taken for the new run's) and begun again from the new record."""
    ran = layout.root / "ran"
    gate = _busy_then_next(layout, watchers, config_file, f"echo x >> {ran}")
    old, second = _forked_ahead(layout)
    run_dir = layout.run_dir(second.id)
    (run_dir / PRIORITY_FILE).write_text("7\n")
    wait_for(
        lambda: (r := _record(layout, "second")) is not None and r.priority == 7,
        timeout=WAIT,
        what="the priority change recorded",
    )
    wait_for(lambda: _ahead(layout, "second") - old, timeout=WAIT, what="a new start ahead")
    assert not old & {p.pid for p in psutil.process_iter()}  # the old one is gone
    assert not (run_dir / EXIT_FILE).exists()
    gate.touch()
    wait_for(
        lambda: _state(layout, "second") is JobState.SUCCEEDED,
        timeout=WAIT,
        what="second succeeded",
    )
    done = _record(layout, "second")
    assert done is not None and done.priority == 7 and done.supervisor_pid not in old
    assert ran.read_text() == "x\n"


def test_a_watcher_killed_with_a_start_ahead_runs_that_job_once_after_restart(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    ran = layout.root / "ran"
    gate = _busy_then_next(layout, watchers, config_file, f"echo x >> {ran}")
    old, _ = _forked_ahead(layout)
    watchers.procs[0].send_signal(signal.SIGKILL)
    watchers.procs[0].wait()
    watchers.start()  # adopts "first", takes "second" as queued (start.after_spawn's case)
    gate.touch()
    wait_for(
        lambda: _state(layout, "second") is JobState.SUCCEEDED,
        timeout=WAIT,
        what="second succeeded",
    )
    done = _record(layout, "second")
    assert done is not None and done.supervisor_pid not in old
    assert ran.read_text() == "x\n"  # once: the gated job of the first watcher never ran
    assert _state(layout, "first") is JobState.SUCCEEDED


# -- spawn.Pending.withdraw, the withdrawal itself ------------------------------------
def _begin(server: forkclient.ForkServer, run_dir: Path, script: str) -> spawn.Pending:
    run_dir.mkdir(exist_ok=True)
    spec = spawn.LaunchSpec(
        argv=["sh", "-c", script],
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )
    return spawn.begin(run_dir, spec, server)


def test_a_withdrawn_start_leaves_no_process_and_no_exit_record(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    run_dir, ran = tmp_path / "run", tmp_path / "ran"
    pending = _begin(server, run_dir, f"touch {ran}")
    pending.withdraw()  # waits for the pid, says no, waits for the supervisor to go
    assert identity.supervisors_of(str(run_dir)) == []
    assert not (run_dir / EXIT_FILE).exists()  # its started=false record removed
    assert not ran.exists()


def test_a_withdrawn_start_removes_the_log_it_made_and_keeps_one_it_found(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """A queued job that is aborted never had a job.log (test_bash_jobs::
    test_abort_before_start); an earlier attempt's log is never touched."""
    fresh = tmp_path / "fresh"
    _begin(server, fresh, "exit 0").withdraw()
    assert not (fresh / "job.log").exists()
    again = tmp_path / "again"
    again.mkdir()
    (again / "job.log").write_text("attempt 1\n")
    _begin(server, again, "exit 0").withdraw()
    assert (again / "job.log").read_text() == "attempt 1\n"


def test_a_withdrawn_supervisor_that_does_not_exit_in_time_is_killed(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    pending = _begin(server, run_dir, "exit 0")
    select.select([pending], [], [], 30)
    proc, _ = pending.collect()
    os.kill(proc.pid, signal.SIGSTOP)  # as one stuck writing its record on a full disk
    pending.withdraw(timeout=0.2)
    assert proc.poll() is not None
    assert identity.supervisors_of(str(run_dir)) == []
    assert not (run_dir / EXIT_FILE).exists()


def test_withdrawing_a_start_whose_supervisor_never_came_up_only_tidies(
    server: forkclient.ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    pending = _begin(server, run_dir, "exit 0")
    (run_dir / EXIT_FILE).write_text("{}")  # whatever a broken start left

    def failed() -> tuple[spawn.Supervisor, int]:
        raise spawn.SpawnFailed(0, "the supervisor broke the handshake")

    real = pending.collect
    monkeypatch.setattr(pending, "collect", failed)
    pending.withdraw()
    assert not (run_dir / EXIT_FILE).exists()
    monkeypatch.setattr(pending, "collect", real)
    pending.withdraw()  # the real supervisor of this test, told no as well
    assert identity.supervisors_of(str(run_dir)) == []


def test_aheads_is_one_per_slot_at_most_three() -> None:
    assert [aheads(n) for n in (1, 2, 3, 4, 8, 64)] == [1, 2, 3, 3, 3, 3]
    assert aheads(0) == 1  # never fewer than one (a config validated elsewhere)


def test_with_two_slots_busy_the_next_two_jobs_are_begun_ahead_and_run_on_those_supervisors(
    layout: Layout, watchers: Watchers, config_file: Path
) -> None:
    config_file.write_text(config_file.read_text() + "max_parallel = 2\n")
    gate = layout.root / "gate"
    ran = layout.root / "ran"
    for name in ("first", "also-first"):
        drop(layout, name, bash(f"while [ ! -e {gate} ]; do sleep 0.02; done"))
    watchers.start()
    wait_for(
        lambda: all(_state(layout, n) is JobState.RUNNING for n in ("first", "also-first")),
        timeout=WAIT,
        what="both slots busy",
    )
    for name in ("second", "third"):
        drop(layout, name, bash(f"echo {name} >> {ran}"))
    wait_for(
        lambda: _ahead(layout, "second") and _ahead(layout, "third"),
        timeout=WAIT,
        what="second's and third's supervisors forked ahead",
    )
    forked = {name: _ahead(layout, name) for name in ("second", "third")}
    assert not ran.exists()  # gated: nothing of them runs before they are recorded running
    gate.touch()
    for name in ("second", "third"):
        wait_for(
            lambda n=name: _state(layout, n) is JobState.SUCCEEDED,  # type: ignore[misc]
            timeout=WAIT,
            what=f"{name} succeeded",
        )
        done = _record(layout, name)
        assert done is not None and done.supervisor_pid in forked[name]
    assert sorted(ran.read_text().split()) == ["second", "third"]
