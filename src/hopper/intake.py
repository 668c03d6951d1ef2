"""From inbox file to queued (or failed) job: claim, read, parse, record.

Bad input never stops the watcher: a prompt that cannot run ends as a
failed job whose ``detail`` names the file, the line and the fix, and its
file goes to processed/ like any other.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hopper.agents.base import Agent
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import admission, lifecycle
from hopper.core.jobid import prompt_stem
from hopper.core.lifecycle import Admitted, ExitFigures, Step
from hopper.core.owner import WatcherId
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.routing import plain_name
from hopper.core.states import JobState, Reason
from hopper.store import ledger, saferead
from hopper.store.admission import write_admission_bytes, written
from hopper.store.claim import Claimed, claim, printable, read_claim
from hopper.store.finalize import ending, file_terminals
from hopper.store.jobfile import PROMPT_FILE
from hopper.store.layout import Layout

log = logging.getLogger(__name__)


def read_prompt(path: Path, limit: int) -> bytes:
    """The prompt's bytes, refusing anything but a regular file of at most ``limit`` bytes."""
    try:
        return saferead.read_bytes(path, limit, hint=_PROMPT_HINT)
    except FileNotFoundError:
        raise BadPrompt("vanished before it could be read") from None
    except saferead.UnreadableFile as exc:
        hint = "shorten it, or raise max_prompt_bytes in the config"
        raise BadPrompt(exc.message, hint=hint if exc.problem == "too_big" else exc.hint) from None


_PROMPT_HINT = (
    "hopper never follows links or reads special files; "
    "copy the prompt into the inbox as a plain file"
)


@dataclass(frozen=True)
class Terminal:
    """One job to file terminal: why, and the figures its caller knows."""

    run_dir: Path
    record: JobRecord  # as last known: queued or running
    reason: Reason
    detail: str
    finished_at: datetime
    duration_seconds: float | None = None
    exit: ExitFigures | None = None  # None: keep the exit code and signal the record has


@dataclass(frozen=True)
class Unwritten:
    """A job claimed and admitted whose admission.json and queued record are still
    to be written (:meth:`Intake.write_behind`); its spec is in :data:`written`."""

    run_dir: Path
    data: bytes  # admission.json
    step: Step  # the queued record and its events


