"""``hopper retry``: a finished job's prompt, back into the inbox as a new job.

The new prompt is the old one as hopper finalized it (``processed/…``, or
``runs/<id>/prompt.md`` if the finalize step has not moved it yet), with one
front matter key added, ``retry_of = "<old id>"``, which the new job's record
carries. It lands in the same inbox sub-folder as the original, so the same
route applies, under the same file stem, so the new job has the same name
(``hopper retry NAME`` then ``hopper status NAME`` shows the new run). It is
written the safe way: a temporary dot-name, fsync, then rename into place.

A job's front matter ``env`` values are withheld from its prompt when it
ends (store/withhold.py): a retry must be given them again (``env``), and is
refused, naming the variables, until they are.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from hopper.core.jobid import prompt_stem
from hopper.core.prompt import FENCE, BadPrompt, decode
from hopper.core.record import JobRecord
from hopper.core.redaction import restore, withheld
from hopper.core.states import ACTIVE_STATES
from hopper.errors import HopperError
from hopper.store.inbox_drop import drop_into
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE
from hopper.store.layout import Layout, NotARealFolder, open_folder, parts_below
from hopper.store.lookup import find_job
from hopper.store.saferead import UnreadableFile, read_bytes

DEFAULT_MAX_BYTES = 1 << 20
_RETRY_OF_LINE = re.compile(r"""^\s*(?:retry_of|"retry_of"|'retry_of')\s*=""")


class JobStillActive(HopperError):
    """A retry was asked for a job that is still queued or running."""


class CannotResubmit(HopperError):
    """The finished job's prompt is gone, unreadable, or cannot carry ``retry_of``."""


