"""The claim's marker is the ``claimed`` event, events.jsonl's first line, written
before the rename (no claim.json: one new file fewer per job); run directories of
an older hopper, with a claim.json, read as before."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.states import JobState
from hopper.store.claim import claim, read_claim, remove_empty_claim
from hopper.store.jobfile import read_events
from hopper.store.layout import Layout
from inprocess import in_process, submit
from opens import opened_by_name

NOW = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)


def test_a_claim_writes_its_marker_as_the_first_event_and_no_claim_json(
    layout: Layout,
) -> None:
    prompt = layout.inbox / "team" / "fix it.prompt.md"
    prompt.parent.mkdir()
    prompt.write_text("echo hi\n")
    claimed = claim(layout, prompt, NOW, "h1", "h1:42:1.5")
    assert claimed is not None
    assert sorted(p.name for p in claimed.run_dir.iterdir()) == ["events.jsonl", "prompt.md"]
    assert read_events(claimed.run_dir) == [
        {
            "ts": NOW.isoformat(),
            "event": "claimed",
            "inbox_path": "inbox/team/fix it.prompt.md",
            "host": "h1",
            "owner": "h1:42:1.5",
        }
    ]
    marker = read_claim(claimed.run_dir)
    assert marker is not None
    assert marker["inbox_path"] == "inbox/team/fix it.prompt.md"
    assert marker["owner"] == "h1:42:1.5"
    assert marker["claimed_at"] == NOW.isoformat()


def test_a_lost_race_leaves_no_run_directory(layout: Layout) -> None:
    assert claim(layout, layout.inbox / "gone.prompt.md", NOW, "h1") is None
    assert list(layout.runs.iterdir()) == []


def test_an_older_hoppers_claim_json_is_read_first(tmp_path: Path) -> None:
    (tmp_path / "claim.json").write_text(
        json.dumps({"inbox_path": "inbox/a.prompt.md", "claimed_at": "x", "owner": "o"})
    )
    assert read_claim(tmp_path) == {
        "inbox_path": "inbox/a.prompt.md",
        "claimed_at": "x",
        "owner": "o",
    }


def test_no_marker_when_the_first_event_is_cut_or_another(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"ts": "t", "event": "claimed", "inbox_path": "inbox/a')  # cut
    assert read_claim(tmp_path) is None
    events.write_text('{"ts": "t", "event": "queued"}\n')
    assert read_claim(tmp_path) is None
    events.unlink()
    events.symlink_to(tmp_path / "elsewhere")
    assert read_claim(tmp_path) is None


def test_a_non_utf8_name_is_flagged_in_the_marker(layout: Layout) -> None:
    prompt = layout.inbox / "caf\udce9.prompt.md"
    prompt.write_text("echo hi\n")
    claimed = claim(layout, prompt, NOW, "h1")
    assert claimed is not None
    marker = read_claim(claimed.run_dir)
    assert marker is not None
    assert marker["inbox_path"] == "inbox/caf\\xe9.prompt.md"
    assert marker["name_not_utf8"] == "true"


def test_an_empty_claim_is_removed_with_its_marker_and_nothing_else(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text('{"event": "claimed"}\n')
    assert remove_empty_claim(run)
    assert not run.exists()
    run.mkdir()
    (run / "events.jsonl").write_text('{"event": "claimed"}\n')
    (run / "prompt.md").write_text("x")
    assert not remove_empty_claim(run)
    assert sorted(p.name for p in run.iterdir()) == ["events.jsonl", "prompt.md"]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_claim_and_its_admission_open_the_run_directory_once(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim opens the new run directory (O_NOFOLLOW) once, right after its mkdir;
    the claimed event, admission.json and the queued record go through that
    descriptor, which Intake.take closes. A claim that loses the race closes it too."""
    watcher, _, clock = in_process(layout)
    prompt = submit(layout, clock, "job", '+++\nagent = "bash"\n+++\necho hi\n')
    before = _fds()
    opened = opened_by_name(monkeypatch)
    record = watcher.intake.take(prompt)
    monkeypatch.undo()
    assert record is not None and record.state is JobState.QUEUED
    run_dir = layout.run_dir(record.id)
    assert opened.count(str(run_dir)) == 1
    assert [e["event"] for e in read_events(run_dir)] == ["claimed", "queued"]
    assert (run_dir / "admission.json").is_file()
    assert _fds() == before
    gone = layout.inbox / "gone.prompt.md"
    assert claim(layout, gone, NOW, "h1", "h1:42:1.5") is None  # nothing to move
    assert _fds() == before
