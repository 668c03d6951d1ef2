"""scripts/bench judges issue 16's goals from the figures of one run.

The judgement is a pure function of the result dict, so it is tested on
made-up figures: a goal met, a goal missed, a section not run, a peer
absent, and a run smaller than the goal's scale (never judged as met).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench"


def load_bench() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("hopper_bench", str(BENCH))
    spec = importlib.util.spec_from_loader("hopper_bench", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hopper_bench"] = module  # its dataclasses look their module up
    loader.exec_module(module)
    return module


bench = load_bench()


def s(x: float) -> dict[str, float]:
    return {"n": 1, "median": x, "min": x, "max": x}


def full_result() -> dict[str, Any]:
    return {
        "throughput": {
            "slots_1": {"hopper": s(700.0), "tsp": s(650.0)},
            "slots_4": {"hopper": s(70.0), "tsp": s(700.0)},
        },
        "latency": {
            "hopper": {"p50": s(5.0), "p99": s(60.0)},
            "tsp": {"p50": s(4.0), "p99": s(5.0)},
        },
        "running": {
            "jobs": 1000,
            "hopper": {"helper_uss_mb_per_job": s(1.9), "cpu_percent": s(4.5)},
        },
        "cli": {
            "bare_python_ms": s(10.0),
            "help_ms": s(79.0),
            "status_ms": s(101.0),
            "events_tail_ms": s(60.0),
        },
        "status": {
            "runs": 100_000,
            "warm_filtered_s": s(0.7),
            "cold_s": s(12.0),
            "changed_behind": 1000,
        },
        "flood": {"jobs": 65_000, "drop_to_start_s": 0.4},
        "backlog": {
            "1000": {"capped": False, "hopper": {"ms_per_job": s(20.0), "finished": s(1000)}},
            "100000": {"capped": True, "hopper": {"ms_per_job": s(29.0), "finished": s(9000)}},
        },
    }


def verdicts(result: dict[str, Any]) -> dict[str, str]:
    return {goal: verdict for goal, _, verdict in bench.judge_goals(result)}


def test_each_goal_is_judged_against_its_limit() -> None:
    v = verdicts(full_result())
    assert v["throughput at 1 slot(s) >= 1.0x tsp"] == "met"
    assert v["throughput at 4 slot(s) >= 1.0x tsp"] == "not met"
    assert v["drop->start p50 <= 1.5x tsp"] == "met"  # 5.0 <= 6.0
    assert v["drop->start p99 <= 50 ms"] == "not met"
    assert v["<= 2 MB USS per running job"] == "met"
    assert v["1,000 running jobs: watcher <= 5 % of a core"] == "met"
    assert v["hopper --help <= 8x python -I -c pass"] == "met"
    assert v["hopper status <= 10x python -I -c pass"] == "not met"
    assert v["hopper events --tail <= 10x python -I -c pass"] == "met"
    assert v["status, warm filtered <= 1 s, rows changed behind the index shown"] == "met"
    assert v["status, cold build <= 10 s"] == "not met"
    assert v["a prompt dropped during a flood of 65,000 starts within 1 s"] == "met"
    assert v["per-job cost at 100,000 backlog <= 1.5x at 1,000"] == "met"  # 29 <= 30


def test_a_capped_backlog_says_how_much_was_drained() -> None:
    figures = {g: f for g, f, _ in bench.judge_goals(full_result())}
    assert "(capped: 9,000 done)" in figures["per-job cost at 100,000 backlog <= 1.5x at 1,000"]


def test_a_smaller_run_is_never_judged_met() -> None:
    result = full_result()
    result["running"]["jobs"] = 200
    result["status"]["runs"] = 20_000
    result["flood"]["jobs"] = 5000
    del result["backlog"]["100000"]
    result["backlog"]["10000"] = {"capped": False, "hopper": {"ms_per_job": s(21.0)}}
    v = verdicts(result)
    assert v["1,000 running jobs: watcher <= 5 % of a core"] == "only 200 jobs (--full: 1,000)"
    assert v["status, cold build <= 10 s"] == "only 20,000 runs (--full: 100,000)"
    assert v["a prompt dropped during a flood of 65,000 starts within 1 s"].startswith("only 5,000")
    assert v["per-job cost at 100,000 backlog <= 1.5x at 1,000"].startswith("largest backlog")


def test_missing_sections_and_peers_are_said_not_judged() -> None:
    result = full_result()
    del result["throughput"]["slots_1"]["tsp"]
    for section in ("latency", "running", "cli", "status", "flood", "backlog"):
        del result[section]
    v = verdicts(result)
    assert v["throughput at 1 slot(s) >= 1.0x tsp"] == "tsp absent"
    assert v["drop->start p50 <= 1.5x tsp, p99 <= 50 ms"] == "not run"
    assert v["hopper --help <= 8x python -I -c pass"] == "not run"
    assert v["per-job cost at 100,000 backlog <= 1.5x at 1,000"] == "not run"
    assert "met" not in v.values()


def test_a_flood_prompt_never_started_is_not_met() -> None:
    result = full_result()
    result["flood"]["drop_to_start_s"] = None
    goals = {g: (f, v) for g, f, v in bench.judge_goals(result)}
    figure, verdict = goals["a prompt dropped during a flood of 65,000 starts within 1 s"]
    assert verdict == "not met" and figure.startswith("not started within the cap")


def test_the_table_is_printed_with_every_goal() -> None:
    lines = bench.render_goals(bench.judge_goals(full_result()))
    assert lines[0].startswith("9. issue 16's goals")
    assert len(lines) == 1 + len(bench.judge_goals(full_result()))


def test_the_backlog_is_judged_by_claim_plus_run_per_job() -> None:
    """A capped drain's elapsed time over its finished jobs also holds the claims of
    jobs not yet run: section 4's claim + run cost is what is judged when present."""
    result = full_result()
    result["backlog"]["1000"]["hopper"]["cost_ms_per_job"] = s(20.0)
    result["backlog"]["100000"]["hopper"]["ms_per_job"] = s(300.0)  # claims of 100,000
    result["backlog"]["100000"]["hopper"]["cost_ms_per_job"] = s(25.0)
    (row,) = [r for r in bench.judge_goals(result) if r[0].startswith("per-job cost")]
    assert row[2] == "met" and "25.0 ms/job" in row[1], row
    result["backlog"]["100000"]["hopper"]["cost_ms_per_job"] = s(31.0)
    (row,) = [r for r in bench.judge_goals(result) if r[0].startswith("per-job cost")]
    assert row[2] == "not met", row


def test_a_backlog_capped_before_its_last_claim_is_not_judged() -> None:
    result = full_result()
    large = result["backlog"]["100000"]["hopper"]
    large["claimed"], large["finished"], large["ms_per_job"] = s(47823.0), s(6497.0), s(308.1)
    (row,) = [r for r in bench.judge_goals(result) if r[0].startswith("per-job cost")]
    assert row[2] == "capped in its claim phase", row
    assert "47,823 of 100,000 claimed, 6,497 done" in row[1], row
