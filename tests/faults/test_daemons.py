"""A daemon a job starts is the job's; one it only asks is not (docs/contract.md, "Limits").

tmux is the common case: ``tmux new-session -d`` starts a server when none
answers on the socket (it forks, calls setsid, leaves the job's process group)
and asks the running one otherwise. A server the job started is in its tree
and carries its token: ABORT ends it and the session's processes. (A session
a job asks an already running server to start is the server's child: no stop
of the job reaches it; that limit is documented, not tested here.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from conftest import bash, drop, wait_for
from faults.test_runaway import running_job
from hopper.core.states import JobState
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_abort_ends_a_tmux_server_the_job_started_and_its_sessions(
    layout: Layout, watchers, tmp_path: Path
) -> None:
    socket = f"hopper-test-{tmp_path.name}"  # -L: /tmp/tmux-UID/NAME, short enough
    script = (
        f"tmux -L {socket} -f /dev/null new-session -d 'sleep 300'\n"
        f'tmux -L {socket} display -p "#{{pid}}" > "$HOPPER_RUN_DIR/server.pid"\n'
        f'tmux -L {socket} list-panes -F "#{{pane_pid}}" > "$HOPPER_RUN_DIR/pane.pid"\n'
        "sleep 300\n"
    )
    drop(layout, "tmux", bash(script))
    watchers.start()
    run_dir = running_job(layout)
    try:
        wait_for(
            lambda: (run_dir / "pane.pid").exists() and (run_dir / "pane.pid").read_text(),
            what="the tmux session up",
        )
        server = int((run_dir / "server.pid").read_text())
        pane = int((run_dir / "pane.pid").read_text())
        assert alive(server) and alive(pane)
        job_group = read_record(run_dir).pid
        assert os.getpgid(server) != job_group  # a daemon: out of the job's group and session
        (run_dir / "ABORT").touch()
        wait_for(lambda: read_record(run_dir).state is JobState.ABORTED, timeout=30)
        # exit.json is written once the tree is empty: the server and its pane are gone.
        assert not alive(server), "the job's tmux server outlived the abort"
        assert not alive(pane), "the job's tmux session outlived the abort"
        raw = json.loads((run_dir / "exit.json").read_text())
        assert raw["escaped"] == 0 and raw["leftovers_killed"] >= 1, raw
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
