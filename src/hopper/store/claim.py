"""Claiming a prompt: one rename(2) from the inbox into its run directory.

Steps and what a crash after each leaves behind (recovery in core/recovery.py):

1. ``mkdir runs/<id>``             -> an empty run dir: removed once stale.
2. the ``claimed`` event, events.jsonl's first line (where the prompt came
   from, when, which watcher)      -> no prompt.md: removed once stale.
3. ``rename inbox/… -> runs/<id>/prompt.md``  (the claim itself)
                                   -> prompt.md without job.json: the claim
                                      is completed from the ``claimed`` event.
4. write ``job.json`` (queued)     -> a normal queued job.

Run directories claimed by hopper before the ``claimed`` event did this job
hold a ``claim.json`` with the same fields: :func:`read_claim` reads it first.

Of two watchers renaming the same file, the kernel lets exactly one win;
the other gets ENOENT, removes its empty run directory and moves on.
"""

from __future__ import annotations

import errno
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hopper.core.jobid import make_job_id, prompt_stem
from hopper.faults import crash_point
from hopper.store import ledger
from hopper.store.atomic import open_dir
from hopper.store.jobfile import CLAIM_FILE, EVENTS_FILE, PROMPT_FILE, first_event
from hopper.store.layout import Layout
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_json
from hopper.store.withhold import private_read

CLAIMED = "claimed"  # the event that is the claim's marker


@dataclass(frozen=True)
class Claimed:
    job_id: str
    run_dir: Path
    inbox_rel: str  # e.g. "inbox/team/fix tests.prompt.md"
    noted: bool = True  # its ``claimed`` event is written (False: run dirs of older hoppers)
    name_not_utf8: bool = False  # inbox_rel is a printable rendering of a non-UTF-8 name
    # The run directory as claim() made it, opened O_NOFOLLOW right after its mkdir,
    # for the admission's writes (no open by name each); whoever admits closes it.
    dir_fd: int | None = None
    # prompt.md's bytes, read through the descriptor that made it 0600, when that
    # is the whole story (a regular file within the limit); None: read it again
    # (store/saferead.py then says what is wrong with it).
    data: bytes | None = None


class ClaimFailed(OSError):
    """The rename failed for a reason other than losing the race (EXDEV, EACCES …)."""


def claim(
    layout: Layout,
    prompt: Path,
    now: datetime,
    host: str,
    owner: str = "",
    limit: int | None = None,
) -> Claimed | None:
    """Move ``prompt`` into a new run directory. None if another watcher won.

    Raises OSError (ENOSPC …) with nothing left behind but the untouched prompt.
    The answer holds the run directory's descriptor (``dir_fd``): the caller closes it;
    and, given ``limit`` (max_prompt_bytes), the prompt's bytes if it is a regular file
    of at most that many (``data``).
    """
    inbox_rel = layout.relative(prompt)
    name = prompt_stem(prompt.name)
    run_dir = _make_run_dir(layout, now, name)
    crash_point("claim.after_mkdir")
    # A name that is not UTF-8 arrives with surrogate escapes, which no JSON
    # record can hold: the event carries a printable rendering, and says so.
    shown = printable(inbox_rel)
    extra = {} if shown == inbox_rel else {"name_not_utf8": True}
    try:
        dir_fd = open_dir(run_dir, follow=False)
    except OSError:
        _discard(run_dir)
        raise
    try:
        try:
            ledger.note_in(dir_fd, CLAIMED, now, inbox_path=shown, host=host, owner=owner, **extra)
        except OSError:
            _discard(run_dir)
            raise
        moved = run_dir / PROMPT_FILE
        try:
            os.rename(prompt, moved)
        except OSError as exc:
            _discard(run_dir)
            if exc.errno == errno.ENOENT:
                os.close(dir_fd)
                return None  # lost the race (or the file was deleted): nothing to do
            raise ClaimFailed(
                exc.errno, f"cannot move {prompt} into {run_dir}: {exc.strerror}"
            ) from None
        # Its front matter env may hold secrets: the watcher's own copy is 0600
        # (a prompt another user owns keeps its mode; see docs/contract.md).
        data = private_read(moved, limit)[1]
        crash_point("claim.after_rename")
    except BaseException:
        os.close(dir_fd)
        raise
    return Claimed(run_dir.name, run_dir, inbox_rel, dir_fd=dir_fd, data=data)


def _make_run_dir(layout: Layout, now: datetime, name: str) -> Path:
    while True:
        run_dir = layout.run_dir(make_job_id(now, name, secrets.token_hex(2)))
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir


def printable(text: str) -> str:
    """``text`` with the bytes of a non-UTF-8 file name (surrogate escapes) as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _discard(run_dir: Path) -> None:
    remove_empty_claim(run_dir)


def remove_empty_claim(run_dir: Path) -> bool:
    """Remove a claim's run directory that never got its prompt: its marker (the
    ``claimed`` event, or an older hopper's claim.json) and the directory, which
    must then be empty. False if it was not (left as it is)."""
    try:
        if not set(os.listdir(run_dir)) <= {CLAIM_FILE, EVENTS_FILE}:
            return False  # something more than a claim: left for a person
        (run_dir / CLAIM_FILE).unlink(missing_ok=True)
        (run_dir / EVENTS_FILE).unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:
        return False  # left for the stale-claim sweep, or for a person
    return True


def read_claim(run_dir: Path) -> dict[str, str] | None:
    """The claim's marker: where the prompt came from (``inbox_path``), when, which
    watcher (``host``, ``owner``); None if there is none or it cannot be read (read
    safely). From claim.json where an older hopper wrote one, else from the
    ``claimed`` event, events.jsonl's first line. ``name_not_utf8`` is "true" when the
    inbox name was not UTF-8 (``inbox_path`` then shows its bytes as ``\\xNN``)."""
    try:
        data = read_json(run_dir / CLAIM_FILE, SMALL_LIMIT)
    except FileNotFoundError:
        data = _claimed_event(run_dir)
    except UnreadableFile:
        return None
    if not isinstance(data, dict):
        return None
    out = {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
    if data.get("name_not_utf8") is True:
        out["name_not_utf8"] = "true"
    if "ts" in out and "claimed_at" not in out:
        out["claimed_at"] = out["ts"]
    return out


def _claimed_event(run_dir: Path) -> object:
    """events.jsonl's first line if it is the ``claimed`` event, else None."""
    event = first_event(run_dir)
    if event is None or event.get("event") != CLAIMED:
        return None
    return event
