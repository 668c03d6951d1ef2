"""Claiming a prompt: one rename(2) from the inbox into its run directory.

Steps and what a crash after each leaves behind (recovery in core/recovery.py):

1. ``mkdir runs/<id>``             -> an empty run dir: removed once stale.
2. write ``runs/<id>/claim.json``  -> no prompt.md: removed once stale.
3. ``rename inbox/… -> runs/<id>/prompt.md``  (the claim itself)
                                   -> prompt.md without job.json: the claim
                                      is completed from claim.json.
4. write ``job.json`` (queued)     -> a normal queued job.

Of two watchers renaming the same file, the kernel lets exactly one win;
the other gets ENOENT, removes its empty run directory and moves on.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hopper.core.jobid import make_job_id, prompt_stem
from hopper.faults import crash_point
from hopper.store.atomic import write_atomic
from hopper.store.jobfile import CLAIM_FILE, PROMPT_FILE
from hopper.store.layout import Layout
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_json
from hopper.store.withhold import make_private


@dataclass(frozen=True)
class Claimed:
    job_id: str
    run_dir: Path
    inbox_rel: str  # e.g. "inbox/team/fix tests.prompt.md"


class ClaimFailed(OSError):
    """The rename failed for a reason other than losing the race (EXDEV, EACCES …)."""


def claim(
    layout: Layout, prompt: Path, now: datetime, host: str, owner: str = ""
) -> Claimed | None:
    """Move ``prompt`` into a new run directory. None if another watcher won.

    Raises OSError (ENOSPC …) with nothing left behind but the untouched prompt.
    """
    inbox_rel = layout.relative(prompt)
    name = prompt_stem(prompt.name)
    run_dir = _make_run_dir(layout, now, name)
    crash_point("claim.after_mkdir")
    marker = {
        "inbox_path": inbox_rel,
        "claimed_at": now.isoformat(),
        "host": host,
        "owner": owner,
    }
    try:
        write_atomic(run_dir / CLAIM_FILE, json.dumps(marker).encode(), durable=False)
    except OSError:
        _discard(run_dir)
        raise
    try:
        os.rename(prompt, run_dir / PROMPT_FILE)
    except OSError as exc:
        _discard(run_dir)
        if exc.errno == errno.ENOENT:
            return None  # lost the race (or the file was deleted): nothing to do
        raise ClaimFailed(
            exc.errno, f"cannot move {prompt} into {run_dir}: {exc.strerror}"
        ) from None
    # Its front matter env may hold secrets: the watcher's own copy is 0600
    # (a prompt another user owns keeps its mode; see docs/contract.md).
    make_private(run_dir / PROMPT_FILE)
    crash_point("claim.after_rename")
    return Claimed(run_dir.name, run_dir, inbox_rel)


def _make_run_dir(layout: Layout, now: datetime, name: str) -> Path:
    while True:
        run_dir = layout.run_dir(make_job_id(now, name, secrets.token_hex(2)))
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir


def _discard(run_dir: Path) -> None:
    try:
        (run_dir / CLAIM_FILE).unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:
        pass  # left for the stale-claim sweep


def read_claim(run_dir: Path) -> dict[str, str] | None:
    """claim.json's string fields, or None if it is missing or unreadable (read safely)."""
    try:
        data = read_json(run_dir / CLAIM_FILE, SMALL_LIMIT)
    except (FileNotFoundError, UnreadableFile):
        return None
    if not isinstance(data, dict):
        return None
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
