"""The session host with a fake agent CLI in a real pty: turns, limits, socket, files."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopper.proc import identity
from hopper.sessionhost import client
from hopper.sessionhost import contract as c
from hopper.sessionhost.host import Host, HostSpec
from hopper.sessionhost.launch import LaunchFailed, launch
from sessionfake import FakeAgent
from sessionhosts import WAIT, Session, _no, cast_of
from waiting import poll_until


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session(tmp_path)
    yield s
    s.cleanup()


def test_a_turn_writes_its_end_result_usage_cast_and_log(session: Session) -> None:
    host = session.start()
    run = session.send("hello there")
    end = session.ended(run)
    state = session.state()
    assert state is not None
    assert end.ended == c.STOP_HOOK and end.turn == 1 and end.host_pid == host
    assert end.agent_pid == state.agent_pid and end.result
    assert end.session_id == state.session_id and end.session_id
    assert end.usage == {"input_tokens": 10, "output_tokens": len("hello there")}
    assert (run / "result.md").read_text() == "answer: hello there\n"
    summary = json.loads((run / "agent.json").read_text())
    assert summary["outcome"] == "succeeded" and summary["result_path"] == "result.md"
    assert summary["session_id"] == end.session_id
    header, *events = (run / c.CAST_FILE).read_text().splitlines()
    head = json.loads(header)
    assert head["version"] == 2 and (head["width"], head["height"]) == (120, 40)
    frames = [json.loads(e) for e in events]
    assert all(f[1] == "o" and isinstance(f[0], float) for f in frames)
    assert "answer: hello there" in "".join(f[2] for f in frames)
    log = (run / "job.log").read_text()
    assert "answer: hello there" in log and "turn 1 ended: stop_hook" in log
    poll_until(lambda: (session.state() or _no).state == c.IDLE, WAIT, "idle again")
    # the request goes last, after turn.json
    poll_until(lambda: not list((session.dir / c.REQUESTS_DIR).iterdir()), WAIT, "no request")


def test_three_messages_dropped_at_once_run_in_order_in_one_agent(session: Session) -> None:
    session.start()
    runs = [session.send(f"message {i}") for i in range(3)]
    ends = [session.ended(run) for run in runs]
    assert [e.turn for e in ends] == [1, 2, 3]
    assert len({e.agent_pid for e in ends}) == 1
    assert [(r / "result.md").read_text() for r in runs] == [
        f"answer: message {i}\n" for i in range(3)
    ]
    assert ends[0].finished_at <= ends[1].started_at and ends[1].finished_at <= ends[2].started_at
    state = session.state()
    assert state is not None and state.turns == 3
    assert state.usage == {"input_tokens": 30, "output_tokens": 3 * len("message 0")}


def test_a_turn_without_a_marker_ends_by_the_session_log(session: Session) -> None:
    session.start(settle=0.5)
    end = session.ended(session.send("quiet please"))
    assert end.ended == c.SESSION_LOG and end.result


def test_a_turn_past_its_timeout_ends_timeout(session: Session) -> None:
    session.start()
    run = session.send("hang", timeout=1.0)
    end = session.ended(run)
    assert end.ended == c.TIMEOUT and not end.result
    assert json.loads((run / "agent.json").read_text())["outcome"] is None


def test_interrupt_ends_the_turn_and_the_next_message_runs_in_the_same_agent(
    session: Session,
) -> None:
    session.start()
    slow = session.send("slow")
    poll_until(lambda: b"tick" in cast_of(slow), WAIT, "ticks")
    reply = client.request(session.dir, "interrupt")
    assert reply == {"ok": True, "job": slow.name}
    first = session.ended(slow)
    assert first.ended == c.INTERRUPTED
    second = session.ended(session.send("after"))
    assert second.ended == c.STOP_HOOK and second.agent_pid == first.agent_pid
    assert (session.state() or _no).live


def test_an_answer_only_the_stop_hook_carries_is_the_turns_result(session: Session) -> None:
    """The log has the message but no answer (Claude Code 2.1.197 at times): the turn
    ends by its marker once the log had its moment, with the hook's answer."""
    session.start()
    run = session.send("hooked no log")
    end = session.ended(run)
    assert end.ended == c.STOP_HOOK and end.result
    assert (run / "result.md").read_text() == "answer: hooked no log\n"


