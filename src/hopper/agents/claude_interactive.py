"""Claude Code in interactive mode: what the session host needs to know about it.

Standard library only (the session host imports it). Tried with the pinned
2.1.330 and 2.1.197 in a raw PTY against the suite's model server:

* Unattended start: the CLI's own config gets the first-run answers
  (agents/claude_config.py); ``--permission-mode bypassPermissions`` also asks
  "Yes, I accept", answered by ``skipDangerousModePermissionPrompt`` in the
  settings file hopper passes with ``--settings`` (flag settings: the CLI
  honours the key there, and the user's files stay untouched).
* The settings file (``<session dir>/claude-settings.json``) holds the Stop
  hook; the CLI merges flag settings with the user's and the project's
  ``.claude/settings.json``, and runs the hooks of every source.
* The Stop hook gets JSON on stdin: ``session_id``, ``transcript_path`` (the
  session log), ``cwd``, ``hook_event_name: "Stop"``, ``last_assistant_message``.
  It fires when a turn ends, not when Esc interrupts one.
* The session log is ``<config dir>/projects/<cwd with / as ->/<id>.jsonl``:
  ``user`` / ``assistant`` entries (``message.usage`` on each assistant entry;
  one message's blocks may come as several entries with the same
  ``message.id``), ``system`` entries (``stop_hook_summary``, ``turn_duration``)
  and bookkeeping lines. No cost is written there.
* A prompt is typed as one bracketed paste, then Enter (CR). 2.1.197 takes an
  Enter that comes in the same read as the paste into the paste (the prompt
  sits there unsent), so Enter is pressed again a moment later; an Enter on an
  empty prompt does nothing. 2.1.197 also probes the terminal (DA1, XTVERSION,
  DECRQM) a second after drawing its prompt and drops what is typed before the
  answers (or their time-out): the host answers them (``terminal_replies``) and
  waits for a quiet screen before typing. Esc interrupts a turn; one interrupted
  before the answer shows puts the prompt back in the input box ("Esc again to
  clear"), so a typed prompt starts with Ctrl+U (clear the line); one
  interrupted mid-answer logs a user entry "[Request interrupted by user]".
  Either way no Stop hook fires and the CLI waits for input again.
* ``--session-id <uuid>`` names a new conversation, ``--resume <id>`` goes on
  with one in a new process (same id, same log), in the same workdir.
* 2.1.197 asks the model for a session title beside the first turn's request.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hopper.agents import stophook
from hopper.agents.base import extra_args
from hopper.agents.claude_config import config_dir, merge_config
from hopper.agents.sessionlog import LogSlice, read_slice
from hopper.errors import HopperError
from hopper.store.atomic import write_atomic
from hopper.store.saferead import read_json

SETTINGS_FILE = "claude-settings.json"
PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
ENTER = b"\r"
CLEAR_LINE = b"\x15"  # Ctrl+U: what an interrupt put back in the input box goes
ESCAPE = b"\x1b"
# Control characters a prompt may not carry into the terminal (all but \t and \n):
# an ESC could end the paste early and type keys.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_PROMPT = "\u276f"  # the input box's prompt; also a dialog's selection cursor
_SESSION_ID = re.compile(r"[0-9a-fA-F-]{8,64}")
# After the input prompt on a screen where the CLI waits for a message: its footer.
_FOOTER_HINTS = ("shortcuts", "foragents", "permissionson", "/effort", "─")
_DIALOG_HINTS = ("toconfirm", "tocancel", "entertoselect")
_BUSY_HINTS = ("esctointerrupt",)


class ClaudeInteractive:
    """One Claude Code agent spec (agent.spec.json's keys) in interactive mode."""

    kind = "claude"

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)
        self.session_dir: Path | None = None
        self.home_env: dict[str, str] = {}
        self.session_id: str | None = None  # the conversation argv() started or resumed
        self._log: Path | None = None

    # -- before the start
    def prepare(self, session_dir: Path, workdir: Path, env: Mapping[str, str]) -> None:
        """The CLI's config answers first-run dialogs for ``workdir``; the hook settings file."""
        self.session_dir = session_dir
        self.home_env = dict(env)
        merge_config(env, workdir)
        settings: dict[str, Any] = {"hooks": {"Stop": [{"hooks": [hook_entry()]}]}}
        if self.spec.get("permission_mode") == "bypassPermissions":
            settings["skipDangerousModePermissionPrompt"] = True
        session_dir.mkdir(parents=True, exist_ok=True)
        data = json.dumps(settings, indent=2) + "\n"
        write_atomic(session_dir / SETTINGS_FILE, data.encode(), mode=0o600)

    def argv(self, resume_id: str | None) -> list[str]:
        """The interactive command: ``--resume`` an id, else a new ``--session-id``."""
        if self.session_dir is None:
            raise RuntimeError("prepare() comes before argv()")
        argv = [str(self.spec["bin"]), "--settings", str(self.session_dir / SETTINGS_FILE)]
        if self.spec.get("permission_mode"):
            argv += ["--permission-mode", str(self.spec["permission_mode"])]
        if self.spec.get("model"):
            argv += ["--model", str(self.spec["model"])]
        self.session_id = resume_id or str(uuid.uuid4())
        self._log = None
        argv += ["--resume" if resume_id else "--session-id", self.session_id]
        return argv + extra_args(self.spec)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus what the hook and an unattended terminal need."""
        if self.session_dir is None:
            raise RuntimeError("prepare() comes before env()")
        out = dict(base)
        out[stophook.SESSION_DIR_VAR] = str(self.session_dir)
        # 2.1.197 warns on screen about a missing ~/.local/bin/claude otherwise
        out.setdefault("DISABLE_INSTALLATION_CHECKS", "1")
        if out.get("TERM", "dumb") == "dumb":
            out["TERM"] = "xterm-256color"
        out.pop("NO_COLOR", None)
        return out

    # -- at the terminal
    def ready(self, screen_tail: bytes) -> bool:
        """Is the CLI at its input prompt (not a dialog, not working)?"""
        return at_prompt(screen_tail)

    def type_prompt(self, text: str) -> bytes:
        """``text`` as one bracketed paste, then Enter."""
        return typed(text)

    def submit_keys(self) -> bytes:
        """Enter again, a moment after the paste (see InteractiveAgent.submit_keys)."""
        return ENTER

    def interrupt_keys(self) -> bytes:
        return ESCAPE

    # -- after a turn
    def markers(self, session_dir: Path) -> list[Path]:
        return stop_markers(session_dir)

    def stop_answer(self, marker: Path) -> str | None:
        """``last_assistant_message`` of the Stop hook's input (Claude Code 2.1.197 at
        times logs no assistant entry for a turn whose hook carries the answer)."""
        try:
            data = read_json(marker, stophook.INPUT_CAP)
        except (OSError, HopperError):
            return None
        answer = data.get("last_assistant_message") if isinstance(data, dict) else None
        return answer if isinstance(answer, str) and answer else None

    def read_log(self, session_id: str | None, offset: int) -> LogSlice:
        """New entries of the conversation's log after ``offset`` (empty: no log yet)."""
        sid = session_id or self.session_id
        if not sid or not _SESSION_ID.fullmatch(sid):
            return LogSlice(offset=offset)
        if self._log is None or self._log.stem != sid:
            self._log = find_log(config_dir(self.home_env or dict(os.environ)), sid)
        if self._log is None:
            return LogSlice(offset=offset)
        return read_slice(self._log, offset)


