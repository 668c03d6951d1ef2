"""Tampering with run directories, end to end through a real watcher (issue 13).

A job can write anything into its own run directory (by default its working
directory) and, through ``../<id>/``, into another job's. The files hopper
reads back from there (agent.json, exit.json, PRIORITY …) are read safely
(store/saferead.py) and validated: a FIFO, a huge file or a wrong shape is a
reason or an ignored file with an event, never a hang, a crash or a verdict
the supervisor did not record.
"""

from __future__ import annotations

import json
import os
import signal

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


def records(layout: Layout) -> dict[str, JobRecord]:
    out = {}
    for run_dir in layout.runs.iterdir():
        if not run_dir.name.startswith(".") and (run_dir / "job.json").exists():
            rec = read_record(run_dir)
            out[rec.name] = rec
    return out


def events(layout: Layout, rec: JobRecord) -> list[dict[str, object]]:
    text = (layout.run_dir(rec.id) / "events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def terminal(layout: Layout, name: str) -> JobRecord | None:
    rec = records(layout).get(name)
    return rec if rec is not None and rec.state is not JobState.QUEUED and rec.finished_at else None


def test_agent_json_fifo_and_wrong_types_do_not_stop_finalizing(layout: Layout, hopper) -> None:
    """``mkfifo agent.json`` blocked the watcher forever in open() at finish (and again
    in recovery); ``{"permission_denials": 5}`` raised TypeError at finalize on every
    restart; a valid ``{"outcome": "succeeded"}`` turned a bash job's exit 3 into a
    success. A bash job's agent.json is now never opened (only a driver writes one; the
    parse errors of a driver's are tested in test_saferead.py): each is ignored with an
    event, and the jobs end on the exit status the supervisor recorded."""
    drop(layout, "fifo", bash('mkfifo "$HOPPER_RUN_DIR/agent.json"; echo made'))
    wrong = '{"permission_denials": 5, "outcome": "succeeded"}'
    drop(layout, "types", bash(f"echo '{wrong}' > \"$HOPPER_RUN_DIR/agent.json\"\nexit 3"))
    forged = '{"outcome": "succeeded", "result_path": null}'
    drop(layout, "forged", bash(f"echo '{forged}' > \"$HOPPER_RUN_DIR/agent.json\"\nexit 3"))
    drop(layout, "good", bash("echo good"))
    result = hopper("run", "--until-idle", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    recs = records(layout)
    assert (recs["fifo"].state, recs["fifo"].reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    for name in ("types", "forged"):
        assert (recs[name].state, recs[name].reason) == (JobState.FAILED, Reason.EXIT_NONZERO)
        assert recs[name].exit_code == 3, "agent.json did not overrule the exit status"
    assert recs["types"].permission_denials == []
    assert recs["good"].state is JobState.SUCCEEDED
    for name in ("fifo", "types", "forged"):
        [ignored] = [e for e in events(layout, recs[name]) if e["event"] == "agent_summary_ignored"]
        assert "a bash job wrote it" in str(ignored["detail"]), ignored
    assert "agent.json ignored" in result.stderr
    assert not [e for e in events(layout, recs["good"]) if e["event"] == "agent_summary_ignored"]


def test_fifo_planted_as_priority_of_a_queued_job(layout: Layout, watchers) -> None:
    """A FIFO at runs/<queued-id>/PRIORITY (any job can make one through ../<id>/)
    blocked the watcher in open(); now the request is rejected with a reason."""
    proc = watchers.start()
    drop(layout, "waiter", '+++\nagent = "bash"\nafter = ["never-submitted"]\n+++\necho waited\n')
    wait_for(lambda: records(layout).get("waiter"), what="the waiter to be queued")
    waiter = records(layout)["waiter"]
    assert waiter.state is JobState.QUEUED
    drop(
        layout,
        "planter",
        bash(f'mkfifo "$HOPPER_ROOT/runs/{waiter.id}/PRIORITY"; echo planted'),
    )
    wait_for(lambda: terminal(layout, "planter"), what="the planting job to finish")

    def rejected() -> list[dict[str, object]]:
        return [e for e in events(layout, waiter) if e["event"] == "priority_rejected"]

    wait_for(rejected, what="the planted PRIORITY to be rejected")
    assert "is a FIFO, not a regular file" in str(rejected()[0]["detail"])
    drop(layout, "after-fifo", bash("echo next"))
    wait_for(lambda: terminal(layout, "after-fifo"), what="the next prompt to run")
    assert proc.poll() is None, "the watcher is still up"
    assert not os.path.lexists(layout.run_dir(waiter.id) / "PRIORITY")
    assert records(layout)["waiter"].state is JobState.QUEUED, "still waiting, untouched"
    (layout.run_dir(waiter.id) / "ABORT").touch()
    wait_for(lambda: terminal(layout, "waiter"), what="the waiter to be aborted")


def test_job_writes_its_own_exit_json_and_the_watcher_restarts(layout: Layout, watchers) -> None:
    """A running job writes a bogus exit.json; the watcher is killed and restarted and
    adopts the job. JobFileCorrupt escaped poll and killed the new watcher at every
    start; now the file is ignored while the supervisor lives, the supervisor's own
    record replaces it, and the job ends on what the supervisor saw."""
    first = watchers.start()
    script = """echo garbage > "$HOPPER_RUN_DIR/exit.json"
while [ ! -e "$HOPPER_RUN_DIR/go" ]; do sleep 0.05; done
echo done; exit 4"""
    drop(layout, "forger", bash(script))
    wait_for(
        lambda: (
            (rec := records(layout).get("forger"))
            and rec.state is JobState.RUNNING
            and (layout.run_dir(rec.id) / "exit.json").exists()
        ),
        what="the job to run and write its exit.json",
    )
    rec = records(layout)["forger"]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = watchers.start()
    wait_for(
        lambda: any(e["event"] == "adopted" for e in events(layout, rec)),
        what="the restarted watcher to adopt the job",
    )
    drop(layout, "meanwhile", bash("echo meanwhile"))
    wait_for(lambda: terminal(layout, "meanwhile"), what="a new prompt to run meanwhile")
    assert second.poll() is None, "the restarted watcher is still up"
    (layout.run_dir(rec.id) / "go").touch()
    wait_for(lambda: terminal(layout, "forger"), what="the job to be finalized")
    final = records(layout)["forger"]
    assert (final.state, final.reason, final.exit_code) == (
        JobState.FAILED,
        Reason.EXIT_NONZERO,
        4,
    )
    assert second.poll() is None


def test_a_forged_exit_json_whose_supervisor_dies_is_lost_with_a_reason(
    layout: Layout, watchers
) -> None:
    """If the supervisor dies without replacing the job's bogus exit.json, the job is
    filed lost, and the detail says the exit.json was not trusted."""
    first = watchers.start()
    script = """echo '{"exit_code": 0}' > "$HOPPER_RUN_DIR/exit.json"
sleep 600"""
    drop(layout, "forger", bash(script))
    wait_for(
        lambda: (
            (rec := records(layout).get("forger"))
            and rec.state is JobState.RUNNING
            and (layout.run_dir(rec.id) / "exit.json").exists()
        ),
        what="the job to run and write its exit.json",
    )
    rec = records(layout)["forger"]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = watchers.start()
    wait_for(
        lambda: any(e["event"] == "adopted" for e in events(layout, rec)),
        what="the restarted watcher to adopt the job",
    )
    assert rec.supervisor_pid is not None
    os.kill(rec.supervisor_pid, signal.SIGKILL)
    wait_for(lambda: terminal(layout, "forger"), what="the job to be filed")
    final = records(layout)["forger"]
    assert (final.state, final.reason) == (JobState.FAILED, Reason.LOST)
    assert final.detail and "exit.json was not trusted" in final.detail
    assert "started: Field required" in final.detail
    assert second.poll() is None