def test_a_nudge_queued_by_a_busy_agent_has_its_turn_before_the_next_message(
    session: Session,
) -> None:
    """The agent is silent past idle_timeout: the nudge is typed, the agent queues it,
    answers the message (its Stop marker), then, after a second at its prompt, answers
    the nudge as a turn of its own. The next message waits for that turn's marker: typed
    sooner, it would be queued behind the nudge and take the nudge's answer for its own."""
    session.start()
    first = session.send("stall", idle_timeout=2.0, on_idle="nudge", max_nudges=1)
    second = session.send("after")
    assert session.ended(first).ended == c.STOP_HOOK
    assert (first / "result.md").read_text() == "answer: stall\n"
    events = [json.loads(x) for x in (first / "events.jsonl").read_text().splitlines()]
    assert [e["why"] for e in events if e["event"] == "nudge"] == ["idle"]
    end = session.ended(second)
    assert end.ended == c.STOP_HOOK
    assert (second / "result.md").read_text() == "answer: after\n"
    log = (session.dir / "fake.log.jsonl").read_text().splitlines()
    said = [json.loads(x)["message"]["content"] for x in log if '"user"' in x]
    assert said[0] == "stall" and said[1].startswith("You have printed nothing")
    assert said[2:] == ["after"], said


def test_a_turn_crossing_max_tokens_is_interrupted_and_the_session_lives_on(
    session: Session,
) -> None:
    session.start()
    over = session.send("spend 500", max_tokens=100)
    end = session.ended(over)
    assert end.ended == c.BUDGET
    assert end.detail == (
        "max_tokens 100 reached: spent 510 tokens (cost unknown: the agent reports tokens "
        'only; no [prices."fake-model"] in the config); raise max_tokens in the front '
        "matter or [agents.fake]"
    )
    assert end.usage == {"input_tokens": 10, "output_tokens": 500}
    summary = json.loads((over / "agent.json").read_text())
    assert summary["outcome"] == "budget_exceeded" and summary["detail"] == end.detail
    # "spend" ticks until Esc: the next turn runs only if the interrupt keys were typed
    within = session.ended(session.send("after", max_tokens=100))
    assert within.ended == c.STOP_HOOK and within.agent_pid == end.agent_pid
    assert (session.state() or _no).live


def test_a_turn_crossing_max_cost_usd_is_priced_by_the_logs_model(session: Session) -> None:
    """The session log carries no cost: the tokens are priced by the [prices] row of the
    model the log names (the request's [agents.NAME] model is the fallback)."""
    session.start()
    row = {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}
    priced = {"max_cost_usd": 0.5, "model": "other", "prices": {"fake-model": row}}
    under = session.ended(session.send("spend 300", timeout=2.0, **priced))  # $0.31
    assert under.ended == c.TIMEOUT
    over = session.ended(session.send("spend 500", **priced))  # $0.51
    assert over.ended == c.BUDGET and over.agent_pid == under.agent_pid
    assert over.detail == (
        "max_cost_usd 0.5 reached: spent $0.5100 (510 tokens); raise max_cost_usd in the "
        "front matter or [agents.fake]"
    )


def test_two_interrupts_within_two_seconds_close_the_session(session: Session) -> None:
    session.start()
    slow = session.send("slow")
    poll_until(lambda: b"tick" in cast_of(slow), WAIT, "ticks")
    client.request(session.dir, "interrupt")
    assert client.request(session.dir, "interrupt") == {"ok": True, "closed": True}
    state = session.gone()
    assert state.ended_reason == c.ENDED_CLOSED
    assert not identity.is_alive(state.agent_pid, identity.start_time(state.agent_pid or 0))


def test_an_idle_session_ends_and_a_new_host_resumes_it(session: Session) -> None:
    session.start(session_idle=1.0)
    end = session.ended(session.send("remember"))
    state = session.gone()
    assert state.ended_reason == c.ENDED_IDLE and state.session_id == end.session_id
    assert not (session.dir / c.SOCKET_NAME).exists()
    session.start(resume_id=state.session_id)
    run = session.send("again")
    again = session.ended(run)
    assert again.session_id == end.session_id and again.agent_pid != end.agent_pid
    assert f"resumed {end.session_id}" in (run / c.CAST_FILE).read_text()


def test_close_ends_the_agent_and_a_turn_in_progress(session: Session) -> None:
    session.start()
    slow = session.send("slow")
    poll_until(lambda: (session.state() or _no).state == c.BUSY, WAIT, "busy")
    assert client.request(session.dir, "close")["ok"] is True
    assert session.ended(slow).ended == c.SESSION_ENDED
    state = session.gone()
    assert state.ended_reason == c.ENDED_CLOSED and state.agent_pid
    poll_until(lambda: not os.path.exists(f"/proc/{state.agent_pid}"), WAIT, "agent gone")
    with pytest.raises(client.HostUnreachable):
        client.request(session.dir, "poke", timeout=2.0)


