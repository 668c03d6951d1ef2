"""Finalizing: the terminal job.json first, then the prompt into processed/.

Steps and what a crash after each leaves behind:

1. write ``job.json`` (terminal, with processed_path)  -> prompt.md still in
   the run dir: recovery moves it (the move is idempotent).
1b. file the job's spend in the root's ledger (store/spend.py; agent jobs
   that reported usage)                                 -> recovery files it
   again before the move (once per job: the entry is named after it).
2. withhold the job's env values (store/withhold.py): prompt.md and
   admission.json rewritten without them, prompt.md 0600 -> recovery
   repeats it (idempotent), then moves.
3. ``rename runs/<id>/prompt.md -> processed/…``       -> done; the
   "finalized" event may be missing and is appended by recovery.

:func:`file_terminal` is the one way a job ends (it ran, or it never could):
the lifecycle's terminal record, committed by the ledger, then the move.

A job can reach processed/ and its own run directory, so neither is trusted.
The move walks processed/ one directory at a time with ``O_NOFOLLOW`` and
renames relative to those descriptors: a symlink planted at ``processed/team``
cannot send a prompt outside the root. When the recorded place leads through
a link or a non-directory, or something already sits at the name (a
directory planted there), the prompt is filed under the next free name
(``….2.prompt.md``, then directly in ``processed/``) and job.json records
where it went, before the move. A prompt.md that is gone (the job removed
it) is recorded once in job.json (``processed_path`` null, a note in
``detail``) and in a ``prompt_missing`` event; finalizing never retries it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Container, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from hopper.core import lifecycle
from hopper.core.lifecycle import Ended, ExitFigures, Filed
from hopper.core.record import JobRecord
from hopper.core.routing import plain_name
from hopper.core.states import Reason
from hopper.faults import crash_point
from hopper.store import ledger, spend
from hopper.store.jobfile import PROMPT_FILE, read_record
from hopper.store.layout import PROMPT_SUFFIX, Layout, parts_below
from hopper.store.withhold import withhold_env

MISSING_NOTE = (
    "; prompt.md was gone from the run directory when the job was filed "
    "(removed by the job?), so nothing was filed under processed/"
)
ALTERNATES = 5  # numbered names tried in a taken place before processed/ itself


class FinalizeBlocked(OSError):
    """No safe, free place under processed/ for a prompt (the message says what to check)."""


def file_terminal(
    layout: Layout,
    run_dir: Path,
    record: JobRecord,
    reason: Reason,
    detail: str,
    now: datetime,
    *,
    finished_at: datetime | None = None,
    duration_seconds: float | None = None,
    exit: ExitFigures | None = None,
) -> JobRecord:
    """End the job: its terminal record (state from ``reason``), then its prompt
    into processed/; the record as filed. ``exit`` None keeps the recorded exit
    code and signal; ``finished_at`` defaults to ``now``. Raises what stopped it."""
    fact = ending(layout, record, reason, detail, finished_at or now, duration_seconds, exit)
    (result,) = file_terminals(layout, [(run_dir, record, fact)], now)
    if isinstance(result, Exception):
        raise result
    return result


def ending(
    layout: Layout,
    record: JobRecord,
    reason: Reason,
    detail: str,
    finished_at: datetime,
    duration_seconds: float | None = None,
    exit: ExitFigures | None = None,
) -> Ended:
    """The lifecycle's terminal fact for ``record``, its prompt planned under processed/."""
    planned = layout.processed_rel(record.inbox_path, record.id)
    return Ended(reason, detail, planned, finished_at, duration_seconds, exit)


