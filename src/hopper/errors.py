"""hopper's errors: each names the file, what is wrong, and what to do."""

from __future__ import annotations

from pathlib import Path


class HopperError(Exception):
    """Base class; ``str()`` is one line fit for a terminal or a journal."""

    def __init__(self, message: str, *, path: Path | None = None, hint: str = "") -> None:
        self.message = message
        self.path = path
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text}\n  hint: {self.hint}" if self.hint else text


class JobFileCorrupt(HopperError):
    """job.json exists but is not a valid job record."""


class JobNotFound(HopperError):
    """No run directory matches the id, prefix or name given."""


class ConfigError(HopperError):
    """The config file is missing a value, has a wrong one, or is not TOML."""
