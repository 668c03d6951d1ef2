"""``hopper retry``: a finished job's prompt runs again as a new job that records ``retry_of``."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop
from hopper.core.prompt import BadPrompt, parse
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.errors import JobNotFound
from hopper.store.jobfile import PROMPT_FILE, write_record
from hopper.store.layout import Layout
from hopper.store.resubmit import CannotResubmit, JobStillActive, mark_retry, resubmit

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def records(layout: Layout) -> list[dict[str, object]]:
    return [json.loads((d / "job.json").read_text()) for d in sorted(layout.runs.iterdir())]


def test_retry_by_name_reruns_a_finished_job(layout: Layout, hopper, tmp_path: Path) -> None:
    count = tmp_path / "count"
    drop(layout, "greet", bash(f"echo hello\necho ran >> {count}", name="cl-TOOLTEST"), sub="team")
    assert hopper("run", "--until-idle").returncode == 0
    (first,) = records(layout)
    assert first["state"] == "succeeded" and first["retry_of"] is None

    result = hopper("retry", "cl-tooltest")  # any letter case finds the name
    assert result.returncode == 0, result.stderr
    new_prompt = Path(result.stdout.strip())
    assert new_prompt.parent == layout.inbox / "team"  # same route as the original
    assert new_prompt.name == "greet.prompt.md"

    assert hopper("run", "--until-idle").returncode == 0
    old, new = records(layout)
    assert old["id"] == first["id"]
    assert new["retry_of"] == first["id"]
    assert new["name"] == "cl-TOOLTEST" and new["state"] == "succeeded"
    assert new["group"] == "team"
    assert count.read_text() == "ran\nran\n"
    status = json.loads(hopper("status", new["id"], "--json").stdout)
    assert status[0]["retry_of"] == first["id"]


def finished(layout: Layout, name: str, state: JobState, prompt: str | None) -> JobRecord:
    record = JobRecord(
        id=f"20261122-120000-000-{name}-0001",
        name=name,
        state=state,
        reason=Reason.EXIT_NONZERO if state is JobState.FAILED else None,
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=NOW,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    if prompt is not None:
        (run_dir / PROMPT_FILE).write_text(prompt)
    return record


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING])
def test_retry_refuses_an_active_job(layout: Layout, hopper, state: JobState) -> None:
    record = finished(layout, "busy", state, "echo hi\n")
    with pytest.raises(JobStillActive, match=f"is {state}: only a finished job"):
        resubmit(layout, "busy")
    result = hopper("retry", record.id)
    assert result.returncode == 1
    assert f"hopper wait {record.id}" in result.stderr
    assert list(layout.inbox.iterdir()) == []


def test_retry_unknown_job_exits_1(layout: Layout, hopper) -> None:
    with pytest.raises(JobNotFound):
        resubmit(layout, "nothing-here")
    result = hopper("retry", "nothing-here")
    assert result.returncode == 1
    assert "no job with id, id prefix or name 'nothing-here'" in result.stderr


def test_retry_takes_the_prompt_from_the_run_dir_before_finalize(layout: Layout) -> None:
    """Terminal record written, prompt not yet moved to processed/: the run dir's copy is used."""
    record = finished(layout, "half", JobState.FAILED, "+++\nagent = 'bash'\n+++\necho again\n")
    path = resubmit(layout, "HALF")
    spec = parse(path.read_bytes())
    assert spec.options.retry_of == record.id and spec.body == "echo again\n"
    assert not list(layout.inbox.glob(".*"))  # no temporary left behind


def test_retry_without_a_prompt_says_so(layout: Layout, hopper) -> None:
    finished(layout, "gone", JobState.FAILED, None)
    with pytest.raises(CannotResubmit, match="has no prompt left to resubmit"):
        resubmit(layout, "gone")
    assert hopper("retry", "gone").returncode == 1


def test_retry_never_follows_a_symlinked_prompt(layout: Layout, tmp_path: Path) -> None:
    record = finished(layout, "linked", JobState.FAILED, None)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    os.symlink(secret, layout.run_dir(record.id) / PROMPT_FILE)
    with pytest.raises(CannotResubmit, match="cannot read the job's prompt"):
        resubmit(layout, "linked")
    assert list(layout.inbox.iterdir()) == []


def test_retry_refuses_a_prompt_over_the_size_cap(layout: Layout) -> None:
    finished(layout, "big", JobState.FAILED, "x" * 100)
    with pytest.raises(CannotResubmit, match="over the limit of 50 bytes"):
        resubmit(layout, "big", max_bytes=50)


def test_retry_refuses_bad_front_matter_with_the_fix(layout: Layout) -> None:
    finished(layout, "bad", JobState.FAILED, "+++\nagent = \n+++\nbody\n")
    with pytest.raises(CannotResubmit, match="not valid TOML") as info:
        resubmit(layout, "bad")
    assert "hopper submit FILE" in str(info.value)


def test_retry_keeps_a_second_retry_apart(layout: Layout) -> None:
    """Two retries of one job: two prompts, neither overwrites the other."""
    finished(layout, "twice", JobState.FAILED, "echo x\n")
    first, second = resubmit(layout, "twice"), resubmit(layout, "twice")
    assert first != second and first.exists() and second.exists()


def test_mark_retry_adds_front_matter_to_a_plain_prompt() -> None:
    text = mark_retry("Fix the tests.\n", "20261122-1-a")
    assert text == '+++\nretry_of = "20261122-1-a"\n+++\nFix the tests.\n'
    assert parse(text.encode()).body == "Fix the tests.\n"


def test_mark_retry_keeps_comments_and_tables() -> None:
    text = "+++\n# why\nagent = 'bash'\n[env]\nA = '1'\n+++\necho $A\n"
    out = mark_retry(text, "job-1")
    assert "# why" in out
    spec = parse(out.encode())
    assert spec.options.retry_of == "job-1" and spec.options.env == {"A": "1"}


def test_mark_retry_replaces_an_older_retry_of() -> None:
    out = mark_retry(mark_retry("body\n", "job-1"), "job-2")
    assert out.count("retry_of") == 1
    assert parse(out.encode()).options.retry_of == "job-2"


def test_mark_retry_rejects_unclosed_front_matter() -> None:
    with pytest.raises(BadPrompt, match="never closed"):
        mark_retry("+++\nagent = 'bash'\n", "job-1")


def test_retry_of_in_front_matter_must_look_like_an_id() -> None:
    with pytest.raises(BadPrompt, match="'retry_of'"):
        parse(b'+++\nretry_of = "../x"\n+++\nbody\n')
