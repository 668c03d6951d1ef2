"""``runs/<id>/admission.json``: what start needs of a prompt, written once at claim.

The :class:`~hopper.core.admission.StartSpec` holds the prompt's options and
body as parsed at claim, including its ``env`` values, which may be secrets:
the file is created mode 0600 (store/atomic.py), and nothing else in hopper
copies those values into job.json, events or logs; when the job ends for good
they are withheld from it (store/withhold.py). Start reads it instead of
prompt.md, so an edited prompt.md cannot change what runs.

The watcher that wrote a job's admission.json starts it from the spec it wrote,
kept in memory (:data:`written`), not read back: the first read of a run
directory's admission.json in this process takes the spec this process wrote
there, if it is still kept; every later read (a start tried again, a retry) and
every read after a restart reads the file. The copy is what the file held when
written, and nothing of the file is trusted more for it: a file changed since
is ignored once, never believed.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

from hopper.core.admission import StartSpec
from hopper.proc.writeall import write_all
from hopper.store.atomic import open_dir, write_atomic
from hopper.store.saferead import UnreadableFile, read_model

ADMISSION_FILE = "admission.json"
ADMISSION_MODE = 0o600
# JSON escapes a control character as six bytes (\u0001): room for a prompt
# of max_prompt_bytes made of nothing else, plus its env (64 KiB, escaped).
_ESCAPE = 6
_ENV_ROOM = 1 << 20


def admission_limit(max_prompt_bytes: int) -> int:
    """The most bytes an admission.json of a prompt of at most ``max_prompt_bytes`` holds."""
    return _ESCAPE * max_prompt_bytes + _ENV_ROOM


class Written:
    """The specs this process wrote, by run directory, until read once: the oldest
    dropped beyond ``budget`` bytes of JSON (a job filed before its start, or taken
    over, is never read: it ages out)."""

    def __init__(self, budget: int = 4 << 20) -> None:
        self.budget = budget
        self._specs: OrderedDict[str, tuple[StartSpec, int]] = OrderedDict()
        self._bytes = 0

    def keep(self, run_dir: Path, start: StartSpec, size: int) -> None:
        self.drop(run_dir)
        if size > self.budget:
            return
        self._specs[str(run_dir)] = (start, size)
        self._bytes += size
        while self._bytes > self.budget:
            _, (_, dropped) = self._specs.popitem(last=False)
            self._bytes -= dropped

    def take(self, run_dir: Path) -> StartSpec | None:
        """The spec written at ``run_dir``, forgotten as it is given; None if not kept."""
        kept = self._specs.pop(str(run_dir), None)
        if kept is None:
            return None
        self._bytes -= kept[1]
        return kept[0]

    def drop(self, run_dir: Path) -> None:
        kept = self._specs.pop(str(run_dir), None)
        if kept is not None:
            self._bytes -= kept[1]

    def __len__(self) -> int:
        return len(self._specs)


written = Written()  # this process's: what it wrote, read back once from memory


def write_admission(run_dir: Path, start: StartSpec, *, dir_fd: int | None = None) -> None:
    """Write ``admission.json`` (0600; not fsynced, like the queued record).

    Written before the queued job.json, so a queued record normally has one;
    a power cut can still lose it (see :func:`read_admission`). Nothing reads
    it before there is a queued record (start, withhold), so the claim's first
    one is written in place, made exclusively (no temporary, no rename); a
    crash while writing it leaves no record, and recovery's claim completion
    replaces it atomically like anything already at the name.
    """
    data = start.model_dump_json().encode()
    written.drop(run_dir)
    write_admission_bytes(run_dir, data, dir_fd=dir_fd)
    written.keep(run_dir, start, len(data))


def write_admission_bytes(run_dir: Path, data: bytes, *, dir_fd: int | None = None) -> None:
    """The file of :func:`write_admission` from its JSON, :data:`written` left alone:
    for a spec kept there already (intake.py's write behind the start)."""
    if not _write_new(run_dir, data, dir_fd):
        write_atomic(
            run_dir / ADMISSION_FILE, data, durable=False, follow_parent=False, mode=ADMISSION_MODE
        )


def _write_new(run_dir: Path, data: bytes, held: int | None = None) -> bool:
    """``data`` into a new admission.json (O_EXCL: never through a link); False if
    something is already at the name. A failed write removes the file it made.
    ``held``: the run directory's descriptor (O_NOFOLLOW) the caller holds, else
    it is opened here."""
    dir_fd = open_dir(run_dir, follow=False) if held is None else held
    try:
        try:
            fd = os.open(ADMISSION_FILE, _NEW_FLAGS, ADMISSION_MODE, dir_fd=dir_fd)
        except FileExistsError:
            return False
        try:
            write_all(fd, data)
        except BaseException:
            os.close(fd)
            os.unlink(ADMISSION_FILE, dir_fd=dir_fd)
            raise
        os.close(fd)
        return True
    finally:
        if held is None:
            os.close(dir_fd)


_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class AdmissionUnusable(Exception):
    """admission.json is there but not the one written at claim for this job."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def read_admission(run_dir: Path, job_id: str, max_prompt_bytes: int) -> StartSpec | None:
    """The job's StartSpec; None if there is no admission.json (claimed before hopper
    kept one, or lost to a power cut). Raises :class:`AdmissionUnusable` when the file
    is not a regular file holding this job's spec (the message says why). The first
    read after this process wrote it is the spec it wrote (:data:`written`)."""
    kept = written.take(run_dir)
    if kept is not None and kept.job_id == job_id:
        return kept
    path = run_dir / ADMISSION_FILE
    hint = "admission.json is written by hopper at claim; a job that rewrites it is not trusted"
    try:
        start = read_model(StartSpec, path, admission_limit(max_prompt_bytes), hint=hint)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        raise AdmissionUnusable(exc.message) from None
    if start.job_id != job_id:
        raise AdmissionUnusable(f"it is job {start.job_id}'s, not {job_id}'s")
    return start
