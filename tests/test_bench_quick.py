"""scripts/bench --quick runs end to end, so the benchmark never rots.

Checks the shape of the JSON and that every hopper figure is a positive
number. The peer columns (tsp, nq) are checked only where the tools are
installed (Debian packages task-spooler and nq); without them the bench
measures hopper alone and says how to install them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "scripts" / "bench"
SECTIONS = (
    "throughput",
    "latency",
    "running",
    "backlog",
    "events_tail",
    "cli",
    "status",
    "flood",
)


def positive(summary: dict[str, float] | None, what: str) -> None:
    assert summary is not None, f"{what}: no figure"
    assert summary["n"] >= 1, what
    assert 0 < summary["min"] <= summary["median"] <= summary["max"], f"{what}: {summary}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(out.read_text())
    for section in SECTIONS:
        assert section in data, section
    assert data["machine"]["cores"] >= 1 and data["machine"]["python"]
    # the disk's state as the bench starts: what a create costs, whether it is journaled
    assert data["machine"]["create_us"] > 0 and data["machine"]["journaled"]
    assert "disk: a new file" in result.stdout
    assert "throughput" in result.stdout  # the table is printed too

    peers = [p for p in ("tsp", "nq") if shutil.which(p)]
    assert data["systems"] == ["hopper", *peers]
    if len(peers) < 2:
        assert "apt-get install task-spooler nq" in result.stderr

    tp = data["throughput"]
    for slots in ("slots_1", "slots_4"):
        for system in data["systems"]:
            positive(tp[slots][system], f"throughput {slots} {system}")

    lat = data["latency"]
    for system in ["hopper", "hopper_outside_tmp", *peers]:
        for key in ("p50", "p90", "p99", "max"):
            positive(lat[system][key], f"latency {system} {key}")

    run = data["running"]["hopper"]
    for key in ("rss_mb", "helper_uss_mb_per_job", "heartbeat_on_time_percent"):
        positive(run[key], f"running hopper {key}")
    assert run["cpu_percent"]["min"] >= 0
    assert run["adopted_cpu_percent"]["min"] >= 0  # measured after a restart adopted them
    if "tsp" in peers:
        positive(data["running"]["tsp"]["rss_mb"], "running tsp rss_mb")

    backlog = data["backlog"]
    assert len(backlog) == 2
    for size, row in backlog.items():
        assert not row["capped"], size
        for key in ("ms_per_job", "run_ms_per_job", "peak_rss_mb", "status_s", "status_json_s"):
            positive(row["hopper"][key], f"backlog {size} {key}")
        assert row["hopper"]["finished"]["min"] == int(size)
        # Drained to the end, claim + run per job is the elapsed time over the jobs.
        cost, elapsed = row["hopper"]["cost_ms_per_job"], row["hopper"]["ms_per_job"]
        assert cost["median"] == pytest.approx(elapsed["median"], rel=1e-6), size
        assert row["hopper"]["claim_ms_per_prompt"]["median"] >= 0, size
        # the drain ends with its last job filed, before the watcher's own exit
        drained, whole = row["hopper"]["drained_s"]["median"], row["hopper"]["elapsed_s"]["median"]
        assert 0 < drained <= whole, size

    tail = data["events_tail"]
    assert tail["file_bytes"] > 1 << 20
    positive(tail["reference_reverse_seek_ms"], "events tail reference")
    hopper_tail = tail["hopper"]
    if hopper_tail["status"] == "measured":
        positive(hopper_tail["command_ms"], "hopper events --tail")
    else:
        assert "not yet implemented" in hopper_tail["status"], hopper_tail

    cli = data["cli"]
    assert cli["jobs"] >= 100
    for key in ("bare_python_ms", "help_ms", "status_ms", "events_tail_ms", "logs_ms"):
        positive(cli[key], f"cli {key}")
    assert "hopper status (" in result.stdout
    status = data["status"]
    assert status["runs"] >= 1000 and status["filtered_rows"] >= 1
    assert status["changed_behind"] >= 1  # and the bench checked every change was shown
    for key in ("cold_s", "warm_filtered_s", "warm_table_s", "warm_json_s", "after_change_s"):
        positive(status[key], f"status {key}")
    assert "7. hopper status over" in result.stdout
    flood = data["flood"]
    assert flood["jobs"] >= 100 and not flood["capped"]
    assert 0 < flood["drop_to_claim_s"] <= flood["drop_to_start_s"], flood
    assert 0 <= flood["started_before"] <= flood["claimed_before"] <= flood["jobs"], flood
    assert "8. a prompt (priority 10) dropped" in result.stdout

    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith("hopper-bench-")]
    assert leftovers == [], "the bench must remove its temporary directory"


@pytest.mark.parametrize(
    ("sizes", "said"),
    [("1000,lots", "give whole numbers"), ("1000,0", "at least 1"), ("", "give whole numbers")],
)
def test_backlog_sizes_refused_with_what_to_give(sizes: str, said: str) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--only", "backlog", "--backlog-sizes", sizes],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"--backlog-sizes {sizes!r}" in result.stderr and said in result.stderr
