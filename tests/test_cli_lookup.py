"""Finding jobs by what a person types, and saying what is known when there is no run.

Names and ids match in any letter case; a prompt still in the inbox is "not
claimed yet" (with its path); ``hopper logs`` on a job that never ran says so
and exits 1.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop, hopper_cmd
from hopper.core.prompt import parse
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import LOG_FILE, append_event, write_record
from hopper.store.layout import Layout
from hopper.store.lookup import JobNotClaimed, find_job

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def job(
    layout: Layout, name: str, state: JobState = JobState.SUCCEEDED, **fields: object
) -> JobRecord:
    record = JobRecord(
        id=f"20261122-120000-000-{name.lower()}-0001",
        name=name,
        state=state,
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=NOW,
        **fields,  # type: ignore[arg-type]
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    append_event(run_dir, "claimed", NOW, inbox_path=record.inbox_path)
    return record


def test_events_finds_a_name_in_any_letter_case(layout: Layout, hopper) -> None:
    record = job(layout, "cl-TOOLTEST")
    result = hopper("events", "cl-tooltest", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0])["event"] == "claimed"
    assert find_job(layout, "CL-TOOLTEST").id == record.id
    assert find_job(layout, record.id.upper()).id == record.id  # ids too


def test_exact_case_name_wins_over_a_case_variant(layout: Layout) -> None:
    exact = job(layout, "Deploy")
    other = exact.model_copy(update={"id": "20261122-130000-000-deploy-0002", "name": "DEPLOY"})
    layout.run_dir(other.id).mkdir()
    write_record(layout.run_dir(other.id), other, durable=False)
    assert find_job(layout, "Deploy").id == exact.id
    assert find_job(layout, "deploy").id == other.id  # no exact match: the newest


def test_status_matches_names_and_globs_in_any_case(layout: Layout, hopper) -> None:
    record = job(layout, "cl-TOOLTEST")
    for ref in ("cl-tooltest", "CL-*"):
        result = hopper("status", ref, "--json")
        assert result.returncode == 0, result.stderr
        assert [r["id"] for r in json.loads(result.stdout)] == [record.id], ref
    result = hopper("status", "--name", "cl-tool*", "--json")
    assert [r["id"] for r in json.loads(result.stdout)] == [record.id]


def test_status_of_a_prompt_still_in_the_inbox(layout: Layout, hopper) -> None:
    path = drop(layout, "later", bash("echo hi"), sub="team")
    result = hopper("status", "LATER")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"LATER: not claimed yet: {path}"
    as_json = hopper("status", "later", "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout) == []
    assert f"not claimed yet: {path}" in as_json.stderr


def test_status_of_nothing_at_all_exits_1(layout: Layout, hopper) -> None:
    result = hopper("status", "nowhere")
    assert result.returncode == 1
    assert "no job with id, id prefix or name 'nowhere'" in result.stderr


@pytest.mark.parametrize("command", ["logs", "events", "abort"])
def test_job_commands_on_an_unclaimed_prompt(layout: Layout, hopper, command: str) -> None:
    path = drop(layout, "later", bash("echo hi"))
    result = hopper(command, "later")
    assert result.returncode == 1
    assert f"'later' is not claimed yet: {path} waits in the inbox" in result.stderr
    with pytest.raises(JobNotClaimed):
        find_job(layout, "later")


def test_logs_of_a_job_that_never_ran(layout: Layout, hopper) -> None:
    drop(layout, "broken", "+++\nagent = \n+++\nbody\n")
    assert hopper("run", "--until-idle").returncode == 0
    for extra in ((), ("-f",), ("--json",)):
        result = hopper("logs", "broken", *extra)
        assert result.returncode == 1, extra
        assert result.stdout == ""
        assert "never ran, so it has no output: failed (bad_prompt)" in result.stderr
        assert "front matter is not valid TOML" in result.stderr


def test_logs_of_a_queued_job_says_it_has_not_started(layout: Layout, hopper) -> None:
    record = job(layout, "waiting", JobState.QUEUED)
    result = hopper("logs", "waiting")
    assert result.returncode == 1
    assert "is queued and has not started yet" in result.stderr
    assert f"hopper logs -f {record.id}" in result.stderr


def test_logs_of_a_silent_job_that_ran_is_empty_and_ok(layout: Layout, hopper) -> None:
    record = job(layout, "quiet", started_at=NOW, reason=Reason.COMPLETED)
    (layout.run_dir(record.id) / LOG_FILE).write_bytes(b"")
    result = hopper("logs", "quiet")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_submit_session(layout: Layout, hopper, tmp_path: Path) -> None:
    prompt = tmp_path / "task.prompt.md"
    prompt.write_text("+++\nagent = 'claude'\n+++\nContinue.\n")
    result = hopper("submit", "--json", str(prompt), "--session", "auth-refactor")
    assert result.returncode == 0, result.stderr
    spec = parse(Path(json.loads(result.stdout)["path"]).read_bytes())
    assert spec.options.session == "auth-refactor" and spec.options.agent == "claude"


def test_submit_refuses_a_bad_session_name(layout: Layout, hopper) -> None:
    result = hopper("submit", "--session", "../x", input="hi\n")
    assert result.returncode == 2
    assert "--session '../x'" in result.stderr
    assert list(layout.inbox.iterdir()) == []


def test_wait_waits_for_a_prompt_to_be_claimed(layout: Layout, watchers, config_file: Path) -> None:
    """``hopper submit x && hopper wait x``: the wait must not lose the race to the claim."""
    drop(layout, "soon", bash("echo done"))
    waiter = subprocess.Popen(
        hopper_cmd(
            "wait",
            "soon",
            "--timeout",
            "60",
            "--root",
            str(layout.root),
            "--config",
            str(config_file),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        watchers.start()
        out, err = waiter.communicate(timeout=90)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 0, err
    assert "succeeded" in out


def test_wait_on_an_unclaimed_prompt_times_out(layout: Layout, hopper) -> None:
    drop(layout, "never", bash("echo hi"))
    result = hopper("wait", "never", "--timeout", "0.5")
    assert result.returncode == 3  # a timeout, not a failed job
    assert "timed out waiting: 'never' is not claimed yet" in result.stderr


def test_a_prompt_mid_claim_is_being_claimed(layout: Layout) -> None:
    """Renamed into its run dir, job.json not written yet: not 'no job'."""
    run_dir = layout.run_dir("20261122-120000-000-soon-0001")
    run_dir.mkdir()
    (run_dir / "claim.json").write_text(json.dumps({"inbox_path": "inbox/t/Soon.prompt.md"}))
    (run_dir / "prompt.md").write_text("echo hi\n")
    with pytest.raises(JobNotClaimed, match="'soon' is being claimed"):
        find_job(layout, "soon")


def test_status_shows_a_retry_waiting_beside_the_earlier_run(layout: Layout, hopper) -> None:
    record = job(layout, "greet", reason=Reason.COMPLETED)
    (layout.run_dir(record.id) / "prompt.md").write_text("echo hi\n")
    retried = hopper("retry", "greet")
    assert retried.returncode == 0, retried.stderr
    result = hopper("status", "greet")
    assert result.returncode == 0
    first, *rest = result.stdout.splitlines()
    assert first == f"greet: not claimed yet: {retried.stdout.strip()}"
    assert any(record.id in line for line in rest)
