"""A supervisor whose watcher vanishes mid-handshake (the connection reset, not
closed) never releases its job and records ``started: false``, as for a plain
no; before, it died on the reset with a traceback and recorded nothing."""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path

from conftest import wait_for
from hopper.proc import forkclient, identity, spawn
from hopper.store.jobfile import EXIT_FILE


def test_a_reset_handshake_is_a_no_and_is_recorded(
    server: forkclient.ForkServer, tmp_path: Path
) -> None:
    run_dir, ran = tmp_path / "run", tmp_path / "ran"
    run_dir.mkdir()
    spec = spawn.LaunchSpec(
        argv=["sh", "-c", f"touch {ran}"],
        cwd=str(run_dir),
        env={"PATH": os.environ["PATH"]},
        log=str(run_dir / "job.log"),
        grace=0.5,
    )
    pending = spawn.begin(run_dir, spec, server)
    request = pending._request  # the channel to the forked supervisor
    assert request is not None
    wait_for(lambda: bool(identity.supervisors_of(str(run_dir))), what="the supervisor")
    channel = request.channel
    channel.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    channel.close()  # a reset, as when the watcher is killed with its pid line unread
    exit_json = run_dir / EXIT_FILE
    wait_for(exit_json.exists, what="the supervisor's started=false record")
    assert json.loads(exit_json.read_text())["started"] is False
    wait_for(lambda: not identity.supervisors_of(str(run_dir)), what="the supervisor gone")
    assert not ran.exists()
