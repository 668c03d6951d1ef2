"""Interactive Claude Code, for real: each pinned CLI in a raw PTY against the model server.

No session host here: the test plays its part with agents/interactive.py's
agent (prepare, argv, env, ready, type_prompt, interrupt_keys, markers,
read_log) and core/sessions.py's judgement, in a fresh HOME holding nothing
but what ``prepare`` writes, the API key in the environment. Binaries come from
scripts/install-agents; missing ones fail the test (CI installs them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptyagent import PtyAgent

from agents_env import CLAUDE_VERSIONS, claude_bin, claude_env
from hopper.agents.interactive import SUBMIT_GAP, InteractiveAgent, agent_for
from hopper.core.sessions import (
    Usage,
    UsageTally,
    agent_state,
    log_session_id,
    tally_usage,
    turn_result,
    turn_usage,
    turn_verdict,
)
from modelserver import ModelServer, last_user_text, text, tool

TURN = 60  # seconds a scripted turn may take on a loaded machine (normally 1-3)


@dataclass
class Session:
    """One interactive CLI and what the test has read of it so far."""

    agent: InteractiveAgent
    session_dir: Path
    workdir: Path
    env: dict[str, str]
    pty: PtyAgent | None = None
    offset: int = 0
    tally: UsageTally = field(default_factory=UsageTally)

    def start(self, resume_id: str | None = None) -> None:
        self.pty = PtyAgent(self.agent.argv(resume_id), self.workdir, self.agent.env(self.env))
        self.pty.wait_ready(self.agent)

    def turn(self, prompt: str) -> tuple[dict[str, Any], list[dict[str, Any]], Usage]:
        """Type ``prompt``; once its Stop marker shows: the marker, the turn's log
        entries and its usage."""
        assert self.pty is not None
        before = len(self.agent.markers(self.session_dir))
        self.type(prompt)
        self.pty.wait(
            lambda: len(self.agent.markers(self.session_dir)) > before, TURN, "the Stop marker"
        )
        marker = json.loads(self.agent.markers(self.session_dir)[-1].read_text())
        used_before = self.tally.usage
        entries = self.read_until_result(prompt)
        return marker, entries, turn_usage(used_before, self.tally.usage)

    def type(self, prompt: str) -> None:
        """As the session host types: the paste and Enter, Enter again a moment later."""
        assert self.pty is not None
        self.pty.type(self.agent.type_prompt(prompt))
        self.pty.pump_for(SUBMIT_GAP)
        self.pty.type(self.agent.submit_keys())

    def read_until_result(self, prompt: str | None = None) -> list[dict[str, Any]]:
        """The log's new entries, read until the answer to ``prompt`` (its user entry
        seen, then the agent waiting) is in: the Stop marker can come before the log
        has the answer. Entries before ``prompt``'s own are left out."""
        entries: list[dict[str, Any]] = []

        def answered() -> bool:
            got = self.agent.read_log(None, self.offset)
            self.offset = got.offset
            self.tally = tally_usage(self.tally, got.entries)  # the session's running totals
            entries.extend(got.entries)
            if prompt is not None:
                starts = [i for i, e in enumerate(entries) if prompt in _user_text(e)]
                if not starts:
                    return False
                del entries[: starts[0]]
            return agent_state(entries, now=100.0, last_change=0.0) == "waiting_for_input"

        assert self.pty is not None
        try:
            self.pty.wait(answered, TURN, "the answer in the session log")
        except AssertionError as exc:
            tail = [(e.get("type"), e.get("subtype"), str(e.get("message"))[:200]) for e in entries]
            marks = [m.read_text()[-400:] for m in self.agent.markers(self.session_dir)]
            raise AssertionError(f"{exc}\nlog entries: {tail[-6:]}\nmarkers: {marks}") from None
        return entries


def _user_text(entry: dict[str, Any]) -> str:
    if entry.get("type") != "user":
        return ""
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return "".join(str(b.get("text") or "") for b in blocks if isinstance(b, dict))


