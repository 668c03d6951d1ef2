"""The watcher's inode budget: the files and directories it makes per bash job.

A file create is the dearest thing the watcher does per job on ext4 (the
allocator skips recently freed inodes: 120–570 µs of CPU each on the
project's VM; docs/performance.md, "New files per job"). A real watcher
drains 24 bash `true` jobs at 2 slots with every creating call counted
(tests/inode_drive.py); the supervisors' own files (job.log, exit.json,
resources.json) are theirs, not counted, and so are the script.sh and the
work/ each job's supervisor makes before its exec (tests/test_job_files.py).
The 4 left: the run directory, events.jsonl, job.json's record (its standby,
made now and then a second time for a job), admission.json. Measured: 4.04-4.08
per job (5.04-5.08 with work/ made by the watcher).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import FAST_CONFIG
from hopper.store.layout import Layout

JOBS = 24
# new files or directories per job, in its run directory: 4, and the odd standby
# of job.json made again (1-2 of 24 jobs)
BUDGET = 4.25
SLOTS, SCOPES = 2, 2  # max_parallel; a bash job's lease scopes (all, agent-bash)
FIXED = 12  # made once per watcher whatever the number of jobs (.hopper/, heartbeats …)
DRIVE = Path(__file__).with_name("inode_drive.py")


def drain(tmp_path: Path, layout: Layout) -> list[tuple[str, str]]:
    config = tmp_path / "config.toml"
    config.write_text(FAST_CONFIG + f"max_parallel = {SLOTS}\n")
    old = time.time() - 60  # older than `settle`: every prompt is claimable at once
    for i in range(JOBS):
        path = layout.inbox / f"job-{i:03d}.prompt.md"
        path.write_text('+++\nagent = "bash"\n+++\ntrue\n')
        os.utime(path, (old, old))
    out = subprocess.run(
        [sys.executable, str(DRIVE), str(layout.root), str(config)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list(layout.processed.iterdir())) == JOBS
    return [(how, where) for how, where in json.loads(out.stdout.splitlines()[-1])]


def kind(root: Path, where: str) -> str:
    """The created path with its job id and random parts taken out."""
    rel = os.path.relpath(where, root)
    rel = re.sub(r"^runs/[^/]+", "runs/<id>", rel)
    return re.sub(r"\.[0-9a-f]{8,}\.", ".<random>.", rel)


def test_a_bash_job_costs_the_watcher_at_most_its_budget_of_new_inodes(
    tmp_path: Path, layout: Layout
) -> None:
    made = drain(tmp_path, layout)
    slots = layout.state_dir / "slots"
    per_job = [w for _, w in made if kind(layout.root, w).startswith("runs/<id>")]
    # slot leases: a file per lease held at once (its spare, reused), not one per job
    leases = [w for how, w in made if Path(w).parent.parent == slots and how != "mkdir"]
    beats = layout.state_dir / "watchers"  # a heartbeat per interval, not per job
    fixed = [w for _, w in made if w not in per_job and w not in leases and Path(w).parent != beats]
    counts = Counter(kind(layout.root, w) for w in per_job + leases)
    shown = "\n".join(f"{n:4d} {k}" for k, n in counts.most_common())
    assert len(per_job) / JOBS <= BUDGET, f"{len(per_job) / JOBS:.2f} per job:\n{shown}"
    assert counts["runs/<id>/work"] == 0, f"work/ is the supervisor's to make:\n{shown}"
    assert len(leases) <= SLOTS * SCOPES, f"lease files:\n{shown}"
    assert len(fixed) <= FIXED, f"made once per watcher: {sorted(fixed)}"
    # what it made is where hopper keeps a job's files: nothing outside the root
    assert all(w.startswith(str(layout.root)) for _, w in made), made