def resubmit(
    layout: Layout,
    job_ref: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Put the prompt of the finished job ``job_ref`` (id, id prefix or name) back in the inbox.

    ``env`` gives front matter ``env`` values: those hopper withheld when the
    job ended (core/redaction.py) must all be given again, or the retry is
    refused naming them; it never runs with the placeholder. Returns the new
    inbox path. Raises :class:`~hopper.errors.JobNotFound` when
    no job matches, :class:`JobStillActive` for a queued or running job, and
    :class:`CannotResubmit` when its prompt cannot be found, read or marked.
    """
    record = find_job(layout, job_ref)
    if record.state in ACTIVE_STATES:
        raise JobStillActive(
            f"job {record.id} ({record.name}) is {record.state}: "
            "only a finished job can be retried",
            hint=f"wait for it (hopper wait {record.id}) or stop it (hopper abort {record.id})",
        )
    source, data = _read_source(layout, record, max_bytes)
    try:
        text = mark_retry(_with_env(decode(data), record, source, env or {}), record.id)
    except BadPrompt as exc:
        raise CannotResubmit(
            f"cannot add retry_of to this prompt: {exc.message}",
            path=source,
            hint="fix the prompt and submit it again: hopper submit FILE",
        ) from None
    sub = _inbox_folder(layout, record)
    stem = prompt_stem(PurePosixPath(record.inbox_path).name).lstrip(".") or "retry"
    return drop_into(layout, sub, stem, text.encode())


def _with_env(text: str, record: JobRecord, source: Path, env: Mapping[str, str]) -> str:
    """``text`` with ``env`` given back; refused while a withheld value is not."""
    held = withheld(text)
    if held.elsewhere:
        raise CannotResubmit(
            f"job {record.id}'s prompt had env values withheld when it ended, also from "
            "its text (a value of 8 or more characters is withheld wherever it appears): "
            "hopper cannot give them back",
            path=source,
            hint="submit the original prompt again: hopper submit FILE",
        )
    missing = [key for key in held.keys if key not in env]
    if missing:
        given = " ".join(f"--env {key}" for key in missing)
        raise CannotResubmit(
            f"job {record.id}'s env values {', '.join(missing)} were withheld when it ended "
            "(hopper keeps a job's env values only while it can still run)",
            path=source,
            hint=f"give them again from your environment: hopper retry {record.id} {given}",
        )
    if not env:
        return text
    try:
        return restore(text, env)
    except ValueError as exc:
        raise CannotResubmit(
            f"cannot set env {', '.join(env)} in job {record.id}'s prompt: {exc}",
            path=source,
            hint="fix the prompt and submit it again: hopper submit FILE",
        ) from None


def mark_retry(text: str, job_id: str) -> str:
    """``text`` with ``retry_of = "<job_id>"`` as the first front matter key (pure).

    Comments and the rest of the front matter are kept as written; an older
    ``retry_of`` line (a retry of a retry) is replaced. Raises BadPrompt if the
    front matter is not valid TOML.
    """
    line = f'retry_of = "{job_id}"'
    lines = text.split("\n")
    if lines[0].rstrip() != FENCE:
        return f"{FENCE}\n{line}\n{FENCE}\n{text}"
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE), None)
    if end is None:
        raise BadPrompt("front matter opened with +++ is never closed", line=1)
    front = lines[1:end]
    if "retry_of" in _toml(front):
        front = [f for f in front if not _RETRY_OF_LINE.match(f)]
        if "retry_of" in _toml(front):
            raise BadPrompt("its retry_of key is written in a way hopper cannot replace")
    return "\n".join([FENCE, line, *front, *lines[end:]])


def _toml(front: list[str]) -> dict[str, object]:
    try:
        return tomllib.loads("\n".join(front))
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise BadPrompt(f"front matter is not valid TOML: {exc}") from None


def _read_source(layout: Layout, record: JobRecord, max_bytes: int) -> tuple[Path, bytes]:
    """The finalized prompt and its bytes: processed/ if it was moved there, else still
    in the run dir. Each is reached from the root one O_NOFOLLOW folder at a time and
    read without following a link; a ``processed_path`` that does not lie under
    processed/ (absolute, ``..``) is refused, never opened."""
    places: list[tuple[str, ...]] = []
    if record.processed_path:
        parts = parts_below(record.processed_path, "processed")
        if parts is None:
            raise CannotResubmit(
                f"job {record.id}'s processed_path {record.processed_path!r} does not lie "
                "under processed/, where hopper files prompts: its job.json was changed "
                "by something other than hopper, so the file it names is not read",
                path=layout.run_dir(record.id) / JOB_FILE,
                hint="submit the prompt again by hand (hopper submit FILE); a job can write "
                "other jobs' records, so check what ran around its finish",
            )
        places.append(parts)
    places.append(("runs", record.id, PROMPT_FILE))
    for parts in places:
        try:
            return layout.root.joinpath(*parts), _read_below(layout, record, parts, max_bytes)
        except FileNotFoundError:
            continue
    raise CannotResubmit(
        f"job {record.id} has no prompt left to resubmit",
        path=layout.root.joinpath(*places[0]),
        hint="the prompt was moved or deleted; submit it again by hand: hopper submit FILE",
    )


def _read_below(layout: Layout, record: JobRecord, parts: tuple[str, ...], max_bytes: int) -> bytes:
    """The regular file ``root/parts…`` (at most ``max_bytes``), its folders walked with
    O_NOFOLLOW; never follows a link, never blocks on a FIFO. FileNotFoundError if gone."""
    hint = "submit the prompt again by hand: hopper submit FILE"
    path = layout.root.joinpath(*parts)
    try:
        dir_fd = open_folder(layout.root, parts[:-1])
    except NotARealFolder as exc:
        raise CannotResubmit(
            f"{exc.message} (job {record.id}'s prompt, {'/'.join(parts)}, lies below it)",
            path=exc.path,
            hint=f"{exc.hint}; or {hint}",
        ) from None
    except NotADirectoryError:
        raise FileNotFoundError(path) from None
    try:
        return read_bytes(Path(parts[-1]), max_bytes, dir_fd=dir_fd, hint=hint)
    except UnreadableFile as exc:
        raise CannotResubmit(
            f"cannot read the job's prompt: it {exc.message}", path=path, hint=hint
        ) from None
    finally:
        os.close(dir_fd)


def _inbox_folder(layout: Layout, record: JobRecord) -> tuple[str, ...]:
    """The inbox sub-folders the job's prompt was dropped in (its route), inside the inbox."""
    parts = parts_below(record.inbox_path, "inbox")
    if parts is None:
        raise CannotResubmit(
            f"job {record.id}'s inbox_path {record.inbox_path!r} leads outside the inbox",
            path=layout.run_dir(record.id) / JOB_FILE,
            hint="submit the prompt again by hand: hopper submit FILE",
        )
    return parts[1:-1]