@pytest.fixture(params=list(CLAUDE_VERSIONS), ids=lambda v: f"claude-{v}")
def session(request: pytest.FixtureRequest, srv: ModelServer, tmp_path: Path) -> Iterator[Session]:
    binary = claude_bin(request.param)
    if binary is None:
        pytest.fail(
            f"agent CLIs not installed: run scripts/install-agents (Claude {request.param})"
        )
    work = tmp_path / "work"
    work.mkdir()
    env = claude_env(tmp_path / "home", srv.url)  # a fresh HOME: nothing in it
    agent = agent_for({"kind": "claude", "bin": binary, "permission_mode": "bypassPermissions"})
    s = Session(agent, tmp_path / "session", work, env)
    agent.prepare(s.session_dir, work, env)
    yield s
    if s.pty is not None:
        s.pty.close()


def test_a_fresh_home_runs_a_tool_call_and_a_second_turn_in_one_process(
    session: Session, srv: ModelServer
) -> None:
    # the project's own settings keep their hooks; hopper's file adds its own
    project = session.workdir / ".claude"
    project.mkdir()
    mine = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "touch stopped.txt"}]}]}}
    (project / "settings.json").write_text(json.dumps(mine))
    srv.script([tool("touch made.txt"), text("Created made.txt."), text("Second answer.")])
    session.start()
    assert session.pty is not None
    pid = session.pty.pid

    marker, entries, used = session.turn("Create made.txt please")
    assert (session.workdir / "made.txt").exists()
    assert marker["hook_event_name"] == "Stop"
    assert marker["session_id"] == session.agent.session_id == log_session_id(entries)
    assert Path(marker["transcript_path"]).name == f"{session.agent.session_id}.jsonl"
    assert turn_result(entries) == "Created made.txt."
    assert used == Usage(20, 10, 0, 0, None)  # two model messages of 10 in / 5 out
    end = turn_verdict(markers=1, entries=entries, now=0.0, last_change=0.0, deadline=None)
    assert end is not None and end.how == "stop_hook"
    assert (session.workdir / "stopped.txt").exists()  # the project's hook ran too
    assert json.loads((project / "settings.json").read_text()) == mine

    marker, entries, used = session.turn("Now a second question")
    assert turn_result(entries) == "Second answer."
    assert used == Usage(10, 5, 0, 0, None)
    assert session.pty.alive() and session.pty.pid == pid
    assert len(session.agent.markers(session.session_dir)) == 2
    assert last_user_text(srv.model_requests()[-1].body) == "Now a second question"


def test_escape_interrupts_a_slow_turn_and_the_session_goes_on(
    session: Session, srv: ModelServer
) -> None:
    srv.script([text("tick\n" * 20, delay=1.0, chunks=20), text("After the interrupt.")])
    session.start()
    assert session.pty is not None
    session.type("Count slowly")
    assert srv.wait_for_deltas(1, TURN)  # the answer is streaming
    session.pty.type(session.agent.interrupt_keys())
    session.pty.wait_ready(session.agent)  # back at the prompt, the stream cut short
    assert srv.deltas_sent < 20
    assert session.agent.markers(session.session_dir) == []  # Esc fires no Stop hook
    _, entries, _ = session.turn("Go on")
    assert turn_result(entries) == "After the interrupt."
    # the interrupted prompt the CLI may have put back in the input box was cleared first
    sent = last_user_text(srv.model_requests()[-1].body) or ""
    assert sent.endswith("Go on") and "slowlyGo on" not in sent
    assert session.pty.alive()


def test_resume_in_a_new_process_goes_on_with_the_conversation(
    session: Session, srv: ModelServer, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.params["session"] == "2.1.197":
        pytest.skip(
            "Claude 2.1.197 at times writes no assistant entry into its session log for the "
            "first turn (the Stop hook's last_assistant_message has the answer): seen in all 3 "
            "runs in the suite's order (after tests/agents/test_budget_jobs.py), in none of 2 "
            "alone; the turn cannot be read from the log (docs/agents.md, 'Between the versions')"
        )
    srv.script([text("Noted."), text("The word was banana.")])
    session.start()
    marker, _, _ = session.turn("Remember the word banana")
    first_id = marker["session_id"]
    assert session.pty is not None
    session.pty.close()  # the log read so far stays read: the resumed CLI appends to it

    session.start(resume_id=first_id)
    marker, entries, _ = session.turn("What was the word?")
    assert marker["session_id"] == first_id == session.agent.session_id
    assert turn_result(entries) == "The word was banana."
    texts = [
        last_user_text({"messages": [m]}) or "" for m in srv.model_requests()[-1].body["messages"]
    ]
    assert any("Remember the word banana" in t for t in texts)
    assert texts[-1] == "What was the word?"
