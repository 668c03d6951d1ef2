"""A job's own spending limits end to end: the real CLIs against the scripted server,
with usage figures chosen to cross a limit mid-stream (docs/budgets.md)."""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import pytest
from agentjobs import CLAUDES, Hopper, agent_config, jobs, prompt, versioned

from conftest import drop
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from modelserver import ModelServer, text, tool

LONG = "".join(f"line {i} of an answer that costs too much\n" for i in range(12))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def add_prices(config_file: Path, **rows: tuple[float, float]) -> None:
    text_ = "".join(
        f'\n[prices."{model}"]\ninput_per_mtok = {i}\noutput_per_mtok = {o}\n'
        for model, (i, o) in rows.items()
    )
    config_file.write_text(config_file.read_text() + text_)


def only_job(layout: Layout) -> tuple[Path, JobRecord]:
    (run_dir,) = jobs(layout)
    return run_dir, read_record(run_dir)


def budget_events(run_dir: Path) -> list[dict[str, object]]:
    return [e for e in read_events(run_dir) if e["event"] == "budget_exceeded"]


@pytest.mark.parametrize("agent_at", CLAUDES)
def test_claude_stopped_mid_stream_at_max_cost_usd(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    """The answer's input alone costs $1.00 at message_start; the limit is $0.50: hopper
    stops Claude before the answer has streamed, and no retry or nudge follows."""
    _, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, claude={"model": "budget-model"}, **versions)
    add_prices(config_file, **{"budget-model": (1.0, 10.0)})
    srv.script([text(LONG, delay=0.5, chunks=12, usage={"input_tokens": 1_000_000})])
    job = prompt("claude", "Answer at length", workdir=str(work), max_cost_usd=0.5, max_nudges=2)
    drop(layout, "costly", job)
    assert hopper("run", "--until-idle").returncode == 0
    run_dir, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED), record.detail
    assert (record.detail or "").startswith("max_cost_usd 0.5 reached: spent $1.0"), record.detail
    assert "raise max_cost_usd in the front matter or [agents.claude]" in (record.detail or "")
    assert record.max_cost_usd == 0.5
    assert "line 11 of an answer" not in (run_dir / "job.log").read_text()  # mid-stream
    assert len(srv.model_requests()) == 1
    assert len(budget_events(run_dir)) == 1
    assert record.usage is not None and record.usage.cost_known is not None


@pytest.mark.parametrize("agent_at", CLAUDES)
def test_claude_own_guard_maps_to_budget_exceeded(
    agent_at: str,
    layout: Layout,
    hopper: Hopper,
    config_file: Path,
    tmp_path: Path,
    srv: ModelServer,
    work: Path,
) -> None:
    """No [prices] row: hopper cannot price Claude mid-run, and Claude's own guard,
    --max-budget-usd (the budget left), ends the run; the verdict is the same."""
    _, versions = versioned(agent_at)
    agent_config(config_file, tmp_path, srv.url, **versions)
    srv.script([tool("true", usage={"input_tokens": 200_000}), text("done")])
    drop(layout, "guarded", prompt("claude", "Do it", workdir=str(work), max_cost_usd=0.01))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED), record.detail
    assert (record.detail or "").startswith("max_cost_usd 0.01 reached: spent $"), record.detail
    argv = (run_dir / "agent.jsonl").read_text()
    assert "error_max_budget_usd" in argv


def test_codex_stopped_at_max_tokens_between_responses(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    """Codex prints no usage until its turn ends; hopper reads each response's usage from
    its progress trace and stops it while the tool runs: no second model request."""
    agent_config(config_file, tmp_path, srv.url)
    srv.script([tool("sleep 20", usage={"input_tokens": 5000, "output_tokens": 40}), text("x")])
    drop(layout, "tokens", prompt("codex", "Do it", workdir=str(work), max_tokens=1000))
    assert hopper("run", "--until-idle").returncode == 0
    _, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED), record.detail
    assert (record.detail or "").startswith("max_tokens 1,000 reached: spent 5,040 tokens")
    assert "cost unknown" in (record.detail or "")  # no [prices] row: tokens only
    assert "raise max_tokens in the front matter or [agents.codex]" in (record.detail or "")
    assert len(srv.model_requests()) == 1
    assert record.usage is not None
    assert (record.usage.tokens, record.usage.cost_known) == (5040, False)
    assert '[prices."' in (record.usage.cost_note or "")