def hook_entry() -> dict[str, Any]:
    """The Stop hook's settings entry: this Python running agents/stophook.py."""
    command = shlex.join([sys.executable, "-I", "-S", stophook.__file__])
    return {"type": "command", "command": command, "timeout": 30}


def typed(text: str) -> bytes:
    """The bytes that clear the input line, type ``text`` as one paste and press Enter
    (control characters dropped)."""
    clean = _CONTROLS.sub("", text.replace("\r\n", "\n").replace("\r", "\n")).strip("\n")
    return CLEAR_LINE + PASTE_START + clean.encode() + PASTE_END + ENTER


def screen_text(tail: bytes) -> str:
    """The tail with escape sequences and all whitespace taken out (the CLI draws
    spaces as cursor moves, so words run together either way)."""
    plain = _ANSI.sub(b"", tail).decode("utf-8", "replace")
    return "".join(plain.split()).lower()


def at_prompt(tail: bytes) -> bool:
    """After the last prompt sign on screen: the input box's footer, no dialog, not busy."""
    text = screen_text(tail)
    at = text.rfind(_PROMPT)
    if at < 0:
        return False
    after = text[at + 1 :]
    if any(h in after for h in _DIALOG_HINTS + _BUSY_HINTS):
        return False
    return any(h in after for h in _FOOTER_HINTS)


def stop_markers(session_dir: Path) -> list[Path]:
    """The Stop hook's markers so far, oldest first (temporary names left out)."""
    folder = session_dir / stophook.MARKERS
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [folder / n for n in sorted(names) if n.startswith("stop-") and n.endswith(".json")]


def find_log(conf: Path, session_id: str) -> Path | None:
    """``<config dir>/projects/*/<session_id>.jsonl``, if the CLI has written it."""
    projects = conf / "projects"
    try:
        folders = sorted(os.scandir(projects), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for entry in folders:
        if entry.is_dir(follow_symlinks=False):
            candidate = Path(entry.path) / f"{session_id}.jsonl"
            if candidate.exists():
                return candidate
    return None
