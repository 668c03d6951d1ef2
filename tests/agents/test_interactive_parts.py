"""Interactive Claude's parts without the CLI: config merge, settings, typing, the hook,
the screen, the session log reader. (The real CLIs: test_interactive_claude.py.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from hopper.agents import stophook
from hopper.agents.claude_config import ClaudeConfigError, config_path, merge_config
from hopper.agents.claude_interactive import SETTINGS_FILE, at_prompt, typed
from hopper.agents.interactive import NotInteractive, agent_for, terminal_replies
from hopper.agents.sessionlog import read_slice
from hopper.store.saferead import UnreadableFile

KEY = "sk-ant-test-0123456789abcdefghij-offline"


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "ANTHROPIC_API_KEY": KEY, **extra}


def test_a_fresh_home_gets_the_three_answers(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    added = merge_config(env_for(tmp_path), work)
    assert len(added.missing()) == 3
    path = tmp_path / ".claude.json"
    config = json.loads(path.read_text())
    assert config["hasCompletedOnboarding"] is True
    assert config["projects"][str(work)]["hasTrustDialogAccepted"] is True
    assert config["customApiKeyResponses"]["approved"] == [KEY[-20:]]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the second time nothing is missing and nothing is written
    before = path.stat().st_mtime_ns
    assert merge_config(env_for(tmp_path), work).missing() == []
    assert path.stat().st_mtime_ns == before


def test_what_the_user_has_is_kept(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / ".claude.json"
    mine = {
        "oauthAccount": {"emailAddress": "me@example.org"},
        "theme": "light",
        "projects": {str(work): {"allowedTools": ["Bash"]}, "/elsewhere": {"x": 1}},
        "customApiKeyResponses": {"approved": ["other"], "rejected": []},
    }
    path.write_text(json.dumps(mine))
    path.chmod(0o640)
    merge_config(env_for(tmp_path), work)
    got = json.loads(path.read_text())
    assert got["oauthAccount"] == mine["oauthAccount"] and got["theme"] == "light"
    assert got["projects"][str(work)] == {"allowedTools": ["Bash"], "hasTrustDialogAccepted": True}
    assert got["projects"]["/elsewhere"] == {"x": 1}
    assert got["customApiKeyResponses"]["approved"] == ["other", KEY[-20:]]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".claude.json")] == [
        ".claude.json"
    ]


def test_a_rejected_key_stays_rejected(tmp_path: Path) -> None:
    (tmp_path / ".claude.json").write_text(
        json.dumps({"customApiKeyResponses": {"approved": [], "rejected": [KEY[-20:]]}})
    )
    need = merge_config(env_for(tmp_path), tmp_path)
    assert need.key_rejected and need.approve_key is None
    got = json.loads((tmp_path / ".claude.json").read_text())["customApiKeyResponses"]
    assert got == {"approved": [], "rejected": [KEY[-20:]]}


def test_a_linked_config_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "claude.json").write_text("{}")
    (tmp_path / ".claude.json").symlink_to(dotfiles / "claude.json")
    merge_config(env_for(tmp_path), tmp_path)
    assert (tmp_path / ".claude.json").is_symlink()
    assert json.loads((dotfiles / "claude.json").read_text())["hasCompletedOnboarding"] is True


def test_config_dir_and_legacy_file_are_where_the_cli_looks(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    assert config_path(env_for(tmp_path)) == tmp_path / ".claude.json"
    assert config_path(env_for(tmp_path, CLAUDE_CONFIG_DIR=str(conf))) == conf / ".claude.json"
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / ".config.json").write_text("{}")
    assert config_path(env_for(tmp_path)) == tmp_path / ".claude" / ".config.json"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_a_broken_config_is_named_and_never_overwritten(tmp_path: Path, content: str) -> None:
    path = tmp_path / ".claude.json"
    path.write_text(content)
    with pytest.raises(ClaudeConfigError) as err:
        merge_config(env_for(tmp_path), tmp_path)
    assert str(path) in str(err.value) and "move the file aside" in str(err.value)
    assert path.read_text() == content


def test_a_fifo_config_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ".claude.json")
    with pytest.raises(ClaudeConfigError, match="not a regular file"):
        merge_config(env_for(tmp_path), tmp_path)


def test_no_home_is_an_error_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ClaudeConfigError, match="HOME is not set"):
        merge_config({"ANTHROPIC_API_KEY": KEY}, tmp_path)


def spec(**extra: object) -> dict[str, object]:
    return {"kind": "claude", "bin": "/opt/claude", **extra}


def test_argv_settings_and_env(tmp_path: Path) -> None:
    agent = agent_for(spec(permission_mode="bypassPermissions", model="m1", args=["--x"]))
    session = tmp_path / "session"
    agent.prepare(session, tmp_path, env_for(tmp_path))
    settings = json.loads((session / SETTINGS_FILE).read_text())
    assert settings["skipDangerousModePermissionPrompt"] is True
    (hook,) = settings["hooks"]["Stop"][0]["hooks"]
    assert hook["type"] == "command" and stophook.__file__ in hook["command"]
    argv = agent.argv(None)
    new_id = agent.session_id
    assert new_id is not None
    assert argv == [
        "/opt/claude",
        "--settings",
        str(session / SETTINGS_FILE),
        "--permission-mode",
        "bypassPermissions",
        "--model",
        "m1",
        "--session-id",
        new_id,
        "--x",
    ]
    assert agent.argv("abc-123")[-3:] == ["--resume", "abc-123", "--x"]
    env = agent.env({"TERM": "dumb", "NO_COLOR": "1", "PATH": "/bin"})
    assert env["HOPPER_SESSION_DIR"] == str(session) and env["TERM"] == "xterm-256color"
    assert "NO_COLOR" not in env and env["PATH"] == "/bin"


def test_default_mode_needs_no_bypass_consent(tmp_path: Path) -> None:
    agent = agent_for(spec())
    agent.prepare(tmp_path / "s", tmp_path, env_for(tmp_path))
    assert "skipDangerousModePermissionPrompt" not in json.loads(
        (tmp_path / "s" / SETTINGS_FILE).read_text()
    )


def test_other_agents_have_no_interactive_mode() -> None:
    with pytest.raises(NotInteractive, match="codex"):
        agent_for({"kind": "codex"})


def test_a_prompt_is_one_paste_and_enter_with_no_way_out_of_the_paste() -> None:
    assert typed("hello\nworld") == b"\x15\x1b[200~hello\nworld\x1b[201~\r"
    hostile = "a\x1b[201~\x03\rb\x1b"
    assert typed(hostile) == b"\x15\x1b[200~a[201~\nb\x1b[201~\r"
    assert typed("é ✓") == "\x15\x1b[200~é ✓\x1b[201~\r".encode()


READY_330 = (
    "\x1b[2m\u276f\x1b[0m \x1b[10C\u2500\u2500\u2500\r\n\u23f5\u23f5 bypass permissions on "
    "(shift+tab to cycle) \u00b7 \u2190 for agents"
).encode()
READY_197 = "\u276f \r\n\u2500\u2500\u2500\r\n? for shortcuts \u00b7 \u2190 for agents".encode()
DIALOG = "\u276f No, exit\r\n  Yes, I accept\r\n\r\nEnter to confirm \u00b7 Esc to cancel".encode()
BUSY = "\u276f \r\n\u2500\u2500\r\n\u00b7 esc to interrupt \u00b7 \u2190 for agents".encode()


def test_the_screen_says_when_the_input_prompt_waits() -> None:
    assert at_prompt(READY_330) and at_prompt(READY_197)
    assert not at_prompt(DIALOG) and not at_prompt(BUSY) and not at_prompt(b"Welcome")
    assert at_prompt(DIALOG + READY_330)  # the dialog answered, the prompt drawn after it


def test_terminal_queries_are_answered() -> None:
    assert terminal_replies(b"plain text") == b""
    assert terminal_replies(b"x\x1b[>0q\x1b[c") == b"\x1bP>|hopper\x1b\\\x1b[?62;22c"
    assert terminal_replies(b"\x1b[?2026$p\x1b[6n") == b"\x1b[?2026;2$y\x1b[1;1R"


def test_the_stop_hook_writes_one_whole_marker_per_call(tmp_path: Path) -> None:
    agent = agent_for(spec())
    agent.prepare(tmp_path, tmp_path, env_for(tmp_path))
    hook = json.loads((tmp_path / SETTINGS_FILE).read_text())["hooks"]["Stop"][0]["hooks"][0]
    env = {"HOPPER_SESSION_DIR": str(tmp_path), "PATH": os.environ["PATH"]}
    for n in range(2):
        payload = json.dumps({"session_id": "s1", "hook_event_name": "Stop", "n": n})
        done = subprocess.run(
            hook["command"], shell=True, input=payload.encode(), env=env, capture_output=True
        )
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
    markers = agent.markers(tmp_path)
    assert [json.loads(m.read_text())["n"] for m in markers] == [0, 1]
    assert sorted(os.listdir(tmp_path / "markers")) == [m.name for m in markers]  # no temp
    # without its folder in the environment it does nothing, quietly
    done = subprocess.run(hook["command"], shell=True, input=b"{}", env={}, capture_output=True)
    assert done.returncode == 0 and len(agent.markers(tmp_path)) == 2


def test_the_session_log_is_read_in_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "s.jsonl"
    assert read_slice(log, 0).entries == [] and read_slice(log, 0).path is None
    log.write_bytes(b'{"a": 1}\nnot json\n[1]\n{"b": 2')
    first = read_slice(log, 0)
    assert first.entries == [{"a": 1}] and first.skipped == 2
    with log.open("ab") as f:
        f.write(b"}\n")
    second = read_slice(log, first.offset)
    assert second.entries == [{"b": 2}] and second.offset == log.stat().st_size
    # a line longer than the cap is passed over whole
    log.write_bytes(b'{"long": "' + b"x" * 100 + b'"}\n{"c": 3}\n')
    skipped = read_slice(log, 0, cap=40)
    assert skipped.entries == [] and skipped.skipped == 1
    assert read_slice(log, skipped.offset, cap=40).entries == [{"c": 3}]
    # a log that shrank (rewritten) is read from the start
    log.write_bytes(b'{"d": 4}\n')
    assert read_slice(log, 500).entries == [{"d": 4}]


def test_a_linked_session_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "s.jsonl").symlink_to(tmp_path / "real.jsonl")
    with pytest.raises(UnreadableFile):
        read_slice(tmp_path / "s.jsonl", 0)


def test_read_log_finds_the_conversation_under_projects(tmp_path: Path) -> None:
    agent = agent_for(spec())
    agent.prepare(tmp_path / "s", tmp_path, env_for(tmp_path))
    agent.argv(None)
    sid = agent.session_id
    assert sid is not None
    assert agent.read_log(None, 0).entries == []
    folder = tmp_path / ".claude" / "projects" / "-work"
    folder.mkdir(parents=True)
    (folder / f"{sid}.jsonl").write_text('{"type": "user"}\n')
    got = agent.read_log(None, 0)
    assert got.entries == [{"type": "user"}] and got.path == folder / f"{sid}.jsonl"
    assert agent.read_log("../../etc/passwd", 0).entries == []


def test_the_stop_hooks_answer_is_read_safely(tmp_path: Path) -> None:
    """The answer the Stop hook carries (``last_assistant_message``): read capped and
    never through a link; anything else is no answer."""
    agent = agent_for(spec())
    good = tmp_path / "stop-1.json"
    good.write_text(json.dumps({"session_id": "s1", "last_assistant_message": "Noted."}))
    assert agent.stop_answer(good) == "Noted."
    link = tmp_path / "stop-2.json"
    link.symlink_to(good)
    assert agent.stop_answer(link) is None
    cases = {
        "none": json.dumps({"session_id": "s1"}),
        "empty": json.dumps({"last_assistant_message": ""}),
        "number": json.dumps({"last_assistant_message": 3}),
        "list": "[]",
        "broken": "{not json",
        "huge": json.dumps({"last_assistant_message": "x" * (stophook.INPUT_CAP + 1)}),
    }
    for name, content in cases.items():
        (tmp_path / name).write_text(content)
        assert agent.stop_answer(tmp_path / name) is None, name
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert agent.stop_answer(fifo) is None  # refused without blocking
    assert agent.stop_answer(tmp_path / "missing") is None
