"""Recovery files a prompt only under processed/, whatever processed_path a record holds
(issue 27).

A terminal job.json with prompt.md still in its run directory makes the next watcher
complete the finalize: move prompt.md to the record's ``processed_path``. A job can
write any run directory, so that path may be absolute (``/etc/cron.d/x``) or climb
out; the move must never leave processed/: the prompt is filed under processed/ by
the job's id and job.json records where it went.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE, write_record
from hopper.store.layout import Layout

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB = "20261122-120000-000-planted-0001"
BODY = "* * * * * root echo planted\n"


@pytest.mark.parametrize(
    "processed_path",
    ["{outside}/cron.d/planted", "processed/../../outside/cron.d/planted"],
    ids=["absolute", "dotdot"],
)
def test_recovery_never_moves_a_prompt_out_of_processed(
    layout: Layout, hopper, tmp_path: Path, processed_path: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    record = JobRecord(
        id=JOB,
        name="planted",
        state=JobState.FAILED,
        reason=Reason.EXIT_NONZERO,
        agent="bash",
        host="h",
        inbox_path="inbox/planted.prompt.md",
        processed_path=processed_path.format(outside=outside),
        created_at=NOW,
        finished_at=NOW,
    )
    run_dir = layout.run_dir(JOB)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    (run_dir / PROMPT_FILE).write_text(BODY)

    result = hopper("run", "--until-idle")

    assert result.returncode == 0, result.stderr
    assert os.listdir(outside) == []  # no folder made, no file moved there
    filed = json.loads((run_dir / JOB_FILE).read_text())
    assert filed["processed_path"] == f"processed/{JOB}.prompt.md"
    assert (layout.root / filed["processed_path"]).read_text() == BODY
    assert "unsafe" in filed["detail"]
    assert not (run_dir / PROMPT_FILE).exists()
