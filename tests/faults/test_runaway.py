"""Nothing of a job outlives it: hopping processes, dead supervisors, NaN timeouts.

Each test runs real processes. A job's processes are found the way an
operator would look for them: every process whose environment names the job
(``HOPPER_JOB_ID``, which hopper has always set).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from conftest import bash, drop, wait_for
from faults.test_crash_points import run_watcher
from hopper.core.states import JobState, Reason
from hopper.proc import spawn
from hopper.store.jobfile import read_events, read_exit, read_record
from hopper.store.layout import Layout
from waiting import WaitTimeout

# A process that forks, lets the parent exit and calls setsid in the child,
# over and over: never the same pid, group or session for long (a scan of
# /proc rarely catches it under its current pid). Whichever generation is
# alive answers a probe file with an echo file, which is how a test tells
# that one is left. It stops by itself after 40 s so that a failing test
# leaves nothing running for long.
HOPPER = """\
import os, sys, time
ready, probe, echo = sys.argv[1:4]
end = time.time() + 40
open(ready, "w").close()
while time.time() < end:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.path.exists(probe):
        open(echo, "w").close()
    time.sleep(0.002)  # the escapee's own pace, a fork every 2 ms: nothing the test waits on
"""


def hopper_alive(layout: Layout) -> bool:
    """Ask any live generation of the hopper to answer; False if none does within 2 s."""
    probe, echo = layout.root / "probe", layout.root / "echo"
    echo.unlink(missing_ok=True)
    probe.touch()
    try:
        wait_for(echo.exists, timeout=2, what="an answer from a live hopper")
    except WaitTimeout:
        return False
    finally:
        probe.unlink()
    return True


def processes_of(job_id: str) -> list[int]:
    """Live processes whose environment carries ``HOPPER_JOB_ID=<job_id>`` (not hoppers)."""
    needle = f"HOPPER_JOB_ID={job_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in env and _alive(int(name)):
            found.append(int(name))
    return found


def running_job(layout: Layout) -> Path:
    def find() -> Path | None:
        for run_dir in layout.runs.iterdir():
            try:
                if read_record(run_dir).state is JobState.RUNNING:
                    return run_dir
            except (FileNotFoundError, NotADirectoryError):
                continue
        return None

    wait_for(find, what="a running job")
    found = find()
    assert found is not None
    return found


def hopper_job(layout: Layout, tail: str) -> str:
    script = layout.root / "hop.py"
    script.write_text(HOPPER)
    files = " ".join(str(layout.root / n) for n in ("hopping", "probe", "echo"))
    return bash(f"{sys.executable} {script} {files}\n{tail}")


def test_abort_ends_a_process_that_keeps_forking_and_calling_setsid(
    layout: Layout, watchers
) -> None:
    drop(layout, "hop", hopper_job(layout, "sleep 300"))
    watchers.start()
    run_dir = running_job(layout)
    wait_for((layout.root / "hopping").exists, what="the hopper to start")
    assert hopper_alive(layout)
    (run_dir / "ABORT").touch()
    wait_for(lambda: read_record(run_dir).state is JobState.ABORTED, timeout=30, what="aborted")
    # exit.json is written only once the tree is empty: nothing may be left now
    # (a moment for SIGKILLed processes to be reaped by init).
    assert not hopper_alive(layout), "a generation of the hopper outlived the abort"
    assert read_exit(run_dir) is not None
    raw = json.loads((run_dir / "exit.json").read_text())
    assert raw["escaped"] == 0


def test_leftovers_that_keep_forking_are_ended_when_the_job_exits(layout: Layout, watchers) -> None:
    drop(layout, "hop", hopper_job(layout, "exit 0"))
    watchers.start()
    wait_for((layout.root / "hopping").exists, what="the hopper to start")
    (run_dir,) = list(layout.runs.iterdir())
    wait_for(lambda: read_record(run_dir).state is JobState.SUCCEEDED, timeout=60, what="done")
    assert not hopper_alive(layout), "a generation of the hopper outlived its job"
    ended = [e for e in read_events(run_dir) if e["event"] == "leftovers_ended"]
    assert ended and ended[0]["processes"] >= 1 and ended[0]["escaped"] == 0, ended


def test_recovery_ends_a_setsid_child_of_a_dead_supervisor(
    layout: Layout, config_file: Path, watchers
) -> None:
    """kill -9 of watcher and supervisor: the job is filed lost and its escapee dies."""
    escapee = layout.root / "escapee"
    script = f"setsid -f bash -c 'echo $$ > {escapee}; exec sleep 1000'\nsleep 300"
    drop(layout, "orphan", bash(script))
    first = watchers.start()
    run_dir = running_job(layout)
    wait_for(lambda: escapee.exists() and escapee.read_text().strip(), what="the escapee")
    escapee_pid = int(escapee.read_text())
    record = read_record(run_dir)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert record.supervisor_pid
    os.kill(record.supervisor_pid, signal.SIGKILL)
    wait_for(lambda: not _alive(record.supervisor_pid), what="the supervisor gone")
    assert _alive(escapee_pid), "the setsid child outlived its supervisor"
    assert run_watcher(layout, config_file) == 0
    final = read_record(run_dir)
    assert (final.state, final.reason) == (JobState.FAILED, Reason.LOST)
    wait_for(lambda: not _alive(escapee_pid), timeout=3, what="the setsid escapee killed")
    assert not processes_of(run_dir.name)
    lost = [e for e in read_events(run_dir) if e["event"] == "lost"]
    assert lost and lost[0]["orphans_killed"] >= 2, lost  # sleep 300 and sleep 1000


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def test_nan_timeout_reaching_the_supervisor_means_none_not_a_spin(tmp_path: Path) -> None:
    """A NaN timeout that slipped past validation: no timeout, and no busy loop."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = spawn.LaunchSpec(
        argv=["sleep", "3"],
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        timeout=float("nan"),
        grace=float("nan"),
        sample_interval=float("nan"),
        output_max=None,
    )
    proc = spawn.launch(run_dir, spec)
    spawn.read_pid(proc)
    spawn.release(proc)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    record = json.loads((run_dir / "exit.json").read_text())
    assert (record["exit_code"], record["timed_out"]) == (0, False)
    cpu = usage.ru_utime + usage.ru_stime
    # A supervisor booted by path costs ~0.09-0.12 s of CPU on a 2-core machine busy
    # with the rest of the suite (Python and its imports; 0.15 s was passed once in a
    # full run); a spinning one burns the whole 3 s (or, on a loaded machine, its
    # share of a core over 3 s: still several times this bound).
    assert cpu < 0.5, f"the supervisor used {cpu:.2f}s of CPU over a 3 s job: it spun"


def test_output_limit_kills_a_writer_that_ignores_sigterm_at_once(
    layout: Layout, config_file: Path, hopper
) -> None:
    """No grace for an output limit: kill_grace (here 5 s) would let it write on."""
    slow = config_file.read_text().replace('kill_grace = "1s"', 'kill_grace = "5s"')
    config_file.write_text(slow)
    drop(layout, "flood", bash("trap '' TERM\nexec yes 0123456789abcdef", output_max="1M"))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert record.reason is Reason.OUTPUT_LIMIT
    signals = [e.get("signal") for e in read_events(run_dir) if e["event"] == "signal_sent"]
    assert signals == ["SIGKILL"], signals
    assert record.duration_seconds is not None and record.duration_seconds < 4