def file_terminals(
    layout: Layout,
    endings: Sequence[tuple[Path, JobRecord, Ended]],
    now: datetime,
    env_free: Container[str] = (),
) -> list[JobRecord | OSError]:
    """End many jobs with one group commit: every terminal record is written and
    made durable together (store/ledger.py), then each prompt is moved. Per job,
    in order: the record as filed, or the OSError that stopped it (its job.json
    unchanged if the commit failed; terminal, prompt unmoved, if the move did:
    recovery completes that). ``env_free``: ids of jobs whose admission.json the
    caller wrote with no env values (store/withhold.py does not read it)."""
    # Each run directory opened once (O_NOFOLLOW) for its job's whole filing: the
    # record's commit, the prompt's move and the finalized event go through it.
    held: dict[str, int | None] = {}
    try:
        for run_dir, _, _ in endings:
            if str(run_dir) not in held:  # a job twice in a batch: one descriptor
                held[str(run_dir)] = _open_run_dir(run_dir)
        entries = [
            ledger.Entry(run_dir, lifecycle.ended(record, fact), dir_fd=held[str(run_dir)])
            for run_dir, record, fact in endings
        ]
        failed = {id(f.entry): f.error for f in ledger.commit_batch(entries, crash=_AFTER_RECORD)}
        committed = [e for e in entries if id(e) not in failed]
        try:
            spend.file_spends(layout, (e.step.record for e in committed))
        except OSError as exc:  # no prompt moves: recovery completes the finalize, spend first
            failed.update((id(e), exc) for e in committed if spend.entry_of(e.step.record))
        results: list[JobRecord | OSError] = []
        for entry in entries:
            error = failed.get(id(entry))
            if error is None:
                try:
                    record = entry.step.record
                    free = record.id in env_free
                    moved = _move(layout, entry.run_dir, record, now, entry.dir_fd, env_free=free)
                    results.append(moved)
                    continue
                except OSError as exc:
                    error = exc
            results.append(error)
        return results
    finally:
        for fd in held.values():
            if fd is not None:
                os.close(fd)


def _open_run_dir(run_dir: Path) -> int | None:
    """The run directory opened O_NOFOLLOW; None if it cannot be (the ledger's own
    open then fails the entry, saying why: gone, a link …)."""
    try:
        return os.open(run_dir, _RUN_DIR_FLAGS)
    except OSError:
        return None


_RUN_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


_AFTER_RECORD = "finalize.after_record"


def _move(
    layout: Layout,
    run_dir: Path,
    record: JobRecord,
    now: datetime,
    held: int | None,
    *,
    env_free: bool = False,
) -> JobRecord:
    """Move the prompt of a committed terminal ``record``; the record as filed
    (processed_path changed if the planned place was unusable). ``held``: the run
    directory as the commit used it (the caller's; None: opened here)."""
    assert record.processed_path is not None
    placed = _file(layout, run_dir, record.processed_path, record, now, held, env_free=env_free)
    filed = placed.record or record
    fields = {
        "state": filed.state,
        "reason": filed.reason,
        "processed_path": filed.processed_path,
    }
    if placed.run_fd is None:  # nothing moved now: the prompt was missing, or moved before a crash
        crash_point("finalize.after_move")
        ledger.note(run_dir, "finalized", now, **fields)
        return filed
    try:
        # Through the run directory's descriptor the move used (opened O_NOFOLLOW):
        # the event lands in the folder the prompt left, with no second open by name.
        crash_point("finalize.after_move")
        ledger.note_in(placed.run_fd, "finalized", now, **fields)
    finally:
        if placed.run_fd != held:
            os.close(placed.run_fd)
    return filed


def move_prompt(layout: Layout, run_dir: Path, processed_rel: str) -> bool:
    """Recovery's step 2: move prompt.md to ``processed_rel`` (or the next free,
    safe name, recorded in job.json first); False if there was nothing to move."""
    placed = _file(layout, run_dir, processed_rel, None, None)
    if placed.run_fd is not None:
        os.close(placed.run_fd)
    return placed.path is not None and os.path.lexists(layout.root / placed.path)


class _Placed(NamedTuple):
    """Where :func:`_file` left a job's prompt."""

    # its processed path under the root (None: there was none)
    path: str | None
    # the run directory, still open, if the prompt moved just now: the caller notes
    # the move through it, then closes it
    run_fd: int | None
    # job.json as committed when the place (or that there was none) was recorded anew
    record: JobRecord | None


