"""Finding a job by what a person types: an id, an id prefix, or a name.

A name no job has yet may be a prompt still waiting in the inbox: then the
error says "not claimed yet" and where the file is, not "no job".

Ids are lower case by construction (``core/jobid.py``), so a reference is
matched against them lower-cased; names are matched case-insensitively too
(``hopper events cl-tooltest`` finds the job named ``cl-TOOLTEST``), an
exact-case name winning over one that differs only in case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol, TypeVar

from hopper.errors import JobFileCorrupt, JobNotFound
from hopper.store.jobfile import JOB_FILE, iter_run_dirs, read_record
from hopper.store.layout import Layout

if TYPE_CHECKING:
    from hopper.core.record import JobRecord

OnCorrupt = Callable[[JobFileCorrupt], None]


class Named(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=Named)
# run_dir -> its record (JobRecord, or the read path's JobView); raises as read_record
Reader = Callable[[Path], R]


def _ignore(_: JobFileCorrupt) -> None:
    return None


def read_all(layout: Layout, on_corrupt: OnCorrupt = _ignore) -> list[JobRecord]:
    """Every readable job record, oldest id first; a corrupt one goes to ``on_corrupt``."""
    return read_every(layout, read_record, on_corrupt)


def read_every(layout: Layout, read: Reader[R], on_corrupt: OnCorrupt = _ignore) -> list[R]:
    """:func:`read_all` with another reader (``store/jobread.read_view``)."""
    records = []
    for run_dir in iter_run_dirs(layout.runs):
        try:
            records.append(read(run_dir))
        except FileNotFoundError:
            continue  # a claim in progress
        except JobFileCorrupt as exc:
            on_corrupt(exc)
    return records


def find_job(layout: Layout, ref: str, on_corrupt: OnCorrupt = _ignore) -> JobRecord:
    """An exact id, a unique id prefix, or a name (its newest job), any letter case.

    Raises :class:`JobNotFound` when nothing matches or a prefix is ambiguous, and
    :class:`JobFileCorrupt` when the job named by its exact id has a broken record.
    """
    return find_with(layout, ref, read_record, on_corrupt)


def find_with(layout: Layout, ref: str, read: Reader[R], on_corrupt: OnCorrupt = _ignore) -> R:
    """:func:`find_job` with another reader (``store/jobread.read_view``)."""
    key = ref.lower()
    if key and "/" not in key and not key.startswith("."):
        try:
            return read(layout.run_dir(key))
        except FileNotFoundError:
            pass
    records = read_every(layout, read, on_corrupt)
    by_prefix = [r for r in records if key and r.id.startswith(key)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    if len(by_prefix) > 1:
        raise JobNotFound(
            f"{ref!r} matches {len(by_prefix)} jobs",
            hint="give more of the id: " + ", ".join(r.id for r in by_prefix[:5]),
        )
    exact = [r for r in records if r.name == ref]
    if exact:
        return exact[-1]
    folded = ref.casefold()
    by_name = [r for r in records if r.name.casefold() == folded]
    if by_name:
        return by_name[-1]
    waiting = unclaimed(layout, ref)
    if waiting:
        raise JobNotClaimed(
            f"{ref!r} is not claimed yet: {waiting[0]} waits in the inbox",
            hint="a watcher claims it (is one running? hopper watchers); "
            "remove the file to cancel it",
        )
    taking = claiming(layout, ref)
    if taking:
        raise JobNotClaimed(
            f"{ref!r} is being claimed: {taking[0]} has its prompt but no job.json yet",
            hint="it is a job in a moment; if it stays like this, the watcher that "
            "claimed it died and the next one to start completes the claim",
        )
    raise JobNotFound(
        f"no job with id, id prefix or name {ref!r} under {layout.runs}"
        + did_you_mean(ref, records),
        hint="hopper status lists the jobs",
    )


def did_you_mean(ref: str, jobs: Iterable[Named]) -> str:
    """``"; did you mean 'x'?"`` for the job name (else id) closest to ``ref``, or ``""``.

    A mistyped name is the common case, so names are looked at first, in any
    letter case (as they are matched); ``difflib``'s default cutoff (0.6)."""
    from difflib import get_close_matches  # the not-found path only

    names: dict[str, str] = {}
    ids: list[str] = []
    for job in jobs:
        names.setdefault(job.name.casefold(), job.name)
        ids.append(job.id)
    close = get_close_matches(ref.casefold(), list(names), n=1)
    if close:
        return f"; did you mean {names[close[0]]!r}?"
    close = get_close_matches(ref.lower(), ids, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def indexed_suggestion(layout: Layout, ref: str) -> str:
    """:func:`did_you_mean` over the status index (``hopper status``'s not-found path)."""
    from hopper.store.index import JobIndex

    with JobIndex.open(layout) as index:
        index.refresh()
        return did_you_mean(ref, index.jobs())


def references(layout: Layout, prefix: str = "") -> list[str]:
    """Every job id and name starting with ``prefix`` (any letter case), for shell
    completion: read from the status index after its refresh (no pydantic unless a
    job.json is not in the shape hopper writes). Names with white space or control
    characters are left out: a shell word cannot complete to them safely."""
    from hopper.store.index import JobIndex

    folded = prefix.casefold()
    with JobIndex.open(layout) as index:
        index.refresh()
        jobs = index.jobs()
    found = dict.fromkeys(j.id for j in jobs if j.id.startswith(prefix.lower()))
    for job in jobs:
        if (
            job.name.casefold().startswith(folded)
            and job.name.isprintable()
            and (not any(c.isspace() for c in job.name))
        ):
            found.setdefault(job.name)
    return list(found)


class JobNotClaimed(JobNotFound):
    """No job yet, but a prompt of that name waits in the inbox."""


def claiming(layout: Layout, ref: str) -> list[Path]:
    """Run directories mid-claim (no job.json yet) of an inbox prompt whose stem is ``ref``."""
    from hopper.core.jobid import prompt_stem
    from hopper.store.claim import read_claim  # the not-found path only: keeps lookups light

    folded = ref.casefold()
    found = []
    for run_dir in iter_run_dirs(layout.runs):
        if (run_dir / JOB_FILE).exists():
            continue
        inbox_path = (read_claim(run_dir) or {}).get("inbox_path", "")
        if prompt_stem(PurePosixPath(inbox_path).name).casefold() == folded:
            found.append(run_dir)
    return found


def unclaimed(layout: Layout, ref: str) -> list[Path]:
    """Inbox prompts whose file stem is ``ref`` (any letter case), in scan order."""
    from hopper.core.jobid import prompt_stem
    from hopper.store.inbox import scan

    folded = ref.casefold()
    return [c.path for c in scan(layout.inbox) if prompt_stem(c.path.name).casefold() == folded]
