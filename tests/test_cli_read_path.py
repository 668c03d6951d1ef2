"""``status``, ``events`` and ``logs`` without pydantic, printing what the model road prints.

The read commands take job.json through the standard library when it is in
the shape hopper writes (core/jobview.py) and through the model otherwise;
their output must be the same bytes the model road gives, odd records included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hopper.cli.status import COLUMNS, row, table
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_record, write_record
from hopper.store.layout import Layout

Run = Callable[..., subprocess.CompletedProcess[str]]
T0 = datetime(2026, 11, 20, 8, 30, 15, 250000, tzinfo=UTC)


def put(layout: Layout, rec: JobRecord) -> Path:
    run_dir = layout.run_dir(rec.id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_record(run_dir, rec, durable=False)
    (run_dir / "events.jsonl").write_text(
        json.dumps({"ts": T0.isoformat(), "event": "claimed", "by": "w 1"}) + "\n"
    )
    (run_dir / "job.log").write_bytes(b"out \xff line\n")
    return run_dir


def fixtures(layout: Layout) -> list[str]:
    """Run directories of every kind; the ids of the valid ones."""
    base = JobRecord(
        id="20261120-083015-000-a-0001",
        name="a",
        state=JobState.SUCCEEDED,
        reason=Reason.COMPLETED,
        agent="bash",
        host="h",
        inbox_path="inbox/a.prompt.md",
        created_at=T0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=75),
        duration_seconds=75.5,
    )
    records = [
        base,
        base.model_copy(
            update={
                "id": "20261120-083016-000-b-0002",
                "name": "b né 中",
                "state": JobState.RUNNING,
                "reason": None,
                "started_at": None,
                "finished_at": None,
                "duration_seconds": None,
                "agent": "claude",
                "agent_state": "retrying",
                "error_kind": "rate_limit",
                "usage": Usage(input_tokens=3, cost_usd=0.5),
            }
        ),
        base.model_copy(
            update={
                "id": "20261120-083017-000-c-0003",
                "name": "c",
                "state": JobState.FAILED,
                "reason": Reason.EXIT_NONZERO,
                "inbox_path": "inbox/team/c.prompt.md",
                "attempt": 3,
            }
        ),
    ]
    for rec in records:
        put(layout, rec)
    # In an odd shape: a field left out (the model's default fills it): the model road.
    odd = base.model_copy(update={"id": "20261120-083018-000-d-0004", "name": "d"})
    run_dir = put(layout, odd)
    doc = json.loads(odd.model_dump_json())
    del doc["usage"], doc["hooks"]
    (run_dir / "job.json").write_text(json.dumps(doc))
    # Unreadable: not JSON, a FIFO, a symlink.
    for name, make in (
        ("20261120-083019-000-e-0005", lambda p: p.write_bytes(b"\xff{")),
        ("20261120-083020-000-f-0006", lambda p: os.mkfifo(p)),
        ("20261120-083021-000-g-0007", lambda p: p.symlink_to("/etc/passwd")),
    ):
        (layout.runs / name).mkdir()
        make(layout.runs / name / "job.json")
    return [r.id for r in records] + [odd.id]


def model_table(layout: Layout, ids: list[str]) -> str:
    """The table as the model road renders it (cli/status.row on each JobRecord)."""
    now = datetime.now(UTC)
    return table([COLUMNS, *(row(read_record(layout.run_dir(i)), now) for i in sorted(ids))])


def test_status_prints_what_the_model_road_prints(layout: Layout, hopper: Run) -> None:
    ids = fixtures(layout)
    for _ in range(2):  # cold index, then warm
        out = hopper("status")
        assert out.returncode == 0, out.stderr
        assert out.stdout == model_table(layout, ids) + "\n"
        problems = out.stderr.splitlines()
        assert sorted(p.split("/runs/")[1][:26] for p in problems) == [
            "20261120-083019-000-e-0005",
            "20261120-083020-000-f-0006",
            "20261120-083021-000-g-0007",
        ]
    listed = json.loads(hopper("status", "--json").stdout)
    assert listed == [json.loads((layout.run_dir(i) / "job.json").read_text()) for i in ids]


def test_events_and_logs_print_what_the_model_road_prints(
    layout: Layout, config_file: Path, hopper: Run
) -> None:
    fixtures(layout)
    events = hopper("events", "b né 中", "--tail", "5")
    assert events.returncode == 0, events.stderr
    when = T0.astimezone().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    assert events.stdout == f'{when}  claimed          by="w 1"\n'
    logs = subprocess.run(
        [sys.executable, "-m", "hopper", "logs", "20261120-083017", "--root", str(layout.root)],
        capture_output=True,
        check=False,
        env={**os.environ, "HOPPER_CONFIG": str(config_file)},
    )
    assert (logs.returncode, logs.stdout) == (0, b"out \xff line\n")
    broken = hopper("events", "20261120-083020-000-f-0006")
    assert broken.returncode == 1
    assert broken.stderr == (
        f"hopper: {layout.runs}/20261120-083020-000-f-0006/job.json: is a FIFO, not a regular"
        " file\n  hint: hopper writes this file atomically; was it edited by hand?\n"
    )


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\n"
        "from hopper.cli.main import main\n"
        f"main({argv!r})\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, errors="replace", check=True
    ).stderr
    return set(out.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--state", "failed", "--since", "3650d"],
        ["status", "b*"],
        ["events", "--tail", "10", "20261120-083015-000-a-0001"],
        ["events", "c"],
        ["logs", "20261120-083017"],
        ["logs", "--all"],
    ],
)
def test_the_read_commands_load_no_pydantic(
    layout: Layout, config_file: Path, hopper: Run, argv: list[str]
) -> None:
    fixtures(layout)
    for name in ("20261120-083019-000-e-0005", "20261120-083020-000-f-0006"):
        for f in (layout.runs / name).iterdir():
            f.unlink()  # the corrupt ones take the model road to name the problem
    odd = layout.run_dir("20261120-083018-000-d-0004") / "job.json"
    write_record(odd.parent, read_record(odd.parent), durable=False)
    hopper("status")  # build the index
    modules = _modules_after([*argv, "--root", str(layout.root), "--config", str(config_file)])
    assert "hopper.cli.main" in modules
    assert not {m for m in modules if m == "pydantic" or m.startswith("pydantic.")}
    assert "hopper.core.record" not in modules and "hopper.config" not in modules


def run_with(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hopper", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_config_the_plain_reader_cannot_vouch_for_gets_the_models_error(
    layout: Layout, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("root = 5\n")
    out = run_with(bad, "status", "--root", str(layout.root))
    assert out.returncode == 1
    assert out.stderr.startswith(f"hopper: {bad}: key 'root': Input should be a valid string")
    bad.write_text("root = [\n")
    out = run_with(bad, "events", "x")
    assert out.returncode == 1 and f"hopper: {bad}: not valid TOML" in out.stderr
    out = run_with(tmp_path / "absent.toml", "logs", "x")
    assert out.returncode == 1 and "no such config file" in out.stderr


def test_the_config_root_is_read_without_the_model(layout: Layout, tmp_path: Path) -> None:
    fixtures(layout)
    conf = tmp_path / "rooted.toml"
    conf.write_text(f'root = "{layout.root}"\nmax_parallel = 3\n')
    env = {k: v for k, v in os.environ.items() if k != "HOPPER_ROOT"}
    out = subprocess.run(
        [sys.executable, "-m", "hopper", "status", "--config", str(conf), "--state", "failed"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )  # root from the config, its other keys not the read path's business
    assert out.returncode == 0, out.stderr
    assert [line.split()[1] for line in out.stdout.splitlines()[1:]] == ["c"]