def test_sigterm_to_the_host_closes_the_session(session: Session) -> None:
    host = session.start()
    os.kill(host, signal.SIGTERM)
    assert session.gone().ended_reason == c.ENDED_CLOSED


def test_an_agent_that_exits_mid_turn_ends_the_turn_and_the_session(session: Session) -> None:
    session.start()
    assert session.ended(session.send("exit")).ended == c.AGENT_EXITED
    assert session.gone().ended_reason == c.ENDED_AGENT


def test_memory_max_ends_the_session(session: Session) -> None:
    session.start(memory_max=200 * 1024 * 1024)
    session.ended(session.send("eat 300"))
    state = session.gone()
    assert state.ended_reason == c.ENDED_MEMORY and "memory_max" in state.detail


def test_a_host_of_one_job_ends_with_it(session: Session) -> None:
    session.start(own_job="only")
    session.ended(session.send("just this", job="only"))
    assert session.gone().ended_reason == c.ENDED_JOB


def test_terminal_cast_is_cut_at_its_cap(session: Session) -> None:
    session.start()
    run = session.send("slow", cast_max=2000)
    poll_until(lambda: b"cut at 2000" in cast_of(run), WAIT, "the cut")
    client.request(session.dir, "interrupt")
    session.ended(run)
    data = (run / c.CAST_FILE).read_bytes()
    assert len(data) < 2200 and data.rstrip().endswith(b'bytes\\r\\n"]')


def test_attach_read_only_sees_the_terminal_and_cannot_type(session: Session) -> None:
    session.start()
    sock, first = client.attach(session.dir, read_only=True)
    try:
        sock.settimeout(WAIT)
        seen = bytearray(first)
        while b"READY> " not in seen:  # the screen so far comes first
            seen += sock.recv(4096)
        sock.sendall(b"typed by a watcher\r")
        run = session.send("seen live")
        while b"answer: seen live" not in seen:
            seen += sock.recv(4096)
        session.ended(run)
    finally:
        sock.close()
    log = (session.dir / "fake.log.jsonl").read_text()
    assert "typed by a watcher" not in log


def test_attach_read_write_types_into_the_agent(session: Session) -> None:
    session.start()
    sock, _ = client.attach(session.dir, read_only=False)
    try:
        sock.sendall(b"by hand\r")
        poll_until(
            lambda: (
                "by hand" in (session.dir / "fake.log.jsonl").read_text(errors="replace")
                if (session.dir / "fake.log.jsonl").exists()
                else False
            ),
            WAIT,
            "the typed message answered",
        )
    finally:
        sock.close()


def test_an_agent_that_cannot_start_ends_the_session_start_failed(tmp_path: Path) -> None:
    class Missing(FakeAgent):
        def argv(self, resume_id: str | None) -> list[str]:
            return [str(tmp_path / "no-such-cli")]

    folder = tmp_path / "s"
    (folder / c.REQUESTS_DIR).mkdir(parents=True)
    spec = HostSpec("s", "fake", str(folder), str(tmp_path), {}, {"PATH": os.environ["PATH"]})
    assert Host(spec, Missing()).run() == 1
    state = c.read_session(folder)
    assert state is not None and state.state == c.ENDED
    assert state.ended_reason == c.ENDED_FAILED and "no-such-cli" in state.detail


def test_a_launch_that_never_reports_a_pid_fails_within_its_deadline(tmp_path: Path) -> None:
    spec = HostSpec("s", "fake", str(tmp_path / "s"), str(tmp_path), {}, {})
    with pytest.raises(LaunchFailed, match="did not start within"):
        launch(spec, argv=[sys.executable, "-c", "import time; time.sleep(30)"], timeout=1.0)
    with pytest.raises(LaunchFailed, match="did not report its pid"):
        launch(spec, argv=[sys.executable, "-c", "print('nonsense')"])


def test_a_bad_request_line_is_refused(session: Session) -> None:
    session.start()
    sock = client.connect(session.dir, 5.0)
    try:
        sock.sendall(b'{"op": "dance"}\n')
        reply, _ = client.read_reply(sock, __import__("time").monotonic() + WAIT)
    finally:
        sock.close()
    assert reply["ok"] is False and "unknown request" in str(reply["error"])