def test_codex_priced_under_its_limit_succeeds_with_a_cost(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url, codex={"model": "gpt-test"})
    add_prices(config_file, **{"gpt-test": (2.0, 8.0)})
    srv.script([text("done", usage={"input_tokens": 1000, "output_tokens": 500})])
    drop(layout, "cheap", prompt("codex", "Do it", workdir=str(work), max_cost_usd=1.0))
    assert hopper("run", "--until-idle").returncode == 0
    run_dir, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert record.usage is not None and record.usage.cost_usd is not None
    assert math.isclose(record.usage.cost_usd, (1000 * 2.0 + 500 * 8.0) / 1e6)
    assert (record.usage.tokens, record.usage.cost_known, record.usage.model) == (
        1500,
        True,
        "gpt-test",
    )
    assert budget_events(run_dir) == []


def test_claude_under_its_limit_is_untouched(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    agent_config(config_file, tmp_path, srv.url)
    srv.script([tool("touch made.txt"), text("Created made.txt.")])
    job = prompt("claude", "Create it", workdir=str(work), max_cost_usd=5.0, max_tokens=10_000)
    drop(layout, "fine", job)
    assert hopper("run", "--until-idle").returncode == 0
    run_dir, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED), record.detail
    assert (work / "made.txt").exists()
    assert record.usage is not None and record.usage.cost_known
    assert record.usage.tokens == 30 and record.usage.cost_usd
    assert budget_events(run_dir) == []


def test_nudges_count_together_and_stop_at_the_limit(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path, srv: ModelServer, work: Path
) -> None:
    """Each run spends 15 tokens; the check fails, so hopper nudges: the second run
    crosses max_tokens 20 (15 + its own) and is stopped; no third run."""
    agent_config(config_file, tmp_path, srv.url)
    srv.script([text("first"), text("second", delay=0.5), text("third")])
    job = prompt("claude", "Do it", workdir=str(work), check=["false"], max_nudges=3, max_tokens=20)
    drop(layout, "nudged", job)
    assert hopper("run", "--until-idle").returncode == 0
    _, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED), record.detail
    assert (record.detail or "").startswith("max_tokens 20 reached")
    assert len(srv.model_requests()) == 2
    assert record.usage is not None and (record.usage.tokens or 0) >= 20


TALKER = textwrap.dedent(
    """\
    import json, signal, sys
    print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-1",
                      "model": "house-model"}), flush=True)
    print(json.dumps({"type": "assistant", "session_id": "s-1", "message": {
        "id": "m1", "model": "house-model", "content": [{"type": "text", "text": "working"}],
        "usage": {"input_tokens": 700, "output_tokens": 20}}}), flush=True)
    signal.pause()  # until hopper stops it: the spend is over the limit already
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "session_id": "s-1", "num_turns": 1, "result": "done"}), flush=True)
    """
)


def test_a_custom_agent_reporting_usage_is_stopped(
    layout: Layout, hopper: Hopper, config_file: Path, tmp_path: Path
) -> None:
    script = tmp_path / "talker.py"
    script.write_text(TALKER)
    table = {"argv": [sys.executable, str(script)], "format": "claude-jsonl"}
    agent_config(config_file, tmp_path, "http://127.0.0.1:9", talker=table)
    add_prices(config_file, **{"house-model": (100.0, 100.0)})
    drop(layout, "talks", prompt("talker", "Do it", max_cost_usd=0.05))
    assert hopper("run", "--until-idle").returncode == 0
    _, record = only_job(layout)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED), record.detail
    assert (record.detail or "").startswith("max_cost_usd 0.05 reached: spent $0.0720 (720 tokens)")
    assert "[agents.talker]" in (record.detail or "")
