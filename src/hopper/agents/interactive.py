"""Agents run interactively: the CLI in a terminal the session host owns, a turn per message.

Standard library only: the session host (a long-lived process of its own)
imports this. The host starts the command :meth:`InteractiveAgent.argv` gives
in a PTY, in the workdir, with :meth:`InteractiveAgent.env`; waits until
:meth:`ready` says the CLI is at its input prompt; types each message with
:meth:`type_prompt`; and ends a turn when a new Stop-hook marker shows in
:meth:`markers`, else by what the session log says (:meth:`read_log`, judged by
``hopper.core.sessions.turn_verdict``), else by the job's timeout.

Each CLI's knowledge lives in its own module (agents/claude_interactive.py);
:func:`agent_for` picks it from the job's agent spec (agent.spec.json's keys:
``kind``, ``bin``, ``model``, ``permission_mode``, ``args``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from hopper.agents.claude_interactive import ClaudeInteractive
from hopper.agents.sessionlog import LogSlice
from hopper.errors import HopperError

__all__ = [
    "SUBMIT_GAP",
    "InteractiveAgent",
    "LogSlice",
    "NotInteractive",
    "agent_for",
    "terminal_replies",
]

# Queries a TUI sends its terminal, and what hopper answers while no person's
# terminal is attached to answer them (Claude Code 2.1.197 probes the terminal after
# drawing its prompt and drops keys typed before the answers come).
_QUERIES = re.compile(rb"\x1b\[(?:>0?q|0?c|\?(\d+)\$p|6n)")
# Seconds between type_prompt's bytes and submit_keys'.
SUBMIT_GAP = 0.3
_DA1 = b"\x1b[?62;22c"  # a VT220-class terminal with ANSI colour
_XTVERSION = b"\x1bP>|hopper\x1b\\"


class NotInteractive(HopperError):
    """The agent has no interactive mode in hopper."""


class InteractiveAgent(Protocol):
    kind: str
    # The conversation the last argv() starts (a fresh id) or resumes; None before.
    session_id: str | None

    def prepare(self, session_dir: Path, workdir: Path, env: Mapping[str, str]) -> None:
        """The CLI's config for an unattended start in ``workdir`` (merged atomically into
        the user's, never clobbering it) and the hook settings file in ``session_dir``.
        ``env`` is the environment the CLI will get (HOME, CLAUDE_CONFIG_DIR, the key).
        Raises HopperError (naming the file) when the CLI's config cannot be used."""
        ...

    def argv(self, resume_id: str | None) -> list[str]:
        """The interactive command: the settings file, model, permission mode, and
        ``resume_id``'s conversation or a new one (its id in :attr:`session_id`)."""
        ...

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus HOPPER_SESSION_DIR (the hook's marker folder) and terminal needs."""
        ...

    def ready(self, screen_tail: bytes) -> bool:
        """The CLI waits at its input prompt (judged from the terminal's last output;
        wait for a short quiet spell too, the screen is drawn in pieces)."""
        ...

    def type_prompt(self, text: str) -> bytes:
        """The bytes to write to the PTY: ``text`` as one bracketed paste, then Enter.
        Then write :meth:`submit_keys` again ``SUBMIT_GAP`` seconds later."""
        ...

    def submit_keys(self) -> bytes:
        """Enter once more, written ``SUBMIT_GAP`` seconds after :meth:`type_prompt`'s
        bytes: Claude Code 2.1.197 takes an Enter that arrives with the paste as part
        of it; an Enter on an empty prompt does nothing (2.1.330 took the first)."""
        ...

    def interrupt_keys(self) -> bytes:
        """The keys that interrupt a turn and leave the session waiting (Esc)."""
        ...

    def markers(self, session_dir: Path) -> list[Path]:
        """Stop-hook markers written so far, oldest first: one more = a turn ended."""
        ...

    def stop_answer(self, marker: Path) -> str | None:
        """The turn's answer as the Stop hook's ``marker`` carries it, if it does (read
        capped, never through a link): where the session log lacks the answer."""
        ...

    def read_log(self, session_id: str | None, offset: int) -> LogSlice:
        """The session log's new entries after ``offset`` (capped, never through a
        link); ``session_id`` None: the one argv() started."""
        ...


def agent_for(spec: Mapping[str, Any]) -> InteractiveAgent:
    """The interactive agent of an agent spec; :class:`NotInteractive` for other kinds."""
    kind = spec.get("kind")
    if kind == "claude":
        return ClaudeInteractive(spec)
    raise NotInteractive(
        f"agent kind {kind!r} cannot run interactively (only claude can)",
        hint='use mode = "headless" for this agent',
    )


def terminal_replies(output: bytes) -> bytes:
    """What a terminal would answer to the queries in ``output`` (DA1, XTVERSION,
    DECRQM, cursor position), in order; ``b""`` when it asks nothing. The session
    host writes them to the PTY while no client's terminal is attached (an
    attached terminal answers for itself). A query split across two reads is missed:
    the CLIs time their probes out."""
    out = []
    for m in _QUERIES.finditer(output):
        q = m.group(0)
        if q.endswith(b"q"):
            out.append(_XTVERSION)
        elif q.endswith(b"c"):
            out.append(_DA1)
        elif q.endswith(b"$p"):
            out.append(b"\x1b[?" + m.group(1) + b";2$y")  # the mode is known, and reset
        else:
            out.append(b"\x1b[1;1R")
    return b"".join(out)
