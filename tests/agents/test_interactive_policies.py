"""The agent policies of interactive Claude jobs, the real pinned CLIs in a pty against the
model server. on_error: an API error (CLAUDE_CODE_MAX_RETRIES=0: the CLI's own retries off)
ends the turn, and the message job fails ``agent_error/<kind>`` or is typed again, as for
headless jobs. on_idle: a reply that stalls is nudged though Claude's spinner keeps
redrawing the screen. on_dead: a Claude killed mid-turn is resumed in a new process, and
the records name it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from agentjobs import CLAUDES, Hopper, prompt
from test_interactive_jobs import next_message_runs_in, setup

from conftest import Watchers, drop
from hopper.proc import identity
from hopper.sessionhost import contract as c
from hopper.store.jobfile import read_events
from hopper.store.layout import Layout
from modelserver import ModelServer, error, last_user_text, text
from sessionjobs import ended, find
from waiting import poll_until


@pytest.mark.parametrize("agent_at", CLAUDES)
def test_retry_types_the_message_again_into_the_live_session(
    agent_at: str, layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path,
    srv: ModelServer, work: Path, hosts: None,
) -> None:  # fmt: skip
    agent = setup(agent_at, config_file, tmp_path, srv)  # api_retries 2, retry_backoff 0.1s
    srv.script([error(429), text("Recovered.")])
    drop(layout, "e", prompt(agent, "Hi", session="chat", workdir=str(work)))
    watchers.start()
    rec = ended(layout, "e")
    run = layout.run_dir(rec.id)
    assert (rec.state, rec.reason) == ("succeeded", "completed"), (
        rec.detail,
        (run / "job.log").read_text(),
    )
    assert (run / "result.md").read_text() == "Recovered.\n"
    retries = [e for e in read_events(run) if e["event"] == "agent_retry"]
    assert [(e["attempt"], e["kind"]) for e in retries] == [(1, "rate_limit")]
    assert len(srv.model_requests()) == 2
    next_message_runs_in(layout, agent, work, rec.pid)


@pytest.mark.parametrize("agent_at", CLAUDES[:1])
def test_fail_fails_the_message_agent_error_and_the_session_lives_on(
    agent_at: str, layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path,
    srv: ModelServer, work: Path, hosts: None,
) -> None:  # fmt: skip
    agent = setup(agent_at, config_file, tmp_path, srv)
    srv.script([error(429), text("after")])
    drop(layout, "e", prompt(agent, "Hi", session="chat", workdir=str(work), on_error="fail"))
    watchers.start()
    rec = ended(layout, "e")
    assert (rec.state, rec.reason, rec.error_kind) == ("failed", "agent_error", "rate_limit")
    assert rec.agent_state == "api_error", rec
    assert rec.detail and rec.detail.startswith("the agent reported an error (rate_limit)")
    assert len(srv.model_requests()) == 1
    next_message_runs_in(layout, agent, work, rec.pid)


@pytest.mark.parametrize("agent_at", CLAUDES[:1])
def test_pause_holds_the_sessions_next_message_until_the_marker_goes(
    agent_at: str, layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path,
    srv: ModelServer, work: Path, hosts: None, hopper: Hopper,
) -> None:  # fmt: skip
    agent = setup(agent_at, config_file, tmp_path, srv)
    srv.script([error(401), text("Second answer.")])
    first_text = prompt(agent, "First", session="chat", workdir=str(work), on_error="pause")
    drop(layout, "a-first", first_text)
    drop(layout, "b-second", prompt(agent, "Second", session="chat", workdir=str(work)))
    watchers.start()
    first = ended(layout, "a-first")
    assert (first.state, first.reason, first.error_kind) == ("failed", "agent_error", "auth")
    assert first.session_paused is True
    marker = layout.root / "sessions" / "chat.paused"
    assert marker.exists()
    poll_until(
        lambda: "session chat paused:" in hopper("status").stdout, 60.0, "status says paused"
    )
    assert find(layout, "b-second", ("queued",)) and len(srv.model_requests()) == 1
    marker.unlink()
    second = ended(layout, "b-second")
    assert second.state == "succeeded" and second.pid == first.pid, second.detail
    assert (layout.run_dir(second.id) / "result.md").read_text() == "Second answer.\n"


SAID = ("Think", "You have printed nothing for 5 seconds", "Then the next one")


@pytest.mark.parametrize("agent_at", CLAUDES[:1])
def test_on_idle_nudge_types_the_nudge_while_a_stalled_reply_spins(
    agent_at: str, layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path,
    srv: ModelServer, work: Path, hosts: None,
) -> None:  # fmt: skip
    """The reply starts and then nothing comes for 12 s; Claude's spinner redraws the
    screen all along, yet its session log does not grow: the turn is idle at 5 s, nudged,
    and goes on to its answer. Claude queues the nudge and answers it as a turn of its
    own after the answer: the session's next message waits for that turn to end, else it
    would be queued behind it and take the nudge's Stop and answer for its own."""
    agent = setup(agent_at, config_file, tmp_path, srv)
    srv.script(
        [text("Done at last.", stall=12.0, chunks=1), text("Carrying on."), text("Next one.")]
    )
    stuck = prompt(
        agent, "Think", session="chat", workdir=str(work), idle_timeout="5s", on_idle="nudge"
    )
    drop(layout, "stuck", stuck)
    drop(layout, "then", prompt(agent, "Then the next one", session="chat", workdir=str(work)))
    watchers.start()
    rec = find(layout, "stuck", ("running",))
    run = layout.run_dir(rec.id)
    poll_until(
        lambda: any(e["event"] == "nudge" for e in read_events(run)), 60.0, "the nudge typed"
    )
    done = ended(layout, "stuck")
    assert done.state == "succeeded", (done.detail, (run / "job.log").read_text())
    nudges = [e for e in read_events(run) if e["event"] == "nudge"]
    assert nudges and all(e["why"] == "idle" for e in nudges), nudges
    assert "[hopper] nudge 1/2: idle" in (run / "job.log").read_text()
    assert (run / "result.md").read_text() == "Done at last.\n"
    poll_until(
        lambda: any(
            "You have printed nothing for 5 seconds" in (last_user_text(r.body) or "")
            for r in srv.model_requests()
        ),
        60.0,
        "the nudge reached the model",
    )
    then = ended(layout, "then")
    assert then.state == "succeeded" and then.pid == done.pid, then.detail
    assert (layout.run_dir(then.id) / "result.md").read_text() == "Next one.\n"
    asked = [last_user_text(r.body) or "" for r in srv.model_requests()]
    order = [next(i for i, a in enumerate(asked) if said in a) for said in SAID]
    assert order == sorted(order), asked


