"""``hopper logs -f --all``: every running job, prefixed, including jobs started later."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

from conftest import bash, drop, hopper_cmd, wait_for
from hopper.store.layout import Layout


class Lines:
    """Collect a child's stdout lines on a thread (so the test can wait on them)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def join(self) -> None:
        self._thread.join(timeout=10)


def test_follow_all_prefixes_and_picks_up_new_jobs(
    layout: Layout, watchers, config_file: Path, hopper
) -> None:
    gate = layout.root / "gate"
    script = f"echo one-$HOPPER_JOB_ID\nwhile [ ! -e {gate} ]; do sleep 0.05; done\necho done"
    drop(layout, "first", bash(script.replace("one-$HOPPER_JOB_ID", "first-says-hi")))
    watchers.start()
    wait_for(lambda: "running" in hopper("status", "--state", "running").stdout, what="running")
    proc = subprocess.Popen(
        hopper_cmd("logs", "-f", "--all", "--root", str(layout.root), "--config", str(config_file)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out = Lines(proc)
        wait_for(lambda: "first | first-says-hi" in out.lines, what="backlog of first")
        drop(layout, "second", bash("echo second-line-1\necho second-line-2"))
        wait_for(lambda: "second | second-line-2" in out.lines, what="second job picked up")
        gate.touch()
        wait_for(lambda: "first | done" in out.lines, what="first job's last line")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    out.join()
    assert proc.returncode in (0, 130)


def test_logs_json_and_usage_errors(layout: Layout, hopper) -> None:
    drop(layout, "j", bash("echo a\nprintf b"))
    assert hopper("run", "--until-idle").returncode == 0
    out = hopper("logs", "j", "--json")
    assert [json.loads(x)["line"] for x in out.stdout.splitlines()] == ["a", "b"]
    assert hopper("logs", "j").stdout == "a\nb"
    assert hopper("logs").returncode == 2
    assert hopper("logs", "j", "--all").returncode == 2