def _file(
    layout: Layout,
    run_dir: Path,
    rel: str,
    record: JobRecord | None,
    now: datetime | None,
    held: int | None = None,
    *,
    env_free: bool = False,
) -> _Placed:
    """Withhold the job's env values, then move the prompt to ``rel`` or, if that is
    taken or unsafe, to the next free place, committing that place (or that the
    prompt was gone) to job.json first: a lifecycle ``filed`` step on ``record``
    (None: the run directory's job.json, read then). Raises FinalizeBlocked when
    there is no safe, free place, OSError when a step fails. ``held``: the run
    directory opened O_NOFOLLOW by the caller, who closes it (else opened here,
    and the answer's ``run_fd`` is the caller's to close)."""
    withhold_env(run_dir, run_dir.name, env_free=env_free)
    planned = rel
    if parts_below(rel, "processed") is None:  # a record a job rewrote: never out of processed/
        planned = f"processed/{run_dir.name}{PROMPT_SUFFIX}"
    if not os.path.lexists(f"{run_dir}/{PROMPT_FILE}"):
        if os.path.lexists(layout.root / planned):
            return _Placed(planned, None, None)  # moved before a crash
        filed = _settle(run_dir, record, None, MISSING_NOTE)
        if now is not None:
            ledger.note(run_dir, "prompt_missing", now, planned_path=rel)
        return _Placed(None, None, filed)
    run_fd = os.open(run_dir, _RUN_DIR_FLAGS) if held is None else held
    try:
        for candidate in _candidates(planned):
            parent_fd = _open_parent(layout, candidate)
            if parent_fd is None:
                continue  # leads through a link or a file
            try:
                name = plain_name(candidate)
                if _occupied(name, parent_fd):
                    continue
                recorded = None
                if candidate != rel:
                    note = f"; filed as {candidate}: {rel} was taken or unsafe"
                    recorded = _settle(run_dir, record, candidate, note)
                os.rename(PROMPT_FILE, name, src_dir_fd=run_fd, dst_dir_fd=parent_fd)
                return _Placed(candidate, run_fd, recorded)  # run_fd stays open: the caller's
            finally:
                os.close(parent_fd)
    except BaseException:
        if held is None:
            os.close(run_fd)
        raise
    if held is None:
        os.close(run_fd)
    raise FinalizeBlocked(
        f"{layout.root / rel}: no safe, free place for the prompt under processed/; "
        "check processed/ for symlinks or files planted in place of folders"
    )


def _settle(run_dir: Path, record: JobRecord | None, used: str | None, note: str) -> JobRecord:
    """job.json records where the prompt went (``used``, None: nowhere), before it goes."""
    current = read_record(run_dir) if record is None else record
    return ledger.commit(run_dir, lifecycle.filed(current, Filed(used, note)))


def _candidates(rel: str) -> Iterator[str]:
    """The planned place, numbered names beside it, then the same in processed/ itself."""
    if _plain(rel):  # the first is then rel itself: no Path made unless it is taken
        yield rel
        rest = _candidates_parsed(rel)
        next(rest)
        yield from rest
    else:
        yield from _candidates_parsed(rel)


def _plain(rel: str) -> bool:
    """``rel`` is in PurePosixPath's normal form (relative, no empty or ``.`` part)."""
    parts = rel.split("/")
    return "" not in parts and "." not in parts


def _candidates_parsed(rel: str) -> Iterator[str]:
    path = Path(rel)
    stem = path.name[: -len(PROMPT_SUFFIX)] if path.name.endswith(PROMPT_SUFFIX) else path.name
    top = Path(path.parts[0]) if path.parts else Path("processed")
    for folder in dict.fromkeys([path.parent, top]):
        yield str(folder / path.name)
        for n in range(2, 2 + ALTERNATES):
            yield str(folder / f"{stem}.{n}{PROMPT_SUFFIX}")


def _open_parent(layout: Layout, rel: str) -> int | None:
    """A descriptor of ``rel``'s folder, made as needed, reached without following
    a link below the root; None if a component is a link or not a directory."""
    fd = os.open(layout.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    parents = rel.split("/")[:-1] if _plain(rel) else Path(rel).parent.parts
    for part in parents:
        if part in ("", ".", "..") or "/" in part:  # "/": an absolute path
            os.close(fd)
            return None
        try:
            child = _open_folder(part, fd)  # there already, as a rule: no mkdir per job
        except FileNotFoundError:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass  # made meanwhile
            except OSError:
                os.close(fd)
                raise
            try:
                child = _open_folder(part, fd)
            except OSError:
                os.close(fd)
                raise
        except OSError:
            os.close(fd)
            raise
        if child is None:
            os.close(fd)
            return None  # a link or a file where a folder belongs
        os.close(fd)
        fd = child
    return fd


def _open_folder(name: str, dir_fd: int) -> int | None:
    """``name`` under ``dir_fd`` opened as a folder, never through a link; None if a
    link or a file sits there. Raises FileNotFoundError when there is nothing."""
    try:
        return os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise


def _occupied(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
