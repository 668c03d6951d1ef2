"""Front matter ``env`` values stay with their job (issue 27).

Every job runs as the watcher's user, so hopper keeps a job's values only
while the job can still need them: while it is queued or running, automatic
retries included. When it ends they are withheld from every file hopper
keeps (admission.json, prompt.md, the processed copy, 0600). A later job
that greps the whole root for them finds nothing; ``hopper retry`` must be
given them again.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from conftest import drop
from hopper.agents.bash import SCRIPT_FILE
from hopper.agents.drive import SPEC_FILE
from hopper.agents.driven import PROMPT_BODY_FILE
from hopper.core.record import JobRecord
from hopper.core.redaction import WITHHELD
from hopper.core.states import JobState, Reason
from hopper.store.admission import ADMISSION_FILE
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.resubmit import CannotResubmit, resubmit
from hopper.store.withhold import DERIVED

Hopper = Callable[..., CompletedProcess[str]]
SECRET = "s3cr3t-Value-7f0e9d-withheld"


def record_of(layout: Layout, name: str) -> dict[str, object]:
    for run_dir in sorted(layout.runs.iterdir()):
        record: dict[str, object] = json.loads((run_dir / "job.json").read_text())
        if record["name"] == name:
            return record
    raise AssertionError(f"no job named {name}")


def files_holding(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` holding ``needle``, whatever its mode or name."""
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def secret_job(seen: Path, marker: Path | None = None, retries: int = 0) -> str:
    """A bash job that records the value it got; with ``marker``, its first attempt fails."""
    fail_once = f"[ -e {marker} ] || {{ touch {marker}; exit 3; }}\n" if marker else ""
    return (
        f'+++\nagent = "bash"\nretries = {retries}\n'
        f'env = {{ API_TOKEN = "{SECRET}", MODE = "fast" }}  # the token\n+++\n'
        f'printf "%s %s\\n" "$API_TOKEN" "$MODE" >> {seen}\n{fail_once}'
    )


def looker(needle: Path, hits: Path) -> str:
    """A bash job that greps the whole root, through its own run directory, for the value
    (read from a file outside the root, so its own prompt does not hold it)."""
    return (
        '+++\nagent = "bash"\n+++\n'
        f'grep -rlF -f {needle} "$HOPPER_RUN_DIR/.." "$HOPPER_RUN_DIR/../.." > {hits}\n'
        f'echo "grep exit $?" >> {hits}\n'
    )


def assert_withheld(layout: Layout, name: str) -> None:
    """The job's values are in no file under the root; its copies are 0600 and say so."""
    record = record_of(layout, name)
    assert files_holding(layout.root, SECRET) == []
    processed = layout.root / str(record["processed_path"])
    assert stat.S_IMODE(processed.stat().st_mode) == 0o600
    text = processed.read_text()
    assert f'API_TOKEN = "{WITHHELD}"' in text and f'MODE = "{WITHHELD}"' in text
    admission = json.loads((layout.run_dir(str(record["id"])) / ADMISSION_FILE).read_text())
    assert admission["options"]["env"] == {"API_TOKEN": WITHHELD, "MODE": WITHHELD}