class Intake:
    def __init__(
        self,
        layout: Layout,
        config: Config,
        agents: dict[str, Agent],
        clock: Clock,
        ident: WatcherId,
    ) -> None:
        self.layout = layout
        self.config = config
        self.agents = agents
        self.clock = clock
        self.ident = ident
        # Jobs this watcher admitted with no env values (admission.json as it wrote
        # it): their end does not read admission.json again to withhold values.
        # A job adopted after a restart is not here, and is read as before.
        self.env_free: set[str] = set()
        # Claimed this turn, files still to write: by id, in claim order (take(behind=True)).
        self.unwritten: dict[str, Unwritten] = {}

    def take(self, path: Path, *, behind: bool = False) -> JobRecord | None:
        """Claim and admit one inbox file; None if another watcher got it first.

        ``behind``: a job admitted to the queue has its admission.json and queued
        record written later in the turn (:meth:`write_behind`), after its start
        is begun when it starts at once: they are off the start's path then,
        written while its supervisor forks. Until then the job is in memory only
        (its spec in :data:`~hopper.store.admission.written`), on disk a claimed
        prompt, as a crash finds it after the claim. A job refused at claim is
        filed at once either way."""
        claimed = claim(
            self.layout,
            path,
            self.clock.now(),
            self.ident.host,
            self.ident.owner,
            limit=self.config.max_prompt_bytes,
        )
        if claimed is None:
            return None
        try:
            return self.admit(claimed, behind=behind)
        finally:
            if claimed.dir_fd is not None:
                os.close(claimed.dir_fd)

    def resume_claim(self, run_dir: Path) -> JobRecord:
        """Recovery: the prompt was renamed in but job.json never written."""
        marker = read_claim(run_dir) or {}
        inbox_rel = marker.get("inbox_path") or f"inbox/{run_dir.name}.prompt.md"
        noted = "ts" in marker  # the marker is the claimed event (not an old claim.json)
        bad_name = marker.get("name_not_utf8") == "true"
        return self.admit(Claimed(run_dir.name, run_dir, inbox_rel, noted, bad_name))

    def admit(self, claimed: Claimed, *, behind: bool = False) -> JobRecord:
        now = self.clock.now()
        run_dir = claimed.run_dir
        # A name that is not UTF-8 arrives with surrogate escapes, which no
        # JSON record can hold: records carry a printable rendering instead.
        inbox_rel = printable(claimed.inbox_rel)
        if not claimed.noted:  # claimed by an older hopper, which noted it here
            ledger.note(
                run_dir,
                "claimed",
                now,
                inbox_path=inbox_rel,
                host=self.ident.host,
                owner=self.ident.owner,
            )
        base = JobRecord(
            id=claimed.job_id,
            name=prompt_stem(plain_name(inbox_rel)),
            state=JobState.QUEUED,
            agent=self.config.default_agent,
            host=self.ident.host,
            owner=self.ident.owner,
            inbox_path=inbox_rel,
            created_at=now,
        )
        if inbox_rel != claimed.inbox_rel or claimed.name_not_utf8:
            return self.reject(
                run_dir,
                base,
                Reason.BAD_PROMPT,
                f"{inbox_rel}: the file name is not valid UTF-8 (shown with \\x escapes; "
                "the prompt is filed under that name); rename it to UTF-8 and submit it again",
            )
        try:
            data = claimed.data  # read as the claim made it 0600, if that was all it took
            if data is None:
                data = read_prompt(run_dir / PROMPT_FILE, self.config.max_prompt_bytes)
        except BadPrompt as exc:
            return self.reject(run_dir, base, Reason.BAD_PROMPT, exc.describe(claimed.inbox_rel))
        verdict = admission.admit(
            data,
            job_id=claimed.job_id,
            inbox_path=claimed.inbox_rel,
            config=self.config,
            agents=self.agents.keys(),
        )
        if isinstance(verdict, admission.Refusal):
            rejected = lifecycle.admitted(base, Admitted(now, verdict.settings)).record
            return self.reject(run_dir, rejected, verdict.reason, verdict.detail)
        step = lifecycle.admitted(base, Admitted(now, verdict.settings))
        record = step.record
        data = verdict.start.model_dump_json().encode()
        written.keep(run_dir, verdict.start, len(data))  # what the start reads first
        if not verdict.start.options.env:
            self.env_free.add(record.id)
        entry = Unwritten(run_dir, data, step)
        if behind:
            self.unwritten[record.id] = entry
        else:
            self._write(entry, claimed.dir_fd)
        return record

    def _write(self, entry: Unwritten, dir_fd: int | None = None) -> None:
        """admission.json, then the queued record; on an OSError (raised) neither
        is believed: the spec kept in memory is dropped, as is the job's env-free
        mark. ``dir_fd``: the run directory, held open by the caller."""
        record = entry.step.record
        try:
            # Before the queued record: a queued job has what its start needs (0600: env).
            write_admission_bytes(entry.run_dir, entry.data, dir_fd=dir_fd)
            # Not fsynced: if a power cut loses it, prompt.md and the claimed event are
            # still there and recovery completes the claim; the running record is durable.
            ledger.commit(
                entry.run_dir, entry.step, durable=False, crash="claim.after_record", dir_fd=dir_fd
            )
        except OSError:
            written.drop(entry.run_dir)
            self.env_free.discard(record.id)
            raise
        log.info("job=%s state=queued name=%s agent=%s", record.id, record.name, record.agent)

    def write_behind(self, job_id: str) -> OSError | None:
        """Write a job's admission.json, then its queued record, if they are still to
        be written (:meth:`take` with ``behind``); the OSError that stopped them.

        A job whose files could not be written is forgotten here (its spec too):
        the caller drops it from the queue and ends any start it began, and
        recovery completes the claim later from prompt.md and the claimed event,
        as after a crash at the claim (watcher.py's reconcile)."""
        entry = self.unwritten.pop(job_id, None)
        if entry is None:
            return None
        try:
            self._write(entry)
        except OSError as exc:
            log.error(
                "job=%s: cannot write its queued record (%s); left as claimed, "
                "for recovery to complete",
                job_id,
                exc,
            )
            return exc
        return None

    def reject(self, run_dir: Path, record: JobRecord, reason: Reason, detail: str) -> JobRecord:
        """End a job that cannot run at claim: terminal record, prompt filed under processed/."""
        now = self.clock.now()
        (result,) = self.file_terminals([self.rejection(run_dir, record, reason, detail, now)], now)
        if isinstance(result, OSError):
            raise result
        return result

    def rejection(
        self, run_dir: Path, record: JobRecord, reason: Reason, detail: str, now: datetime
    ) -> Terminal:
        """A job that never ran, to file terminal: its ``rejected`` event first."""
        ledger.note(run_dir, "rejected", now, reason=reason, detail=detail)
        return Terminal(run_dir, record, reason, detail, now)

    def file_terminals(self, ends: Sequence[Terminal], now: datetime) -> list[JobRecord | OSError]:
        """End jobs through store/finalize.py's terminal path, their records in one
        group commit, and log each (hooks: Runner.ended). A single end is a batch of
        one. Per job, in order: its record as filed, or the OSError that stopped it
        (its job.json then as it was, or terminal with its prompt unmoved)."""
        if not ends:
            return []
        planned = [
            (
                t.run_dir,
                t.record,
                ending(
                    self.layout,
                    t.record,
                    t.reason,
                    t.detail,
                    t.finished_at,
                    t.duration_seconds,
                    t.exit,
                ),
            )
            for t in ends
        ]
        results = file_terminals(self.layout, planned, now, self.env_free)
        for t, result in zip(ends, results, strict=True):
            written.drop(t.run_dir)  # filed before a start read it back (or after: gone)
            if not isinstance(result, OSError):
                self.env_free.discard(t.record.id)
                log.log(
                    logging.INFO if t.record.state is JobState.RUNNING else logging.WARNING,
                    "job=%s state=%s->%s reason=%s detail=%s",
                    t.record.id,
                    t.record.state,
                    result.state,
                    t.reason,
                    t.detail,
                )
        return results
