"""A finished job's ``env`` values, withheld from every file hopper keeps of it.

Every job runs as the watcher's user, so a mode cannot keep one job from
reading another's run directory: a value hopper still keeps is a value any
later job can read. So the values are kept exactly as long as the job can
still need them — while it is queued or running, automatic retries
included — and withheld when it ends for good (store/finalize.py calls
:func:`withhold_env` before the prompt moves to processed/, and recovery's
completion of a finalize goes through the same step):

1. ``runs/<id>/prompt.md`` is rewritten with each value replaced
   (core/redaction.py), mode 0600, fsynced; a prompt with no value in it is
   only made 0600 (rewritten if the watcher does not own it);
2. the files hopper made from the prompt for the agent (:data:`DERIVED`: a
   bash job's script, an agent's prompt text and driver spec) are rewritten
   without any value of ``MIN_ELSEWHERE`` characters or more, the same rule
   as the prompt's text (they hold no env table);
3. ``admission.json`` is rewritten with the values replaced (the env keys
   stay; long values go from the body and options too), fsynced.

Each step is idempotent and the values are read from admission.json until
step 3, so a crash between steps is finished by the next finalize attempt.
A prompt.md a job replaced by something hopper does not read (a link, a
FIFO, a file too big or not text) is left as it is (a regular one is made
0600 without being read when the watcher admitted the job with no env
values: there is nothing to replace): what the job put there is the job's,
and so is what the job itself wrote (job.log, its working directory).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from hopper.core.admission import StartSpec
from hopper.core.prompt import BadPrompt, decode
from hopper.core.redaction import MIN_ELSEWHERE, WITHHELD, redact
from hopper.store.admission import (
    ADMISSION_FILE,
    ADMISSION_MODE,
    AdmissionUnusable,
    read_admission,
)
from hopper.store.atomic import write_atomic
from hopper.store.jobfile import PROMPT_FILE
from hopper.store.saferead import READ_FLAGS, UnreadableFile, read_bytes

PRIVATE_MODE = 0o600
# The largest prompt copy read to withhold values: far above max_prompt_bytes'
# default (1 MiB); a bigger one was refused at claim without reading its env.
READ_LIMIT = 64 << 20
# What agents/bash.py (SCRIPT_FILE) and agents/driven.py (PROMPT_BODY_FILE,
# drive.SPEC_FILE) write into the run directory from the prompt's text.
DERIVED = ("script.sh", "prompt.body.md", "agent.spec.json")
_NO_ENV = b'"env":{}'  # as admission.json (pydantic's compact JSON) writes an empty env


def withhold_env(run_dir: Path, job_id: str, *, env_free: bool = False) -> None:
    """Withhold the job's env values from its prompt copy and admission.json.

    ``env_free``: the caller admitted this job itself and its prompt had no env
    values (:class:`hopper.intake.Intake` remembers which): there is nothing to
    replace, so neither admission.json nor prompt.md is read again; the prompt
    is only made 0600 (read and rewritten, as for any job, if that fails).
    Raises OSError (ENOSPC …) when a rewrite fails; the values are then still
    in admission.json for the next attempt.
    """
    if env_free and _private(run_dir / PROMPT_FILE):
        return
    start = _admitted(run_dir, job_id)
    values = list(start.options.env.values()) if start else []
    _redact_prompt(run_dir / PROMPT_FILE, values)
    long = sorted((v for v in values if len(v) >= MIN_ELSEWHERE), key=len, reverse=True)
    if long:
        for name in DERIVED:
            _redact_derived(run_dir / name, long)
    if start is not None:
        # admission.json as a document with its env values withheld (an admission is
        # no JobRecord: nothing here changes a job's state)
        doc = start.model_dump(mode="json")
        doc["options"]["env"] = {k: WITHHELD for k in start.options.env}
        kept = _without(StartSpec.model_validate(doc).model_dump_json(), long)
        if kept != start.model_dump_json():
            path = run_dir / ADMISSION_FILE
            write_atomic(path, kept.encode(), follow_parent=False, mode=ADMISSION_MODE)


def _admitted(run_dir: Path, job_id: str) -> StartSpec | None:
    """The job's admission, if it holds env values (most hold none: no model is parsed)."""
    try:
        head = read_bytes(run_dir / ADMISSION_FILE, READ_LIMIT)
    except (FileNotFoundError, UnreadableFile):
        return None
    # A key written by hopper: a quote inside a JSON string is always escaped.
    if _NO_ENV in head:
        return None
    try:
        return read_admission(run_dir, job_id, READ_LIMIT)
    except AdmissionUnusable:
        return None


def _without(text: str, values: list[str]) -> str:
    """``text`` with each of ``values`` replaced, as written or JSON-escaped."""
    for value in values:
        for form in dict.fromkeys([value, json.dumps(value, ensure_ascii=False)[1:-1]]):
            text = text.replace(form, WITHHELD)
    return text


def _redact_prompt(path: Path, values: list[str]) -> None:
    try:
        data = read_bytes(path, READ_LIMIT)
        text = decode(data)
    except (FileNotFoundError, UnreadableFile, BadPrompt):
        return  # gone, or not a prompt hopper reads: nothing hopper can redact
    redacted = redact(text, values)
    if redacted == text and make_private(path):
        return
    write_atomic(path, redacted.encode(), follow_parent=False, mode=PRIVATE_MODE)


def _redact_derived(path: Path, values: list[str]) -> None:
    """``path`` without ``values``, as written or JSON-escaped (agent.spec.json)."""
    try:
        text = read_bytes(path, READ_LIMIT).decode()
    except (FileNotFoundError, UnreadableFile, UnicodeDecodeError):
        return
    redacted = _without(text, values)
    if redacted != text:
        write_atomic(path, redacted.encode(), follow_parent=False, mode=PRIVATE_MODE)


def _private(path: Path) -> bool:
    """The regular file at ``path`` is mode 0600, as the claim left it (one ``lstat``,
    never through a link), or made so (:func:`make_private`); False as that."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == PRIVATE_MODE:
        return True
    return make_private(path)


def make_private(path: Path) -> bool:
    """Mode 0600 for the regular file at ``path`` (links never followed); False if it
    is not the watcher's to change (another user's prompt) or not a regular file."""
    return private_read(path, None)[0]


def private_read(path: Path, limit: int | None) -> tuple[bool, bytes | None]:
    """Mode 0600 for the regular file at ``path`` and, given a ``limit``, its bytes
    read through the same descriptor: one open for both (the claim's). Links are never
    followed, a FIFO never blocks, a terminal is never taken.

    The flag is :func:`make_private`'s: False when the file is not the watcher's to
    change (another user's prompt keeps its mode) or not a regular file. The bytes are
    None when it is not a regular file of at most ``limit`` bytes (no ``limit``: not
    read) or was not read whole: the caller reads it with store/saferead.py, which
    refuses it in its own words."""
    try:
        fd = os.open(path, READ_FLAGS | os.O_NOCTTY)
    except OSError:
        return False, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False, None
        try:
            os.fchmod(fd, PRIVATE_MODE)
            changed = True
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EACCES):
                raise
            changed = False
        if limit is None or st.st_size > limit:
            return changed, None
        try:
            data = os.read(fd, st.st_size + 1)
        except OSError:
            return changed, None
        return changed, (data if len(data) == st.st_size else None)  # grown or shrunk
    finally:
        os.close(fd)
