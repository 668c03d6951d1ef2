"""Interactive agent jobs through a real watcher: messages to a live session host.

The agent is the fake CLI of tests/sessionfake.py (HOPPER_SESSION_HOST_ARGV points
the session executor at a host with it); the real Claude CLIs are in
tests/agents/test_interactive_jobs.py (the shared set-up: tests/sessionjobs.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, Watchers, drop
from hopper.core.record import JobRecord
from hopper.sessionhost import contract as c
from hopper.sessionhost.client import request
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from sessionfake import HERE
from sessionhosts import cast_of
from sessionjobs import ended, running
from waiting import poll_until

WAIT = 60.0
HOST_ENV = {"HOPPER_SESSION_HOST_ARGV": json.dumps([sys.executable, str(HERE), "host"])}
CONFIG = FAST_CONFIG + '[agents.claude]\nbin = "/bin/true"\nsession_idle = "60s"\n'


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    return path


def message(text: str, **keys: str) -> str:
    front = "".join(f'{k} = "{v}"\n' for k, v in {"mode": "interactive", **keys}.items())
    return f'+++\nagent = "claude"\n{front}+++\n{text}\n'


def test_three_messages_to_one_session_run_in_order_in_one_agent(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    for i in range(3):
        drop(layout, f"m{i}", message(f"message {i}", session="chat"))
    watchers.start(env=HOST_ENV)
    recs = [ended(layout, f"m{i}") for i in range(3)]
    assert [r.state for r in recs] == ["succeeded"] * 3, [r.detail for r in recs]
    assert [r.executor for r in recs] == ["session"] * 3
    assert len({r.pid for r in recs}) == 1 and recs[0].pid is not None
    assert len({r.supervisor_pid for r in recs}) == 1
    assert [r.turns for r in recs] == [1, 2, 3]
    assert all(r.session_id and r.session_id == recs[0].session_id for r in recs)
    assert all(r.usage and r.usage.input_tokens == 10 for r in recs)
    for i, rec in enumerate(recs):
        run = layout.run_dir(rec.id)
        assert (run / "result.md").read_text() == f"answer: message {i}\n"
        assert (run / c.CAST_FILE).read_text().startswith('{"version": 2')
        assert [e["event"] for e in read_events(run)].count("turn_ended") == 1
    assert recs[0].finished_at and recs[1].started_at and recs[0].finished_at <= recs[1].started_at
    state = c.read_session(layout.root / "sessions" / "chat")
    assert state is not None and state.state == c.IDLE and state.turns == 3


def a_long_turn(layout: Layout) -> tuple[JobRecord, Path]:
    """Message "long" of session chat (the fake agent's slow answer), running and ticking:
    its record and run directory."""
    drop(layout, "long", message("slow", session="chat"))
    rec = running(layout, "long")
    run = layout.run_dir(rec.id)
    poll_until(lambda: b"tick" in cast_of(run), WAIT, "the turn going on")
    return rec, run


def test_abort_interrupts_the_turn_and_the_session_takes_the_next_message(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    _, run = a_long_turn(layout)
    (run / "ABORT").touch()
    aborted = ended(layout, "long")
    assert aborted.state == "aborted" and aborted.reason == "interrupted", aborted.detail
    assert "the session lives on" in (aborted.detail or "")
    drop(layout, "next", message("after", session="chat"))
    after = ended(layout, "next")
    assert after.state == "succeeded" and after.pid == aborted.pid


def test_an_interactive_jobs_agent_state_is_live_while_its_turn_runs(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "long", message("slow", session="chat"))
    rec = running(layout, "long")
    run = layout.run_dir(rec.id)
    poll_until(lambda: read_record(run).agent_state == "working", WAIT, "agent_state working")
    live = json.loads((run / "agent.state.json").read_text())
    assert live["agent_state"] == "working"
    (run / "ABORT").touch()
    aborted = ended(layout, "long")
    assert aborted.state == "aborted" and aborted.agent_state == "idle", aborted
    drop(layout, "next", message("after", session="chat"))
    after = ended(layout, "next")
    assert after.state == "succeeded" and after.agent_state == "waiting_for_input", after
    live = json.loads((layout.run_dir(after.id) / "agent.state.json").read_text())
    assert live["agent_state"] == "waiting_for_input"


def test_on_idle_nudge_types_the_nudge_into_the_live_session(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "stuck", message("hang", session="chat", idle_timeout="2s", on_idle="nudge"))
    rec = ended(layout, "stuck")
    run = layout.run_dir(rec.id)
    assert rec.state == "succeeded", rec.detail
    assert (run / "result.md").read_text().startswith("answer: You have printed nothing for 2")
    nudges = [e for e in read_events(run) if e["event"] == "nudge"]
    assert [(e["why"], e["nudge"]) for e in nudges] == [("idle", 1)], nudges
    assert "[hopper] nudge 1/2: idle" in (run / "job.log").read_text()


def test_on_idle_abort_ends_a_silent_turn_idle_timeout(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "stuck", message("hang", idle_timeout="2s"))
    rec = ended(layout, "stuck")
    assert rec.state == "failed" and rec.reason == "idle_timeout", rec
    assert "no output for idle_timeout (2 s)" in (rec.detail or "")
    assert not [e for e in read_events(layout.run_dir(rec.id)) if e["event"] == "nudge"]


def test_on_dead_resume_restarts_the_agent_and_types_the_message_again(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "first", message("hello", session="chat"))
    first = ended(layout, "first")
    drop(layout, "dies", message("hang-once", session="chat", on_dead="resume"))
    rec = running(layout, "dies")
    run = layout.run_dir(rec.id)
    poll_until(lambda: b"hang-once" in cast_of(run), WAIT, "the message typed")
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    done = ended(layout, "dies")
    assert done.state == "succeeded", done.detail
    end = c.read_turn_end(run)
    assert end is not None and end.agent_pid is not None and end.agent_pid != first.pid
    assert done.pid == end.agent_pid  # job.json names the new agent process
    assert json.loads((run / "agent.json").read_text())["agent_pid"] == end.agent_pid
    state = c.read_session(layout.root / "sessions" / "chat")
    assert state is not None and state.agent_pid == end.agent_pid
    respawns = [e for e in read_events(run) if e["event"] == "respawned"]
    assert [(e["old_pid"], e["pid"]) for e in respawns] == [(first.pid, end.agent_pid)]
    assert done.session_id == first.session_id
    assert (run / "result.md").read_text() == "answer: hang-once\n"
    nudges = [e for e in read_events(run) if e["event"] == "nudge"]
    assert [e["why"] for e in nudges] == ["dead"], nudges


def test_job_json_names_the_resumed_agent_while_its_turn_runs(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "first", message("hello", session="chat"))  # the fake's id: in its log
    ended(layout, "first")
    drop(layout, "dies", message("hang", session="chat", on_dead="resume"))
    rec = running(layout, "dies")
    run = layout.run_dir(rec.id)
    poll_until(lambda: b"hang" in cast_of(run), WAIT, "the message typed")
    assert rec.pid is not None
    os.kill(rec.pid, signal.SIGKILL)
    folder = layout.root / "sessions" / "chat"
    state = poll_until(
        lambda: (s := c.read_session(folder)) is not None and s.agent_pid != rec.pid and s,
        WAIT,
        "the agent resumed",
    )
    assert isinstance(state, c.SessionState) and state.agent_pid is not None
    poll_until(lambda: read_record(run).pid == state.agent_pid, WAIT, "job.json's new pid")
    assert read_record(run).state == "running"
    (run / "ABORT").touch()
    done = ended(layout, "dies")
    assert done.state == "aborted" and done.pid == state.agent_pid, done


def test_without_on_dead_resume_an_agent_death_fails_the_turn(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "first", message("hello", session="chat"))
    first = ended(layout, "first")
    drop(layout, "dies", message("hang-once", session="chat"))
    rec = running(layout, "dies")
    poll_until(lambda: b"hang-once" in cast_of(layout.run_dir(rec.id)), WAIT, "typed")
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    done = ended(layout, "dies")
    assert done.state == "failed" and "the agent exited" in (done.detail or ""), done


def test_a_job_without_a_session_gets_a_host_that_ends_with_it(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    watchers.start(env=HOST_ENV)
    drop(layout, "solo", message("alone"))
    rec = ended(layout, "solo")
    assert rec.state == "succeeded" and rec.executor == "session", rec.detail
    folder = layout.run_dir(rec.id) / "session"
    poll_until(lambda: (s := c.read_session(folder)) is not None and s.state == c.ENDED,
               WAIT, "its host ended")  # fmt: skip
    state = c.read_session(folder)
    assert state is not None and state.ended_reason == c.ENDED_JOB


def test_a_watcher_killed_mid_turn_loses_nothing(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    first = watchers.start(env=HOST_ENV)
    drop(layout, "long", message("slow", session="chat"))
    rec = running(layout, "long")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    watchers.start(env=HOST_ENV)
    run = layout.run_dir(rec.id)
    poll_until(
        lambda: any(e["event"] == "adopted" for e in read_events(run)), WAIT, "the job adopted"
    )
    poll_until(lambda: b"tick" in cast_of(run), WAIT, "the turn going on")
    request(layout.root / "sessions" / "chat", "interrupt")
    done = ended(layout, "long")
    assert done.state == "aborted" and done.reason == "interrupted", done.detail
    assert done.pid == rec.pid
    assert [e["event"] for e in read_events(run)].count("turn_ended") == 1
    drop(layout, "next", message("after", session="chat"))
    assert ended(layout, "next").pid == rec.pid


def test_a_queued_message_says_it_waits_for_the_sessions_turn(
    layout: Layout, watchers: Watchers, hosts: None, hopper
) -> None:
    watchers.start(env=HOST_ENV)
    _, run = a_long_turn(layout)
    drop(layout, "queued", message("later", session="chat"))
    poll_until(
        lambda: "waiting for session chat's turn" in hopper("status", "queued").stdout,
        WAIT,
        "the queued message's why",
    )
    (run / "ABORT").touch()
    assert ended(layout, "queued").state == "succeeded"


def test_hopper_interrupt_by_job_name_ends_its_turn(
    layout: Layout, watchers: Watchers, hosts: None, hopper
) -> None:
    watchers.start(env=HOST_ENV)
    rec, _ = a_long_turn(layout)
    out = hopper("interrupt", "long")
    assert out.returncode == 0 and f"interrupted job {rec.id}" in out.stdout, out.stderr
    done = ended(layout, "long")
    assert done.state == "aborted" and done.reason == "interrupted"


def test_attach_to_a_job_that_is_not_interactive_says_so(
    layout: Layout, watchers: Watchers, hopper
) -> None:
    watchers.start()
    drop(layout, "plain", '+++\nagent = "bash"\n+++\necho hi\n')
    rec = ended(layout, "plain")
    out = hopper("attach", rec.id)
    assert out.returncode == 1 and "has no live session" in out.stderr


def test_a_message_crossing_its_max_tokens_fails_budget_exceeded_and_the_session_goes_on(
    layout: Layout, watchers: Watchers, hosts: None
) -> None:
    over = '+++\nagent = "claude"\nmode = "interactive"\nsession = "chat"\nmax_tokens = 100\n+++\n'
    drop(layout, "over", over + "spend 500\n")
    watchers.start(env=HOST_ENV)
    first = ended(layout, "over")
    drop(layout, "after", message("after", session="chat"))
    second = ended(layout, "after")
    assert (first.state, first.reason) == ("failed", "budget_exceeded"), first.detail
    assert first.detail is not None and first.detail.startswith("max_tokens 100 reached: spent 510")
    assert "raise max_tokens in the front matter or [agents.claude]" in first.detail
    assert first.usage is not None and first.usage.output_tokens == 500
    assert second.state == "succeeded" and second.pid == first.pid and second.turns == 2
