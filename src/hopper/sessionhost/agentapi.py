"""What the host needs of an interactive agent CLI (agents/interactive.py keeps Claude's).

The agreed shape of ``hopper.agents.interactive.InteractiveAgent``; the host
types against this Protocol so that any agent keeping it (a test's fake one
included) can be hosted. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol


class LogView(Protocol):
    """New entries of the agent's own session log (``read_log``)."""

    @property
    def offset(self) -> int: ...  # where the next read starts

    @property
    def entries(self) -> Sequence[Mapping[str, Any]]: ...


class InteractiveAgent(Protocol):
    def prepare(self, session_dir: Path, workdir: Path, env: Mapping[str, str]) -> None: ...

    def argv(self, resume_id: str | None) -> list[str]: ...

    def env(self, base: Mapping[str, str]) -> dict[str, str]: ...

    def ready(self, screen_tail: bytes) -> bool: ...

    def type_prompt(self, text: str) -> bytes: ...

    def interrupt_keys(self) -> bytes: ...

    def markers(self, session_dir: Path) -> list[Path]: ...

    def stop_answer(self, marker: Path) -> str | None: ...

    def read_log(self, session_id: str | None, offset: int) -> Any: ...
