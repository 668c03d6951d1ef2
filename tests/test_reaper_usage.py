"""The final figures of a job are its own processes', from ``wait4`` (proc/reaper.py),
not the supervisor's RUSAGE_CHILDREN, which counts every child the process ever
reaped: a process that reaped a heavy child before this job (as a supervisor
that serves several jobs would) must not report that child's CPU or peak RSS."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from hopper.proc.meter import Meter
from hopper.proc.reaper import Reaper
from hopper.proc.rundir import RunDir

M = 1 << 20
HEAVY = (  # 120 MiB written (so resident), then 0.4 s of CPU
    "import time; b = b'x' * (120 << 20); t = time.process_time()\n"
    "while time.process_time() - t < 0.4: pass"
)
LIGHT = "b = b'x' * (30 << 20)"


def _in_child(run_dir: Path) -> dict[str, float]:
    """In a process of its own (so no child of pytest is reaped here)."""
    subprocess.run([sys.executable, "-c", HEAVY], check=True)  # reaped: RUSAGE_CHILDREN has it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaper = Reaper()
    reaper.pid = subprocess.Popen([sys.executable, "-c", LIGHT]).pid  # Popen never waits: we do
    while reaper.status is None:
        reaper.wait(None)
        reaper.reap()
    meter = Meter(RunDir(str(run_dir)), None, None, None, note=lambda name, **fields: None)
    figures = meter.final_figures(0, reaper.reaped_cpu, reaper.reaped_maxrss)
    return {
        "before_cpu": before.ru_utime + before.ru_stime,
        "before_maxrss": before.ru_maxrss * 1024,
        "cpu": float(figures["cpu_seconds"] or 0),
        "peak": float(figures["peak_rss_bytes"] or 0),
        "status": float(reaper.status),
    }


def test_final_figures_are_the_jobs_own_not_an_earlier_childs(tmp_path: Path) -> None:
    # In a fresh, small interpreter: a child's ru_maxrss starts at its parent's
    # resident size when it is forked (and exec keeps that high-water mark), so a
    # fork of pytest (~180 MiB late in a full run) would lend the light child
    # pytest's size, not the heavy child's.
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    got = json.loads(done.stdout)
    assert got["status"] == 0
    # What the process had reaped before: the heavy child's 0.4 s and 120 MiB ...
    assert got["before_cpu"] >= 0.35 and got["before_maxrss"] >= 120 * M
    # ... is not in the job's figures: only the light child's.
    assert got["cpu"] < 0.3, got
    assert 30 * M <= got["peak"] < 100 * M, got


if __name__ == "__main__":
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    sys.stdout.write(json.dumps(_in_child(Path(sys.argv[1]))))
