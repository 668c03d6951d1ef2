"""Where things live under the root, and the rule that nothing escapes it."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROMPT_SUFFIX = ".prompt.md"


class PathEscapesRoot(ValueError):
    """A path that resolves outside the root (through ``..`` or a symlink)."""


def run_dir_gone(path: Path) -> bool:
    """True if a run directory is gone or no longer a real directory (swapped for a
    link or a file): deleted under its job, by that job or another one."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def default_root(env: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/hopper``, else ``~/.local/state/hopper``."""
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME", "~")) / ".local" / "state")
    return Path(state).expanduser() / "hopper"


def resolve_root(cli: str | None, env: Mapping[str, str], config_root: str | None) -> Path:
    """--root, else $HOPPER_ROOT, else the config's root, else the XDG state dir."""
    chosen = cli or env.get("HOPPER_ROOT") or config_root
    root = Path(chosen).expanduser() if chosen else default_root(env)
    return Path(os.path.abspath(root))


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def processed(self) -> Path:
        return self.root / "processed"

    @property
    def state_dir(self) -> Path:
        """hopper's private bookkeeping (locks, watcher records)."""
        return self.root / ".hopper"

    def run_dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise PathEscapesRoot(f"{job_id!r} is not a job id")
        return self.runs / job_id

    def ensure(self) -> None:
        for path in (self.inbox, self.runs, self.processed, self.state_dir):
            path.mkdir(parents=True, exist_ok=True)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, as recorded in job.json."""
        return str(path.relative_to(self.root))

    def inbox_subpath(self, prompt: Path) -> Path:
        """The folders between inbox/ and the prompt (empty for a top-level prompt)."""
        return prompt.parent.relative_to(self.inbox)

    def processed_path(self, inbox_rel: str, job_id: str) -> Path:
        """processed/<same sub-path>/<stem>.<job_id>.prompt.md"""
        rel = Path(inbox_rel)
        sub = rel.parent.relative_to("inbox") if rel.parts[:1] == ("inbox",) else Path()
        stem = rel.name[: -len(PROMPT_SUFFIX)] if rel.name.endswith(PROMPT_SUFFIX) else rel.name
        stem = _truncate_bytes(stem, 120)
        return self.processed / sub / f"{stem}.{job_id}{PROMPT_SUFFIX}"


def _truncate_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def inside(root: Path, path: Path) -> bool:
    """True if ``path`` (resolved, symlinks followed) lies within ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
