"""One way a job ends: executors report an ``Ended``, the runner handles it in one place.

In-process tests drive a Watcher with a fake executor and a fake clock (no
processes, no sleeps); one real-process test checks that a job recovery
finishes after a restart goes through the same path as a polled one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.proc import identity
from hopper.store.jobfile import ABORT_FILE, EXIT_FILE, read_record
from hopper.store.layout import Layout
from hopper.store.takeover import effective_owner, try_take
from inprocess import exit_status, in_process, leases, names, started_job, turns
from test_workspaces import git, make_repo


def test_a_job_the_executor_reports_ended_is_finalized_once_and_its_lease_released(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    assert leases(layout), "a running job holds its slot"
    fake.exits[job_id] = exit_status(clock, 0)
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    for _ in range(3):
        clock.advance(5.0)
        watcher.turn()  # nothing more happens to it
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert names(layout, job_id).count("finalized") == 1
    assert record.processed_path and (layout.root / record.processed_path).exists()
    assert leases(layout) == []
    assert watcher.idle()


def test_abort_cancels_through_the_executor_once_and_the_job_ends_aborted(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    (layout.run_dir(job_id) / ABORT_FILE).touch()
    turns(watcher, clock, lambda: bool(fake.cancelled))
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()  # the stop was sent: not again
    assert fake.cancelled == [(job_id, Reason.ABORTED)]
    assert read_record(layout.run_dir(job_id)).stop_requested is Reason.ABORTED
    fake.exits[job_id] = exit_status(clock, None, 15)
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.ABORTED, Reason.ABORTED)
    assert names(layout, job_id).count("abort_requested") == 1


def test_a_failing_exit_with_retries_goes_back_to_the_queue_and_starts_again(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    path = drop(layout, "job", '+++\nagent = "bash"\nretries = 1\n+++\nexit 3\n')
    old = clock.time() - 60
    os.utime(path, (old, old))
    turns(watcher, clock, lambda: bool(fake.started))
    (job_id,) = fake.started
    fake.exits[job_id] = exit_status(clock, 3)
    turns(watcher, clock, lambda: len(fake.started) == 2, n=30)  # after the backoff
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.attempt) == (JobState.RUNNING, 2)
    assert "retry_scheduled" in names(layout, job_id)
    assert "finalized" not in names(layout, job_id)


def test_a_job_another_watcher_took_over_is_dropped_not_finished(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    run_dir = layout.run_dir(job_id)
    record = read_record(run_dir)
    assert record.owner is not None
    _, chain = effective_owner(run_dir, record.owner)
    assert try_take(run_dir, chain, "other-host:1:1.0")
    (running,) = [j for j in watcher.runner.running_jobs() if j.record.id == job_id]
    running.next_heartbeat = 0.0  # a heartbeat is due: checked before writing
    fake.exits[job_id] = exit_status(clock, 0)  # too late: not ours to finish
    clock.advance(1.0)
    watcher.turn()
    assert job_id not in watcher.runner.running_ids()
    assert fake.forgotten == [job_id]
    assert read_record(run_dir).state is JobState.RUNNING  # the new owner finishes it
    assert "finalized" not in names(layout, job_id)


def test_a_worktree_job_that_succeeded_while_the_watcher_was_down_is_cleaned_at_next_start(
    layout: Layout, tmp_path: Path, watchers, hopper
) -> None:
    repo = make_repo(tmp_path / "repo")
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done\n"
    drop(layout, "wt", bash(script, workdir=str(repo), workspace="worktree"))
    proc = watchers.start()

    def running() -> JobRecord | None:
        for run_dir in layout.runs.iterdir():
            if (run_dir / "job.json").exists():
                rec = read_record(run_dir)
                if rec.state is JobState.RUNNING:
                    return rec
        return None

    wait_for(running, what="the worktree job running")
    rec = running()
    assert rec is not None and rec.workspace_path and Path(rec.workspace_path).is_dir()
    proc.kill()  # the watcher dies; the job's supervisor does not
    proc.wait()
    go.touch()
    wait_for(lambda: (layout.run_dir(rec.id) / EXIT_FILE).exists(), what="the job's exit")
    sup = (rec.supervisor_pid, rec.supervisor_start_time)
    wait_for(lambda: not identity.is_alive(*sup), what="its supervisor gone")  # not adopted
    assert hopper("run", "--until-idle").returncode == 0
    final = read_record(layout.run_dir(rec.id))
    assert final.state is JobState.SUCCEEDED, final.detail
    assert not Path(rec.workspace_path).exists()  # removed, as after a live success
    assert git(repo, "rev-parse", "--verify", f"hopper/{rec.id}")  # the branch stays
    assert "workspace_removed" in names(layout, rec.id)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], check=True)
