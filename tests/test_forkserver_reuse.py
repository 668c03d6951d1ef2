"""A supervisor that serves several jobs, one after another (proc/forkserver.py): once
its exit.json is durable it says `done` and waits; the fork server gives it the next
job only after the watcher has freed it (``ForkServer.free``: the job is filed and
nothing signals the supervisor for it again). Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from conftest import Watchers, bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.proc import forkclient, spawn
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.takeover import effective_owner, try_take
from test_bash_jobs import job_dirs
from test_forkserver import _exit, _gated, _spare, _spec, _start

M = 1 << 20


@pytest.fixture
def capped() -> Iterator[forkclient.ForkServer]:
    """A fork server whose supervisors serve two jobs each."""
    srv = forkclient.ForkServer(max_jobs=2)
    srv.start()
    yield srv
    srv.close()


def _done(server: forkclient.ForkServer, run_dir: Path, script: str) -> forkclient.Forked:
    """A job run to its end; its supervisor done with it, not yet freed."""
    proc = _start(server, run_dir, script)
    assert isinstance(proc, forkclient.Forked)
    assert proc.wait(timeout=30) == 0
    assert proc.done
    return proc


def _fds(pid: int) -> dict[str, str]:
    """A process's descriptors: number -> what it points to."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
    return found


def test_a_freed_supervisor_serves_the_next_job_each_with_its_own_record(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    first = _done(server, tmp_path / "a", "echo a; exit 3")
    server.free(first)
    second = _done(server, tmp_path / "b", "echo b; exit 4")
    assert second.pid == first.pid  # the same process, no fork
    a, b = _exit(tmp_path / "a"), _exit(tmp_path / "b")
    assert (a["exit_code"], a["supervisor_pid"]) == (3, first.pid)
    assert (b["exit_code"], b["supervisor_pid"], b["started"]) == (4, first.pid, True)
    assert (tmp_path / "a" / "job.log").read_text() == "a\n"
    assert (tmp_path / "b" / "job.log").read_text() == "b\n"
    # found by no run directory while free (it leaves it right after its `done`)
    wait_for(lambda: psutil.Process(first.pid).cwd() == "/", what="the supervisor in /")


def test_a_supervisor_not_freed_is_not_given_another_job(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    first = _done(server, tmp_path / "a", "exit 0")
    second = _done(server, tmp_path / "b", "exit 0")
    assert second.pid != first.pid
    assert psutil.Process(first.pid).is_running()  # waits for its free (or the server's end)


def test_a_stop_sent_for_the_job_before_does_not_stop_the_next(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """The race: SIGTERM to the supervisor's pid for job N (its record's
    supervisor_pid), sent after N ended but before the watcher freed it. It is
    pending when the supervisor takes job N+1, which drops it first."""
    first = _done(server, tmp_path / "a", "exit 0")
    os.kill(first.pid, signal.SIGTERM)  # late, for job a
    os.kill(first.pid, signal.SIGINT)
    server.free(first)
    gate = tmp_path / "gate"
    second = _start(server, tmp_path / "b", _gated(gate, 5))
    assert second.pid == first.pid
    gate.touch()
    assert second.wait(timeout=30) == 0
    record = _exit(tmp_path / "b")
    assert (record["exit_code"], record["signal"], record["stop_signal_sent"]) == (5, None, False)


def test_a_stop_sent_for_the_running_job_still_stops_it(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    first = _done(server, tmp_path / "a", "exit 0")
    server.free(first)
    second = _start(server, tmp_path / "b", "sleep 30")
    assert second.pid == first.pid
    os.kill(second.pid, signal.SIGTERM)
    assert second.wait(timeout=30) == 0
    record = _exit(tmp_path / "b")
    assert record["stop_signal_sent"] is True and record["signal"] == signal.SIGTERM


def test_a_reused_supervisor_reports_the_second_jobs_own_cpu_and_peak_rss(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    heavy = tmp_path / "heavy.py"
    heavy.write_text(
        "import time\nb = b'x' * (120 << 20)\nt = time.process_time()\n"
        "while time.process_time() - t < 0.4:\n    pass\n"
    )
    first = _done(server, tmp_path / "a", f"{sys.executable} {heavy}")
    server.free(first)
    second = _done(server, tmp_path / "b", "true")
    assert second.pid == first.pid
    a, b = _exit(tmp_path / "a")["resources"], _exit(tmp_path / "b")["resources"]
    assert isinstance(a, dict) and isinstance(b, dict)
    assert a["cpu_seconds"] >= 0.35 and a["peak_rss_bytes"] >= 120 * M
    assert b["cpu_seconds"] < 0.2 and b["peak_rss_bytes"] < 60 * M, b


def test_nothing_a_job_opened_is_left_open_for_the_next(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    spare = _spare(server)
    waiting = _fds(spare)  # before any job
    first = _done(server, tmp_path / "a", "echo a")
    assert first.pid == spare
    # the same descriptors, pointing at the same things, once it has cleaned up after
    # its `done` (before it can take another job: that comes by the link it reads next)
    wait_for(lambda: _fds(spare) == waiting, what="the job's descriptors closed")
    server.free(first)
    gate = tmp_path / "gate"
    second = _start(server, tmp_path / "b", _gated(gate, 0))
    assert second.pid == spare
    held = _fds(spare)
    assert not [t for t in held.values() if str(tmp_path / "a") in t], held
    assert [t for t in held.values() if t == str(tmp_path / "b" / "job.log")]
    gate.touch()
    assert second.wait(timeout=30) == 0


def test_a_retired_supervisor_exits_and_serves_no_other_job(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """`retire`: the watcher let go of the job without filing it (another watcher took
    it over, whose record names this supervisor): it must never serve another."""
    first = _done(server, tmp_path / "a", "exit 0")
    sup = psutil.Process(first.pid)
    server.retire(first)
    sup.wait(timeout=30)  # told to go: EOF on its link
    second = _done(server, tmp_path / "b", "exit 0")
    assert second.pid != first.pid


def test_a_supervisor_retired_while_busy_finishes_its_job_then_exits(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    proc = _start(server, tmp_path / "a", _gated(gate, 6))
    assert isinstance(proc, forkclient.Forked)
    sup = psutil.Process(proc.pid)
    server.retire(proc)
    gate.touch()
    assert proc.wait(timeout=30) == 0
    sup.wait(timeout=30)  # done, then gone: not kept for a free that never comes
    assert _exit(tmp_path / "a")["exit_code"] == 6


def test_free_supervisors_exit_with_the_server_and_a_busy_one_finishes_its_job(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    idle = _done(server, tmp_path / "a", "exit 0")
    # The next spare, once forked: a request that comes before it is served by a
    # supervisor forked for it alone, which exits after its job, not one that waits.
    spare = _spare(server, other_than={idle.pid})
    unfreed = _done(server, tmp_path / "b", "exit 0")
    assert unfreed.pid == spare
    server.free(idle)
    gate = tmp_path / "gate"
    busy = _start(server, tmp_path / "c", _gated(gate, 9))
    assert busy.pid == idle.pid
    busy_proc = psutil.Process(busy.pid)
    waiting = psutil.Process(unfreed.pid)
    server.close()  # the watcher goes away: EOF
    waiting.wait(timeout=30)
    assert busy_proc.is_running() and busy_proc.status() != psutil.STATUS_ZOMBIE
    gate.touch()
    busy_proc.wait(timeout=30)  # it exits after its job
    assert _exit(tmp_path / "c")["exit_code"] == 9


def test_a_free_supervisor_killed_while_waiting_is_passed_over(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    first = _done(server, tmp_path / "a", "exit 0")
    server.free(first)
    sup = psutil.Process(first.pid)
    sup.kill()
    wait_for(lambda: first.pid not in [c.pid for c in psutil.Process(server.pid).children()])
    second = _done(server, tmp_path / "b", "exit 6")
    assert second.pid != first.pid
    assert _exit(tmp_path / "b")["exit_code"] == 6


def test_a_supervisor_serves_at_most_max_jobs(
    capped: forkclient.ForkServer, tmp_path: Path
) -> None:
    first = _done(capped, tmp_path / "a", "exit 0")
    capped.free(first)
    second = _done(capped, tmp_path / "b", "exit 0")
    assert second.pid == first.pid
    sup = psutil.Process(first.pid)
    capped.free(second)  # its second job: it is told to go
    sup.wait(timeout=30)
    third = _done(capped, tmp_path / "c", "exit 0")
    assert third.pid != first.pid


def test_a_start_refused_by_the_watcher_is_the_supervisors_last_job(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    """No `done` for a job that never ran: its supervisor exits, as a one-job one did."""
    first = _done(server, tmp_path / "a", "exit 0")
    server.free(first)
    run_dir = tmp_path / "b"
    run_dir.mkdir()
    proc = spawn.launch(run_dir, _spec(run_dir, "exit 0"), server)
    assert proc.pid == first.pid
    spawn.read_pid(proc)
    spawn.abandon(proc)  # EOF: started=false, then it exits
    assert _exit(run_dir)["started"] is False
    wait_for(lambda: first.pid not in [c.pid for c in psutil.Process(server.pid).children()])


def test_a_watchers_jobs_one_after_another_share_their_supervisors(
    layout: Layout, config_file: Path, hopper: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """A real watcher at one slot: each job has its own record, log and working
    directory, run by a supervisor that served an earlier job (not one fork per job)."""
    config_file.write_text(config_file.read_text() + "max_parallel = 1\n")
    for i in range(5):
        drop(layout, f"job{i}", bash(f"echo job{i} $PPID; pwd; exit {i}"))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    records = [read_record(d) for d in job_dirs(layout)]
    assert sorted(r.exit_code for r in records) == [0, 1, 2, 3, 4]
    supervisors = set()
    for rec in records:
        run_dir = layout.run_dir(rec.id)
        i = rec.exit_code
        assert (run_dir / "job.log").read_text() == (
            f"job{i} {rec.supervisor_pid}\n{run_dir / 'work'}\n"
        )
        assert json.loads((run_dir / "exit.json").read_text())["exit_code"] == i
        supervisors.add(rec.supervisor_pid)
    assert len(supervisors) < len(records)


def test_a_job_taken_over_by_another_watcher_retires_its_supervisor(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    """A real watcher whose running job another watcher takes over lets go of it
    unfiled; the job's supervisor, which the other watcher's record names, finishes
    the job and exits instead of waiting to serve this watcher's next job."""
    gate = tmp_path / "gate"
    drop(layout, "held", bash(f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3"))
    proc = watchers.start()
    found: list[JobRecord] = []

    def running() -> bool:
        found.clear()
        for path in job_dirs(layout):
            try:
                rec = read_record(path)
            except FileNotFoundError:
                continue  # claimed a moment ago: its job.json is not written yet
            if rec.state is JobState.RUNNING:
                found.append(rec)
        return bool(found)

    wait_for(running, timeout=60, what="the job running")
    (record,) = found
    assert record.owner is not None and record.supervisor_pid is not None
    run_dir = layout.run_dir(record.id)
    _, chain = effective_owner(run_dir, record.owner)
    assert try_take(run_dir, chain, "other-host:1:1.0")
    sup = psutil.Process(record.supervisor_pid)
    gate.touch()
    sup.wait(timeout=60)  # its job over, it exits: no next job from this watcher
    assert _exit(run_dir)["exit_code"] == 3
    assert read_record(run_dir).state is JobState.RUNNING  # the other watcher's to file
    assert proc.poll() is None