@pytest.mark.parametrize("agent_at", CLAUDES[:1])
def test_on_dead_resume_records_the_new_claude_process(
    agent_at: str, layout: Layout, watchers: Watchers, config_file: Path, tmp_path: Path,
    srv: ModelServer, work: Path, hosts: None,
) -> None:  # fmt: skip
    agent = setup(agent_at, config_file, tmp_path, srv)
    script = [text("First."), text("slow " * 100, delay=0.3, chunks=100), text("Resumed answer.")]
    srv.script(script)
    # 2.1.330 writes its session log once a turn ends: before that, --resume finds nothing
    drop(layout, "first", prompt(agent, "Hi", session="chat", workdir=str(work)))
    watchers.start()
    assert ended(layout, "first").state == "succeeded"
    drop(layout, "dies", prompt(agent, "Talk", session="chat", workdir=str(work), on_dead="resume"))
    rec = find(layout, "dies", ("running",))
    srv.wait_for_requests(2, 60.0)
    assert rec.pid is not None
    os.kill(rec.pid, signal.SIGKILL)
    done = ended(layout, "dies")
    run = layout.run_dir(done.id)
    assert done.state == "succeeded", (done.detail, (run / "job.log").read_text())
    assert (run / "result.md").read_text() == "Resumed answer.\n"
    end = c.read_turn_end(run)
    state = c.read_session(layout.root / "sessions" / "chat")
    assert end is not None and state is not None
    assert done.pid != rec.pid and done.pid == end.agent_pid == state.agent_pid
    assert json.loads((run / "agent.json").read_text())["agent_pid"] == done.pid
    assert identity.is_alive(done.pid, done.pid_start_time)  # the live claude
    assert [e["event"] for e in read_events(run)].count("respawned") == 1
