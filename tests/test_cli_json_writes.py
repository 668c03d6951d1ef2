"""Every command has ``--json``, the write commands too: abort, retry, pause, resume,
priority and inbox init answer with one JSON object on stdout (submit and prune have
their own tests); errors stay on stderr with the same exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import ABORT_FILE, PROMPT_FILE, write_record
from hopper.store.layout import Layout

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def job(layout: Layout, name: str, state: JobState, priority: int = 0) -> JobRecord:
    record = JobRecord(
        id=f"20261126-090000-000-{name}-0001",
        name=name,
        state=state,
        reason=Reason.EXIT_NONZERO if state is JobState.FAILED else None,
        agent="bash",
        host="h",
        inbox_path=f"inbox/team/{name}.prompt.md",
        created_at=NOW,
        priority=priority,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    (run_dir / PROMPT_FILE).write_text("+++\nagent = 'bash'\n+++\necho again\n")
    return record


def answer(result: Any) -> Any:
    assert result.stderr == "" or result.returncode != 0, result.stderr
    return json.loads(result.stdout)


def test_abort_json_names_the_jobs_asked_to_stop_and_those_already_ended(
    layout: Layout, hopper
) -> None:
    queued = job(layout, "waits", JobState.QUEUED)
    done = job(layout, "done", JobState.SUCCEEDED)
    result = hopper("abort", "waits", "done", "--json")
    assert result.returncode == 1  # one had already finished
    marker = layout.run_dir(queued.id) / ABORT_FILE
    assert answer(result) == {
        "requested": [{"id": queued.id, "name": "waits", "marker": str(marker)}],
        "finished": [{"id": done.id, "name": "done", "state": "succeeded"}],
    }
    assert marker.exists()
    assert "already finished (succeeded)" in result.stderr
    ok = hopper("abort", queued.id, "--json")
    assert ok.returncode == 0 and answer(ok)["finished"] == []
    unknown = hopper("abort", "nothing", "--json")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert "no job with id, id prefix or name 'nothing'" in unknown.stderr


def test_retry_json_gives_the_new_prompt_and_the_old_job(layout: Layout, hopper) -> None:
    old = job(layout, "flaky", JobState.FAILED)
    result = hopper("retry", "FLAKY", "--json")
    assert result.returncode == 0, result.stderr
    got = answer(result)
    assert got == {
        "retry_of": old.id,
        "name": "flaky",
        "path": str(layout.inbox / "team" / "flaky.prompt.md"),
        "inbox_path": "inbox/team/flaky.prompt.md",
    }
    assert f"retry_of = {json.dumps(old.id)}" in (layout.root / got["inbox_path"]).read_text()


def test_pause_and_resume_json_say_what_changed(layout: Layout, hopper) -> None:
    marker = layout.root / "PAUSE"
    first = answer(hopper("pause", "--json"))
    assert first == {"paused": True, "group": None, "marker": str(marker), "changed": True}
    assert marker.exists()
    assert answer(hopper("pause", "--json"))["changed"] is False  # already paused
    resumed = answer(hopper("resume", "--json"))
    assert resumed == {"paused": False, "group": None, "marker": str(marker), "changed": True}
    assert not marker.exists()
    assert answer(hopper("resume", "--json"))["changed"] is False
    group = answer(hopper("pause", "team", "--json"))
    assert group["group"] == "team" and group["marker"] == str(layout.inbox / "team" / "PAUSE")
    bad = hopper("pause", "../x", "--json")
    assert (bad.returncode, bad.stdout) == (2, "")


def test_priority_json_names_the_request(layout: Layout, hopper) -> None:
    queued = job(layout, "later", JobState.QUEUED, priority=3)
    result = hopper("priority", "later", "50", "--json")
    assert result.returncode == 0, result.stderr
    got = answer(result)
    assert {k: got[k] for k in ("id", "name", "from", "to")} == {
        "id": queued.id,
        "name": "later",
        "from": 3,
        "to": 50,
    }
    assert got["request"].startswith(str(layout.run_dir(queued.id)))
    job(layout, "over", JobState.SUCCEEDED)
    refused = hopper("priority", "over", "1", "--json")
    assert (refused.returncode, refused.stdout) == (1, "")


def test_inbox_init_json_lists_the_folders(layout: Layout, hopper, config_file: Path) -> None:
    config_file.write_text(
        config_file.read_text() + '\n[routes."team"]\nagent = "bash"\n'
        '[routes."people/{user}"]\nagent = "bash"\n'
    )
    (layout.inbox / "team").mkdir(parents=True)
    result = hopper("inbox", "init", "--json")
    assert result.returncode == 0, result.stderr
    assert answer(result) == {
        "folders": [
            {"path": str(layout.inbox / "people"), "created": True, "route": "people/{user}"},
            {"path": str(layout.inbox / "team"), "created": False, "route": "team"},
        ]
    }