def test_a_later_job_that_greps_the_root_finds_no_earlier_secret(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    seen, needle, hits = tmp_path / "seen", tmp_path / "needle", tmp_path / "hits"
    needle.write_text(SECRET)
    drop(layout, "owner", secret_job(seen, tmp_path / "failed-once", retries=1))
    assert hopper("run", "--until-idle").returncode == 0
    owner = record_of(layout, "owner")
    assert (owner["state"], owner["attempt"]) == ("succeeded", 2), owner["detail"]
    # the owner got its value on both attempts, the automatic retry included
    assert seen.read_text() == f"{SECRET} fast\n" * 2

    drop(layout, "looker", looker(needle, hits))
    assert hopper("run", "--until-idle").returncode == 0
    assert record_of(layout, "looker")["state"] == "succeeded"
    assert hits.read_text() == "grep exit 1\n"  # nothing found, nothing unreadable
    assert_withheld(layout, "owner")


def test_values_stay_while_queued_across_a_watcher_restart(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    drop(layout, "owner", secret_job(seen))
    crashed = hopper("run", "--until-idle", env={"HOPPER_CRASH_AT": "claim.after_record"})
    assert crashed.returncode != 0
    (run_dir,) = layout.runs.iterdir()
    assert json.loads((run_dir / "job.json").read_text())["state"] == "queued"
    # kept while the job can run; the claimed copy private to the watcher's user
    assert SECRET in (run_dir / ADMISSION_FILE).read_text()
    assert stat.S_IMODE((run_dir / "prompt.md").stat().st_mode) == 0o600
    assert hopper("run", "--until-idle").returncode == 0
    assert seen.read_text() == f"{SECRET} fast\n"
    assert record_of(layout, "owner")["state"] == "succeeded"
    assert_withheld(layout, "owner")


def test_a_crash_before_the_prompt_moved_is_withheld_by_recovery(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    drop(layout, "owner", secret_job(tmp_path / "seen"))
    crashed = hopper("run", "--until-idle", env={"HOPPER_CRASH_AT": "finalize.after_record"})
    assert crashed.returncode != 0
    (run_dir,) = layout.runs.iterdir()
    assert json.loads((run_dir / "job.json").read_text())["state"] == "succeeded"
    assert hopper("run", "--until-idle").returncode == 0
    assert not (run_dir / "prompt.md").exists()
    assert_withheld(layout, "owner")


def test_a_prompt_refused_at_claim_keeps_no_value(layout: Layout, hopper: Hopper) -> None:
    text = f'+++\nagent = "bash"\nenv = {{ API_TOKEN = "{SECRET}" }}\nno_such_key = 1\n+++\necho\n'
    drop(layout, "refused", text)
    assert hopper("run", "--until-idle").returncode == 0
    record = record_of(layout, "refused")
    assert (record["state"], record["reason"]) == ("failed", "bad_prompt")
    assert files_holding(layout.root, SECRET) == []
    processed = layout.root / str(record["processed_path"])
    assert stat.S_IMODE(processed.stat().st_mode) == 0o600
    assert "no_such_key = 1" in processed.read_text()  # the rest is kept to fix it by


def test_retry_of_a_withheld_job_asks_for_the_values_again(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    drop(layout, "owner", secret_job(seen))
    assert hopper("run", "--until-idle").returncode == 0
    owner_id = str(record_of(layout, "owner")["id"])

    refused = hopper("retry", owner_id)
    assert refused.returncode == 1
    assert "env values API_TOKEN, MODE were withheld when it ended" in refused.stderr
    assert f"hopper retry {owner_id} --env API_TOKEN --env MODE" in refused.stderr
    assert not list(layout.inbox.glob("*.prompt.md"))  # nothing runs with the placeholder

    partly = hopper("retry", owner_id, "--env", "API_TOKEN", env={"API_TOKEN": "new-token"})
    assert partly.returncode == 1 and "env values MODE were withheld" in partly.stderr

    unset = hopper("retry", owner_id, "--env", "NOT_SET_ANYWHERE")
    assert unset.returncode == 2 and "NOT_SET_ANYWHERE: not set in this environment" in (
        unset.stderr
    )

    again = hopper(
        "retry",
        owner_id,
        "--env",
        "API_TOKEN",
        "--env",
        "MODE",
        env={"API_TOKEN": "new-token", "MODE": "slow"},
    )
    assert again.returncode == 0, again.stderr
    assert "new-token" not in again.stdout + again.stderr  # never echoed
    assert hopper("run", "--until-idle").returncode == 0
    assert seen.read_text() == f"{SECRET} fast\nnew-token slow\n"
    retried = [
        json.loads((d / "job.json").read_text())
        for d in layout.runs.iterdir()
        if d.name != owner_id
    ]
    assert [(r["retry_of"], r["state"]) for r in retried] == [(owner_id, "succeeded")]
    assert files_holding(layout.root, "new-token") == []


def test_retry_refuses_a_prompt_whose_text_held_a_value(
    layout: Layout, hopper: Hopper, tmp_path: Path
) -> None:
    # (a no-op that names the value: what a job prints is the job's, in job.log)
    text = f'+++\nagent = "bash"\nenv = {{ API_TOKEN = "{SECRET}" }}\n+++\n: {SECRET}\n'
    drop(layout, "owner", text)
    assert hopper("run", "--until-idle").returncode == 0
    assert files_holding(layout.root, SECRET) == []
    owner_id = str(record_of(layout, "owner")["id"])
    refused = hopper("retry", owner_id, "--env", "API_TOKEN", env={"API_TOKEN": "x"})
    assert refused.returncode == 1
    assert "withheld when it ended, also from its text" in refused.stderr
    assert "submit the original prompt again" in refused.stderr
    assert not list(layout.inbox.glob("*.prompt.md"))


@pytest.mark.parametrize("with_env", [False, True])
def test_a_job_without_env_is_retried_as_before(
    layout: Layout, hopper: Hopper, tmp_path: Path, with_env: bool
) -> None:
    """No env: the processed copy is the prompt as written (0600), retried as it was;
    ``--env`` adds a variable to a prompt that had none."""
    seen = tmp_path / "seen"
    drop(layout, "plain", f'+++\nagent = "bash" # a comment\n+++\necho "x$EXTRA" >> {seen}\n')
    assert hopper("run", "--until-idle").returncode == 0
    record = record_of(layout, "plain")
    processed = layout.root / str(record["processed_path"])
    assert processed.read_text().startswith('+++\nagent = "bash" # a comment\n+++\n')
    assert stat.S_IMODE(processed.stat().st_mode) == 0o600
    args = ("--env", "EXTRA") if with_env else ()
    assert hopper("retry", str(record["id"]), *args, env={"EXTRA": "-given"}).returncode == 0
    assert hopper("run", "--until-idle").returncode == 0
    assert seen.read_text() == ("x\nx-given\n" if with_env else "x\nx\n")


def test_the_files_made_from_a_prompt_are_named_where_they_are_made() -> None:
    assert set(DERIVED) == {SCRIPT_FILE, PROMPT_BODY_FILE, SPEC_FILE}


def test_retry_env_into_a_prompt_hopper_cannot_rewrite_says_so(layout: Layout) -> None:
    """``--env`` needs front matter hopper can rewrite: else the retry is refused, named."""
    record = JobRecord(
        id="20261122-120000-000-odd-0001",
        name="odd",
        state=JobState.FAILED,
        reason=Reason.EXIT_NONZERO,
        agent="bash",
        host="h",
        inbox_path="inbox/odd.prompt.md",
        created_at=datetime(2026, 11, 22, 12, 0, tzinfo=UTC),
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    (run_dir / "prompt.md").write_text('+++\nagent = "bash"\n[x.y]\nz = { a = 1 }\n+++\necho\n')
    with pytest.raises(CannotResubmit, match=r"cannot set env MODE in job .*odd-0001's prompt"):
        resubmit(layout, "odd", env={"MODE": "x"})
    assert not list(layout.inbox.glob("*.prompt.md"))
