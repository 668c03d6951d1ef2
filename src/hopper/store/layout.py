"""Where things live under the root, and the rule that nothing escapes it.

A job can write anywhere under the root (``$HOPPER_RUN_DIR/../..``), so a
folder hopper reads or writes for a user may have been swapped for a link to
somewhere else. :func:`open_folder` is the way to such a folder: from the
root, one ``O_NOFOLLOW`` folder at a time, so a link below the root is never
followed (:class:`NotARealFolder` names it). :func:`parts_below` checks a path
a record holds (``processed_path``, ``inbox_path``) names a place hopper puts
things, before anything opens it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath

from hopper.core.routing import plain_parts
from hopper.errors import HopperError

PROMPT_SUFFIX = ".prompt.md"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


RUN_DIRS_KEPT = 4096


class PathEscapesRoot(ValueError):
    """A path that resolves outside the root (through ``..`` or a symlink)."""


class NotARealFolder(HopperError):
    """A symlink, or something else that is not a folder, where hopper needs a folder."""


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
    # run_dir's answers, kept: the watcher asks for a job's run directory ~8 times
    # over the job's life, and each new Path is a parse and a join (and its str
    # made again). Bounded: cleared at RUN_DIRS_KEPT entries.
    _run_dirs: dict[str, Path] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @cached_property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @cached_property
    def runs(self) -> Path:
        return self.root / "runs"

    @cached_property
    def processed(self) -> Path:
        return self.root / "processed"

    @cached_property
    def state_dir(self) -> Path:
        """hopper's private bookkeeping (locks, watcher records)."""
        return self.root / ".hopper"

    def run_dir(self, job_id: str) -> Path:
        found = self._run_dirs.get(job_id)
        if found is not None:
            return found
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise PathEscapesRoot(f"{job_id!r} is not a job id")
        if len(self._run_dirs) >= RUN_DIRS_KEPT:
            self._run_dirs.clear()
        found = self._run_dirs[job_id] = self.runs / job_id
        return found

    def ensure(self) -> None:
        for path in (self.inbox, self.runs, self.processed, self.state_dir):
            path.mkdir(parents=True, exist_ok=True)

    @cached_property
    def _root_slash(self) -> str | None:
        """The root's str and a slash; None for ``/`` (``//x`` is not below it)."""
        text = str(self.root)
        return None if text == "/" else f"{text}/"

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, as recorded in job.json."""
        # A Path's str is its normal form: one that starts with the root's and a
        # slash is below it, and the rest of the string is relative_to's answer.
        text, prefix = str(path), self._root_slash
        if prefix is not None and text.startswith(prefix):
            return text[len(prefix) :]
        return str(path.relative_to(self.root))

    def inbox_subpath(self, prompt: Path) -> Path:
        """The folders between inbox/ and the prompt (empty for a top-level prompt)."""
        return prompt.parent.relative_to(self.inbox)

    def processed_path(self, inbox_rel: str, job_id: str) -> Path:
        """The root joined with :meth:`processed_rel`."""
        return self.root / self.processed_rel(inbox_rel, job_id)

    def processed_rel(self, inbox_rel: str, job_id: str) -> str:
        """processed/<same sub-path>/<stem>.<job_id>.prompt.md, relative to the root
        as job.json records it: the sub-path is the folders between ``inbox/`` and
        the prompt (none for a prompt outside inbox/), the stem its name without
        ``.prompt.md``, cut to 120 bytes. The inbox path is taken in its normal form
        (``PurePosixPath``'s: no empty or ``.`` part), and so are the folders an id
        with a slash makes. Raises ValueError for ``inbox`` itself."""
        parts = plain_parts(inbox_rel)  # split from the string when plain, as recorded
        sub: tuple[str, ...] = ()
        if parts[:1] == ("inbox",):
            if len(parts) == 1:
                raise ValueError(f"{inbox_rel!r} is the inbox, not a prompt in it")
            sub = parts[1:-1]
        name = parts[-1] if parts and not parts[-1].startswith("/") else ""  # "/": the anchor
        stem = name[: -len(PROMPT_SUFFIX)] if name.endswith(PROMPT_SUFFIX) else name
        file_name = f"{_truncate_bytes(stem, 120)}.{job_id}{PROMPT_SUFFIX}"
        if "/" in job_id:  # folders in the name: no empty or "." part, as a Path has them
            folders = [part for part in file_name.split("/") if part not in ("", ".")]
            return "/".join(["processed", *sub, *folders])
        return "/".join(["processed", *sub, file_name])


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


def parts_below(rel: str, top: str) -> tuple[str, ...] | None:
    """The parts of ``rel`` (a path a record holds, relative to the root) if it names
    something below the root's folder ``top``: relative, no ``..``, no NUL; else None."""
    if not rel or "\0" in rel:
        return None
    path = PurePosixPath(rel)
    parts = path.parts
    if path.is_absolute() or len(parts) < 2 or parts[0] != top or ".." in parts:
        return None
    return parts


def open_folder(root: Path, parts: Sequence[str], *, create: bool = False) -> int:
    """A descriptor (``O_DIRECTORY``) of ``root/parts…``, reached one folder at a time
    with ``O_NOFOLLOW``: no link below the root is followed. Close it.

    ``create`` makes missing folders (0755) on the way. Raises
    :class:`PathEscapesRoot` for a part that is empty, ``.``, ``..`` or holds a
    slash; :class:`NotARealFolder` naming the first part that is a symlink or not
    a folder; ``FileNotFoundError`` for a missing one (without ``create``); any
    other ``OSError`` as the system gave it.
    """
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            raise PathEscapesRoot(f"{part!r} is not a folder name below {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    try:
        for part in parts:
            here = here / part
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _not_a_folder(here, part, fd) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_a_folder(path: Path, name: str, dir_fd: int) -> NotARealFolder:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        link = stat.S_ISLNK(st.st_mode)
        target = os.readlink(name, dir_fd=dir_fd) if link else ""
    except OSError:
        link, target = False, ""
    if link:
        return NotARealFolder(
            f"is a symbolic link (to {target}), not a folder: hopper never reads or "
            "writes through a link below its root, so nothing was done",
            path=path,
            hint=f"if you did not make this link, a job may have: remove it (rm {path}) "
            "and try again; hopper makes a real folder in its place",
        )
    return NotARealFolder(
        "is a file, not a folder: hopper needs a folder here, so nothing was done",
        path=path,
        hint=f"move it away (mv {path} {path}.moved) and try again",
    )
