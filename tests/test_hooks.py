"""Completion hooks: argv templates and a webhook, after finalize, never changing state."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar, cast

import pytest

from conftest import bash, drop
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.hooks import HookSet, calls_for
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout


def record(state: JobState, reason: Reason | None) -> JobRecord:
    return JobRecord(
        id="20261122-120000-000-x-abcd",
        name="x",
        state=state,
        reason=reason,
        agent="bash",
        host="h",
        inbox_path="inbox/x.prompt.md",
        created_at=datetime(2026, 11, 22, tzinfo=UTC),
    )


def test_calls_for_success_failure_and_templates(tmp_path: Path) -> None:
    hooks = HookSet(
        on_success=["echo", "ok ${job.id}"],
        on_failure=["echo", "bad ${job.reason}"],
        on_finish=["echo", "${job.state}"],
        webhook="http://127.0.0.1:1/x",
    )
    ok = calls_for(record(JobState.SUCCEEDED, Reason.COMPLETED), tmp_path, hooks)
    assert [(c.kind, c.argv) for c in ok] == [
        ("on_success", ["echo", "ok 20261122-120000-000-x-abcd"]),
        ("on_finish", ["echo", "succeeded"]),
        ("webhook", None),
    ]
    bad = calls_for(record(JobState.FAILED, Reason.EXIT_NONZERO), tmp_path, hooks)
    assert (bad[0].kind, bad[0].argv) == ("on_failure", ["echo", "bad exit_nonzero"])
    assert calls_for(record(JobState.ABORTED, Reason.ABORTED), tmp_path, HookSet()) == []


class Sink(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        Sink.bodies.append(self.rfile.read(length))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    Sink.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_hooks_run_after_finalize(
    layout: Layout, config_file: Path, hopper, tmp_path: Path, webhook: str
) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    config_file.write_text(
        config_file.read_text()
        + f"""
[hooks]
on_success = ["touch", "{out}/ok-${{job.name}}"]
on_failure = ["touch", "{out}/failed-${{job.name}}-${{job.reason}}"]
webhook = "{webhook}"
timeout = "5s"
"""
    )
    drop(layout, "good", bash("true"))
    drop(layout, "bad", bash("exit 2"))
    own = f'+++\nagent = "bash"\non_success = ["touch", "{out}/own-${{job.name}}"]\n+++\ntrue\n'
    drop(layout, "custom", own)
    assert hopper("run", "--until-idle").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "failed-bad-exit_nonzero",
        "ok-good",
        "own-custom",
    ]
    posted = sorted(json.loads(b)["job"]["name"] for b in Sink.bodies)
    assert posted == ["bad", "custom", "good"]
    states = {json.loads(b)["job"]["name"]: json.loads(b)["outcome"]["state"] for b in Sink.bodies}
    assert states["bad"] == "failed"
    for run_dir in layout.runs.iterdir():
        assert "webhook_delivered" in [e["event"] for e in read_events(run_dir)]


def test_failing_and_slow_hooks_never_change_the_job(
    layout: Layout, config_file: Path, hopper
) -> None:
    config_file.write_text(
        config_file.read_text()
        + """
[hooks]
on_success = ["false"]
on_finish = ["sleep", "30"]
timeout = "0.5s"
"""
    )
    drop(layout, "fine", bash("echo fine"))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    failed = {e["hook"]: e["detail"] for e in read_events(run_dir) if e["event"] == "hook_failed"}
    assert failed["on_success"].startswith("RuntimeError: exited 1")
    assert "did not finish within 0.5s" in failed["on_finish"]
    assert "hook on_success failed" in result.stderr


def test_hooks_in_front_matter_must_be_argv_lists(layout: Layout, hopper) -> None:
    drop(layout, "shelly", '+++\nagent = "bash"\non_success = "rm -rf /"\n+++\ntrue\n')
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    record = read_record(run_dir)
    assert record.reason is Reason.BAD_PROMPT
    assert "on_success" in (record.detail or "")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def test_a_hooks_setsid_child_does_not_outlive_its_timeout(
    layout: Layout, config_file: Path, hopper, tmp_path: Path
) -> None:
    """Timeout, then the whole tree: a child that left the hook's session included."""
    pids = tmp_path / "pids"
    script = f"setsid -f bash -c 'echo $$ >> {pids}; exec sleep 1000'; sleep 1000"
    config_file.write_text(
        config_file.read_text() + f'[hooks]\non_finish = ["bash", "-c", "{script}"]\n'
        'timeout = "1s"\n'
    )
    drop(layout, "fine", bash("true"))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    failed = [e for e in read_events(run_dir) if e["event"] == "hook_failed"]
    assert failed and "did not finish within 1s" in failed[0]["detail"]
    (escapee,) = [int(p) for p in pids.read_text().split()]
    assert not _alive(escapee), "the hook's setsid child outlived the hook's timeout"


def test_a_hooks_leftover_is_ended_when_the_hook_exits(
    layout: Layout, config_file: Path, hopper, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = f"setsid -f bash -c 'echo $$ >> {pids}; exec sleep 1000'"
    config_file.write_text(
        config_file.read_text() + f'[hooks]\non_success = ["bash", "-c", "{script}"]\n'
    )
    drop(layout, "fine", bash("true"))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    assert [e["hook"] for e in read_events(run_dir) if e["event"] == "hook_ok"] == ["on_success"]
    (leftover,) = [int(p) for p in pids.read_text().split()]
    assert not _alive(leftover), "the hook's leftover outlived the hook (and the watcher)"


def test_hooks_log_is_capped_like_the_jobs_output(
    layout: Layout, config_file: Path, hopper
) -> None:
    """output_max = 1K: a hook writing 50 MB leaves hooks.log at about 1K."""
    config_file.write_text(
        config_file.read_text()
        + '[hooks]\non_finish = ["bash", "-c", "head -c 50M /dev/zero; sleep 1000"]\n'
        'timeout = "60s"\n'
    )
    drop(layout, "quiet", bash("true", output_max="1K"))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    size = (run_dir / "hooks.log").stat().st_size
    assert 1024 <= size < 1024 + 200, size
    failed = [e for e in read_events(run_dir) if e["event"] == "hook_failed"]
    assert failed and "wrote more than 1024 bytes" in failed[0]["detail"]
    assert read_record(run_dir).state is JobState.SUCCEEDED


def test_hooks_log_symlink_is_not_written_through(
    layout: Layout, config_file: Path, hopper, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("")
    config_file.write_text(config_file.read_text() + '[hooks]\non_finish = ["echo", "hello"]\n')
    drop(layout, "link", bash(f'ln -s {outside} "$HOPPER_RUN_DIR/hooks.log"'))
    assert hopper("run", "--until-idle").returncode == 0
    (run_dir,) = list(layout.runs.iterdir())
    assert outside.read_text() == ""
    assert (run_dir / "hooks.log").read_text() == "hello\n"


def test_no_hooks_configured_expands_no_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16: a job's end without hooks does no hook work (templates, job values)."""
    from hopper.clock import SystemClock
    from hopper.config import Config
    from hopper.endings import Endings
    from hopper.hooks import HookRunner
    from hopper.intake import Intake

    def expanded(*_: object) -> list[object]:
        raise AssertionError("calls_for ran with no hooks configured")

    monkeypatch.setattr("hopper.endings.calls_for", expanded)
    runner = HookRunner(SystemClock())
    endings = Endings(Config(), cast(Intake, None), SystemClock(), runner, {})
    endings.run_hooks(record(JobState.SUCCEEDED, Reason.COMPLETED), tmp_path)
    assert runner.pending() == 0
