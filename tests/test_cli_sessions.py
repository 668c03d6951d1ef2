"""hopper sessions / sessions close / interrupt / attach, against a real host (fake agent)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from hopper.cli.attach import detach_filter
from hopper.sessionhost import contract as c
from hopper.store.layout import Layout
from sessionhosts import WAIT, Session, cast_of
from test_watch_tmux import Tmux
from waiting import poll_until

Hopper = Callable[..., CompletedProcess[str]]


@pytest.fixture
def live(layout: Layout) -> Iterator[Session]:
    s = Session(layout.root, layout.root / "sessions" / "s")
    s.tmp = layout.root  # runs/<job> under the root
    yield s
    s.cleanup()


def test_sessions_lists_a_live_session_as_table_and_json(live: Session, hopper: Hopper) -> None:
    host = live.start()
    live.ended(live.send("hi"))
    out = hopper("sessions", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["name"] == "s" and row["agent"] == "fake" and row["state"] == "idle"
    assert row["pid"] == host and row["turns"] == 1 and row["age_seconds"] >= 0
    assert row["idle_seconds"] is not None and row["usage"]["input_tokens"] == 10
    table = hopper("sessions").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGENT", "STATE", "PID", "AGE", "IDLE", "TURNS", "COST"]
    assert table[1].split()[:4] == ["s", "fake", "idle", str(host)]


def test_sessions_close_ends_it_and_then_lists_it_only_with_all(
    live: Session, hopper: Hopper
) -> None:
    live.start()
    out = hopper("sessions", "close", "s")
    assert out.returncode == 0 and "closing" in out.stdout, out.stderr
    assert live.gone().ended_reason == c.ENDED_CLOSED
    assert hopper("sessions").stdout.startswith("no live sessions")
    (row,) = json.loads(hopper("sessions", "--all", "--json").stdout)
    assert row["state"] == "ended" and row["ended_reason"] == "closed"
    again = hopper("sessions", "close", "s")
    assert again.returncode == 1 and "not live (ended)" in again.stderr


def test_a_session_whose_host_died_shows_dead(live: Session, hopper: Hopper) -> None:
    live.start()
    live.cleanup()  # SIGKILL: session.json still says idle
    poll_until(
        lambda: json.loads(hopper("sessions", "--json").stdout)[0]["state"] == "dead",
        WAIT,
        "dead",
    )


def test_interrupt_by_name_ends_the_turn(live: Session, hopper: Hopper) -> None:
    live.start()
    run = live.send("slow")
    poll_until(lambda: b"tick" in cast_of(run), WAIT, "ticks")
    out = hopper("interrupt", "s")
    assert out.returncode == 0 and f"interrupted job {run.name}" in out.stdout, out.stderr
    assert live.ended(run).ended == c.INTERRUPTED


def test_commands_on_an_unknown_session_fail_with_a_hint(hopper: Hopper) -> None:
    for args in (("interrupt", "nope"), ("attach", "nope")):
        out = hopper(*args)
        assert out.returncode == 1 and "nope" in out.stderr
    out = hopper("sessions", "close", "nope")
    assert out.returncode == 1 and "no such session" in out.stderr


def test_detach_filter_passes_keys_and_detaches_on_ctrl_backslash_d() -> None:
    assert detach_filter(b"abc", False) == (b"abc", False, False)
    assert detach_filter(b"ab\x1c", False) == (b"ab", True, False)
    assert detach_filter(b"d", True) == (b"", False, True)
    assert detach_filter(b"x\x1cq", False) == (b"x\x1cq", False, False)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_attach_read_only_in_tmux_shows_the_live_agent_and_detaches(
    live: Session, layout: Layout, config_file: Path
) -> None:
    live.start()
    tmux = Tmux()
    try:
        cmd = shlex.join(
            [sys.executable, "-m", "hopper", "attach", "s", "--read-only",
             "--root", str(layout.root), "--config", str(config_file)]
        )  # fmt: skip
        tmux("new-session", "-d", "-s", "w", "-x", "120", "-y", "30", "sh", "-c",
             f"{cmd}; echo EXIT=$?; cat")  # fmt: skip
        poll_until(lambda: "READY>" in tmux.screen(), WAIT, "the agent's prompt")
        assert "read-only" in tmux.screen()
        tmux("send-keys", "-t", "w", "-l", "not typed")
        tmux("send-keys", "-t", "w", "Enter")
        run = live.send("shown in tmux")
        poll_until(lambda: "answer: shown in tmux" in tmux.screen(), WAIT, "the answer live")
        live.ended(run)
        tmux("send-keys", "-t", "w", "C-\\")
        tmux("send-keys", "-t", "w", "d")
        poll_until(lambda: "EXIT=0" in tmux.screen(), WAIT, "detached")
        assert "the agent keeps running" in tmux.screen()
        assert (live.state() or c.SessionState("", "", "", "", 0, None, "", "")).live
        assert "not typed" not in (live.dir / "fake.log.jsonl").read_text()
    finally:
        tmux.kill()
