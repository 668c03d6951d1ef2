"""One bad run directory, job or write costs that job, never the watcher's loop.

Each case used to end the watcher (and, under ``Restart=on-failure``, crash
it again at every start): a job that writes its own exit.json; a run
directory the watcher cannot read; any unexpected exception while handling
one job or one prompt. Now each is logged once, with the job or path, and
the loop goes on.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, Watchers, beat_advanced, drop, wait_for
from hopper import reconcile as reconcile_mod
from hopper.config import Config
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.executors.protocol import Ended, Tick
from hopper.executors.supervised import Supervised
from hopper.intake import Intake
from hopper.running import Running
from hopper.store.jobfile import read_events, read_record, write_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def fast_config() -> Config:
    import tomllib

    return Config.model_validate(tomllib.loads(FAST_CONFIG + 'reconcile_interval = "0.5s"\n'))


def records(layout: Layout) -> list[JobRecord]:
    """The readable job records (a planted bad run directory is skipped)."""
    return [read_record(d) for d in sorted(layout.runs.iterdir()) if (d / "job.json").is_file()]


def succeeded(layout: Layout, count: int) -> bool:
    recs = records(layout)
    return len(recs) == count and all(r.state is JobState.SUCCEEDED for r in recs)


# -- live watchers -------------------------------------------------------------------


def test_a_job_that_writes_its_own_exit_json_survives_a_restart(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    gate, log = tmp_path / "gate", tmp_path / "watcher.log"
    script = (
        '+++\nagent = "bash"\n+++\n'
        'echo \'{"bogus": true}\' > "$HOPPER_RUN_DIR/exit.json"\n'
        f"while [ ! -e {gate} ]; do sleep 0.05; done\necho done\n"
    )
    drop(layout, "scribbler", script)
    first = watchers.start(stderr=log)
    wait_for(
        lambda: any((d / "exit.json").exists() for d in layout.runs.iterdir()),
        what="the job's own exit.json",
    )
    (run_dir,) = list(layout.runs.iterdir())
    assert read_record(run_dir).state is JobState.RUNNING
    first.send_signal(signal.SIGKILL)  # its supervisor and job live on
    first.wait()
    second = watchers.start(stderr=log)
    wait_for(lambda: any(e["event"] == "adopted" for e in read_events(run_dir)), what="adopted")
    beat_advanced(layout, 1.5)  # several sweeps read the bogus exit.json
    assert second.poll() is None, log.read_text()
    gate.touch()
    wait_for(lambda: succeeded(layout, 1), what="the job ends on its supervisor's record")
    drop(layout, "next", '+++\nagent = "bash"\n+++\necho next\n')
    wait_for(lambda: succeeded(layout, 2), what="the next prompt runs")
    assert second.poll() is None
    text = log.read_text()
    # Logged once, not every sweep; with the adopted supervisor watched through a
    # pidfd (executors/adopted.py) its exit.json is not even read while it runs.
    assert text.count("not a valid exit record") <= 1, text


def test_an_unreadable_run_directory_costs_only_itself(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    """job.json is a directory: unreadable for root too (IsADirectoryError), at every start."""
    config_file.write_text(config_file.read_text() + 'reconcile_interval = "0.5s"\n')
    bad = layout.runs / "20260101-000000-000-bad-0000"
    (bad / "job.json").mkdir(parents=True)
    log = tmp_path / "watcher.log"
    drop(layout, "good", '+++\nagent = "bash"\n+++\necho good\n')
    proc = watchers.start(stderr=log)
    wait_for(lambda: succeeded(layout, 1) or proc.poll() is not None, what="the good prompt")
    assert proc.poll() is None, log.read_text()
    assert succeeded(layout, 1)
    beat_advanced(layout, 1.5)  # several reconcile passes
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    again = watchers.start(stderr=log)  # and again at the next start
    drop(layout, "good2", '+++\nagent = "bash"\n+++\necho good\n')
    wait_for(lambda: succeeded(layout, 2) or again.poll() is not None, what="the next prompt")
    assert again.poll() is None, log.read_text()
    text = log.read_text()
    mentions = [line for line in text.splitlines() if str(bad) in line]
    assert len(mentions) == 2, text  # once per watcher, not once per pass


# -- in-process: injected faults ---------------------------------------------------------


def running_job(layout: Layout, name: str) -> Running:
    job_id = f"20260101-000000-000-{name}-0000"
    run_dir = layout.runs / job_id
    run_dir.mkdir(parents=True)
    record = JobRecord(
        id=job_id,
        name=name,
        state=JobState.RUNNING,
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=NOW,
    )
    write_record(run_dir, record)
    return Running(record, run_dir)


def test_an_unexpected_error_in_one_job_is_logged_once_and_the_loop_goes_on(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    watcher = Watcher(layout, fast_config(), host="h")
    bad, good = running_job(layout, "bad"), running_job(layout, "good")
    for job in (bad, good):
        watcher.runner.adopt(job.record)  # running here, as after a restart
    polled: list[str] = []

    def poll_one(
        self: Supervised, job: Running, tick: Tick, found: list[Ended], ended: set[str]
    ) -> None:
        polled.append(job.record.name)
        if job.record.name == "bad":
            raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(Supervised, "_poll_one", poll_one)
    caplog.set_level(logging.ERROR)
    for _ in range(3):
        watcher.runner.note_child_exit()  # a SIGCHLD: the local executor looks at its jobs
        watcher.turn()  # never raises
    assert polled.count("good") == 3 and polled.count("bad") == 3
    assert set(watcher.runner.running_ids()) == {bad.record.id, good.record.id}
    lines = [r.getMessage() for r in caplog.records if bad.record.id in r.getMessage()]
    assert len(lines) == 1 and "TypeError" in lines[0], lines


def test_an_unexpected_error_claiming_one_prompt_is_logged_once(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    watcher = Watcher(layout, fast_config(), host="h")
    broken = drop(layout, "broken", "echo broken\n")
    drop(layout, "fine", "echo fine\n")
    real_take = Intake.take

    def take(self: Intake, path: Path, *, behind: bool = False) -> JobRecord | None:
        if path == broken:
            raise RecursionError("maximum recursion depth exceeded")
        return real_take(self, path, behind=behind)

    monkeypatch.setattr(Intake, "take", take)
    old = time.time() - 60
    for path in layout.inbox.iterdir():
        os.utime(path, (old, old))  # settled
    caplog.set_level(logging.ERROR)
    for _ in range(3):
        watcher.claims.next_rescan = 0.0  # a full rescan every turn
        watcher.turn()
    assert [r.name for r in records(layout)] == ["fine"]
    lines = [r.getMessage() for r in caplog.records if str(broken) in r.getMessage()]
    assert len(lines) == 1 and "RecursionError" in lines[0], lines


def test_a_run_directory_that_raises_is_skipped_and_the_pass_goes_on(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PermissionError (as for a directory the watcher may not list) and a bug, per directory."""
    watcher = Watcher(layout, fast_config(), host="h")
    denied = layout.runs / "20260101-000000-000-denied-0000"
    buggy = layout.runs / "20260101-000000-000-buggy-0000"
    for run_dir in (denied, buggy):
        run_dir.mkdir(parents=True)
    claimed = layout.runs / "20260101-000000-000-claimed-0000"  # a claim a crash left half-done
    claimed.mkdir()
    (claimed / "prompt.md").write_text('+++\nagent = "bash"\n+++\necho hi\n')
    real = reconcile_mod.snapshot

    def snapshot(run_dir: Path, *args: object, **kw: object) -> object:
        if run_dir == denied:
            raise PermissionError(13, "Permission denied", str(run_dir))
        if run_dir == buggy:
            raise KeyError("owner")
        return real(run_dir, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reconcile_mod, "snapshot", snapshot)
    caplog.set_level(logging.ERROR)
    for _ in range(3):
        watcher._reconcile()
    assert "20260101-000000-000-claimed-0000" in watcher.queued  # the pass went on
    for run_dir in (denied, buggy):
        lines = [r.getMessage() for r in caplog.records if str(run_dir) in r.getMessage()]
        assert len(lines) == 1, lines
