"""Exit codes a script can branch on, through the commands themselves.

``hopper wait`` and ``hopper logs -f ID`` exit with the job's outcome (0
succeeded, 1 failed or aborted); a ``--timeout`` that runs out is 3, never
the same as a failed job; usage errors are 2. README.md's table lists every
code cli/common.py defines.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop, wait_for
from hopper.cli import common
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import LOG_FILE, write_record
from hopper.store.layout import Layout

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)


def plant(layout: Layout, name: str, state: JobState, reason: Reason | None = None) -> str:
    """A job.json (and a job.log) as a watcher leaves them; no watcher runs."""
    record = JobRecord(
        id=f"20261126-060000-000-{name}-0001",
        name=name,
        state=state,
        reason=reason,
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=NOW,
        started_at=NOW,
        finished_at=NOW if reason else None,
        detail="aborted by hopper abort" if reason is Reason.ABORTED else None,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    (run_dir / LOG_FILE).write_text(f"{name} says hi\n")
    return record.id


def test_wait_and_follow_exit_with_the_outcome_of_real_jobs(layout: Layout, watchers, hopper):
    drop(layout, "good", bash("echo good-out\nsleep 0.5"))
    drop(layout, "bad", bash("echo bad-out\nsleep 0.5\nexit 3"))
    watchers.start()
    wait_for(lambda: "bad" in hopper("status", "--json").stdout, what="both claimed", timeout=60)
    wait_for(lambda: "good" in hopper("status", "--json").stdout, what="both claimed", timeout=60)

    good = hopper("logs", "-f", "good")
    assert (good.returncode, good.stdout) == (0, "good-out\n"), good.stderr
    bad = hopper("logs", "-f", "bad")
    assert (bad.returncode, bad.stdout) == (1, "bad-out\n")
    assert "(bad) failed (exit_nonzero)" in bad.stderr
    bad_json = hopper("logs", "-f", "bad", "--json")
    assert bad_json.returncode == 1
    assert '"line": "bad-out"' in bad_json.stdout

    assert hopper("wait", "good").returncode == 0
    assert hopper("wait", "bad").returncode == 1
    assert hopper("wait", "good", "bad").returncode == 1


def test_an_aborted_job_is_not_a_success(layout: Layout, hopper) -> None:
    plant(layout, "stopped", JobState.ABORTED, Reason.ABORTED)
    followed = hopper("logs", "-f", "stopped")
    assert (followed.returncode, followed.stdout) == (1, "stopped says hi\n")
    assert "(stopped) aborted (aborted): aborted by hopper abort" in followed.stderr
    assert hopper("wait", "stopped").returncode == 1
    assert hopper("logs", "stopped").returncode == 0  # printing the log worked


def test_a_timeout_is_its_own_exit_code(layout: Layout, hopper) -> None:
    job_id = plant(layout, "forever", JobState.RUNNING)
    waited = hopper("wait", "forever", "--timeout", "0.3")
    assert waited.returncode == common.EXIT_TIMEOUT == 3
    assert "timed out waiting: 0.3s passed" in waited.stderr
    assert hopper("wait", "--all", "--timeout", "0.3").returncode == 3
    followed = hopper("logs", "-f", "forever", "--timeout", "0.3")
    assert (followed.returncode, followed.stdout) == (3, "forever says hi\n")
    assert f"timed out after 0.3s following job {job_id} (forever)" in followed.stderr
    assert hopper("logs", "-f", "forever", "--timeout", "0.3", "--json").returncode == 3
    drop(layout, "unclaimed", bash("echo never"))
    assert hopper("wait", "unclaimed", "--timeout", "0.3").returncode == 3


@pytest.mark.parametrize(
    "args",
    [
        ("logs", "forever", "--timeout", "1"),  # --timeout without -f
        ("logs", "-f", "--all", "--timeout", "1"),
        ("wait",),
        ("wait", "forever", "--timeout", "soon"),
        ("no-such-command",),
    ],
)
def test_usage_errors_exit_2(layout: Layout, hopper, args: tuple[str, ...]) -> None:
    plant(layout, "forever", JobState.RUNNING)
    result = hopper(*args)
    assert result.returncode == common.EXIT_USAGE == 2, result.stderr
    assert result.stderr


def test_readme_lists_every_exit_code_the_cli_defines() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| `(\d+)` \|", section, re.M)}
    defined = {v for k, v in vars(common).items() if k.startswith("EXIT_")}
    assert documented == defined


def test_wait_looks_again_for_a_prompt_found_nowhere_while_it_is_claimed(
    layout: Layout,
) -> None:
    """The claim's race: one look misses the new job.json, the next sees the prompt
    no longer claiming; ``hopper wait`` must not call the job unknown (exit 1)."""
    from hopper.cli.wait import claimed_id
    from hopper.errors import JobNotFound
    from hopper.store.lookup import JobNotClaimed

    job_id = plant(layout, "soon", JobState.QUEUED)
    answers: list[Exception | None] = [JobNotClaimed("waits"), JobNotFound("nowhere"), None]

    def find(_: Layout, ref: str) -> JobRecord:
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return JobRecord.model_validate_json((layout.run_dir(job_id) / "job.json").read_text())

    assert claimed_id(layout, "soon", None, find=find, sleep=lambda _: None) == job_id
    answers[:] = [JobNotFound("nowhere"), None]
    with pytest.raises(JobNotFound):  # never seen waiting: unknown at once, no second look
        claimed_id(layout, "typo", None, find=find, sleep=lambda _: None)
