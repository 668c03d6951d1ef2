"""``hopper retry`` reads only the prompt hopper filed: a record a job rewrote cannot
make it copy a file from outside the root (issue 27).

A job can write every run directory (``$HOPPER_RUN_DIR/../<id>/job.json``), so a
finished job's ``processed_path`` may name anything. Retry must check it lies
under processed/ and reach it without following a link; else refuse, exit 1,
naming the job, the path and what to do, and write nothing into the inbox.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import bash, drop
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import JOB_FILE, write_record
from hopper.store.layout import Layout
from hopper.store.resubmit import CannotResubmit, resubmit

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB = "20261122-120000-000-victim-0001"
SECRET = b"+++\nagent = 'bash'\n+++\necho the operator's private key\n"


def private_file(tmp_path: Path) -> Path:
    """A 0600 file outside the root that looks like a prompt (so a read would run it)."""
    secret = tmp_path / "private" / "key.prompt.md"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    return secret


def finished(
    layout: Layout, processed_path: str, inbox_path: str = "inbox/victim.prompt.md"
) -> None:
    record = JobRecord(
        id=JOB,
        name="victim",
        state=JobState.FAILED,
        reason=Reason.EXIT_NONZERO,
        agent="bash",
        host="h",
        inbox_path=inbox_path,
        processed_path=processed_path,
        created_at=NOW,
    )
    run_dir = layout.run_dir(JOB)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)


def inbox_files(layout: Layout) -> list[str]:
    return sorted(str(p.relative_to(layout.inbox)) for p in layout.inbox.rglob("*"))


def assert_untouched(secret: Path) -> None:
    assert secret.read_bytes() == SECRET
    assert secret.stat().st_mode & 0o777 == 0o600


def test_a_job_that_rewrites_another_jobs_record_cannot_make_retry_copy_a_file(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    """The attack end to end: job B points finished job A's processed_path at a 0600
    file; the operator's ``hopper retry A`` refuses, and nothing reaches the inbox."""
    secret = private_file(tmp_path)
    drop(layout, "victim", bash("echo first", name="victim"))
    assert hopper("run", "--until-idle").returncode == 0
    (victim,) = [d.name for d in layout.runs.iterdir()]
    tamper = (
        "import json, os, sys\n"
        f"p = os.path.join(os.environ['HOPPER_RUN_DIR'], '..', {victim!r}, 'job.json')\n"
        "r = json.load(open(p)); r['processed_path'] = sys.argv[1]\n"
        "open(p + '.t', 'w').write(json.dumps(r)); os.replace(p + '.t', p)\n"
    )
    (tmp_path / "tamper.py").write_text(tamper)
    drop(layout, "tamper", bash(f"python3 {tmp_path / 'tamper.py'} {secret}"))
    assert hopper("run", "--until-idle").returncode == 0
    record = json.loads((layout.run_dir(victim) / JOB_FILE).read_text())
    assert record["processed_path"] == str(secret)  # the job did rewrite it

    result = hopper("retry", victim)

    assert result.returncode == 1, result.stdout
    assert victim in result.stderr and str(secret) in result.stderr
    assert "does not lie under processed/" in result.stderr
    assert "hint: submit the prompt again by hand" in result.stderr
    assert "Traceback" not in result.stderr
    assert inbox_files(layout) == []
    assert_untouched(secret)


@pytest.mark.parametrize(
    "processed_path",
    [
        "{secret}",  # absolute, outside the root
        "processed/../../private/key.prompt.md",  # relative, climbs out
        "processed/../runs/../../private/key.prompt.md",
        "../private/key.prompt.md",
        "processed/x\0.prompt.md",  # a NUL: not a path the OS takes
    ],
    ids=["absolute", "dotdot", "dotdot-twice", "not-under-processed", "nul"],
)
def test_retry_refuses_a_processed_path_outside_processed(
    layout: Layout, hopper, tmp_path: Path, processed_path: str
) -> None:
    secret = private_file(tmp_path)
    finished(layout, processed_path.format(secret=secret))
    with pytest.raises(CannotResubmit, match=f"job {JOB}'s processed_path .* does not lie"):
        resubmit(layout, JOB)
    result = hopper("retry", JOB)
    assert result.returncode == 1
    assert f"runs/{JOB}/job.json" in result.stderr and "hopper submit FILE" in result.stderr
    assert inbox_files(layout) == []
    assert_untouched(secret)


@pytest.mark.parametrize("link", ["processed", "processed/team"])
def test_retry_never_follows_a_linked_folder_under_processed(
    layout: Layout, hopper, tmp_path: Path, link: str
) -> None:
    """``processed/team`` (or processed/ itself) swapped for a link to a folder holding
    a file of the recorded name: refused, the link named, nothing read."""
    secret = private_file(tmp_path)
    outside = secret.parent
    (outside / "team").mkdir()
    (outside / "team" / "key.prompt.md").write_bytes(SECRET)
    target = outside / "team" if link == "processed/team" else outside
    if link == "processed":
        layout.processed.rmdir()
    (layout.root / link).symlink_to(target)
    finished(layout, "processed/team/key.prompt.md")
    result = hopper("retry", JOB)
    assert result.returncode == 1
    assert f"{layout.root / link}: is a symbolic link (to {target}" in result.stderr
    assert f"job {JOB}'s prompt, processed/team/key.prompt.md, lies below it" in result.stderr
    assert f"a job may have: remove it (rm {layout.root / link})" in result.stderr
    assert inbox_files(layout) == []
    assert_untouched(secret)


def test_retry_never_follows_a_linked_run_directory(layout: Layout, hopper, tmp_path: Path) -> None:
    """Not moved to processed/ yet: the run dir's prompt.md, reached without links."""
    finished(layout, "processed/victim.prompt.md")  # never filed there
    elsewhere = tmp_path / "elsewhere"
    layout.run_dir(JOB).rename(elsewhere)
    (elsewhere / "prompt.md").write_bytes(SECRET)
    layout.run_dir(JOB).symlink_to(elsewhere)
    result = hopper("retry", JOB)
    assert result.returncode == 1
    assert "is a symbolic link" in result.stderr
    assert inbox_files(layout) == []


def test_retry_into_a_linked_inbox_folder_is_refused(
    layout: Layout, hopper, tmp_path: Path
) -> None:
    """The prompt is fine, but its route's inbox folder is now a link: nothing written."""
    finished(layout, "processed/team/victim.prompt.md", inbox_path="inbox/team/victim.prompt.md")
    (layout.processed / "team").mkdir()
    (layout.processed / "team" / "victim.prompt.md").write_text("echo again\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (layout.inbox / "team").symlink_to(outside)
    result = hopper("retry", JOB)
    assert result.returncode == 1
    assert f"{layout.inbox / 'team'}: is a symbolic link (to {outside})" in result.stderr
    assert "rm " in result.stderr
    assert os.listdir(outside) == []


def test_retry_of_a_good_record_still_works(layout: Layout, hopper) -> None:
    finished(layout, "processed/team/victim.prompt.md", inbox_path="inbox/team/victim.prompt.md")
    (layout.processed / "team").mkdir()
    (layout.processed / "team" / "victim.prompt.md").write_text("echo again\n")
    result = hopper("retry", JOB)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == layout.inbox / "team" / "victim.prompt.md"
    assert f'retry_of = "{JOB}"' in Path(result.stdout.strip()).read_text()
