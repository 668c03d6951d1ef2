"""What happens once a job has ended, whichever way it ended.

:meth:`hopper.runner.Runner.ended` is the one place an :class:`Ended` is
handled; this module holds its parts: the agent's summary refining the
reason, the retry decision (back to the queue with the attempt's files kept
under numbered names) or the terminal record and processed/, the worktree
removed after a success or reported kept, and the completion hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hopper.agents.base import Agent
from hopper.agents.registry import driven
from hopper.agents.summary import read_job_summary, read_live_state, record_fields
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.agent_outcome import final_reason
from hopper.core.lifecycle import Exited, ExitFigures, RetryScheduled
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.retry import backoff, should_retry
from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Ended, How
from hopper.hooks import HookRunner, HookSet, calls_for, webhook_options
from hopper.intake import Intake, Terminal
from hopper.store import ledger
from hopper.store.jobfile import LOG_FILE, read_resources
from hopper.workspace import remove_folder, remove_worktree

log = logging.getLogger(__name__)


@dataclass
class Endings:
    """Files ended jobs: retry or terminal record, worktree, hooks."""

    config: Config
    intake: Intake
    clock: Clock
    hooks: HookRunner
    agents: dict[str, Agent]

    def file(self, e: Ended) -> JobRecord:
        """The job's record after its end: terminal (filed), or queued again (a retry).

        A batch of one (:meth:`file_many`); raises what stopped it (the OSError
        of a refused write: its job.json then as it was)."""
        (result,) = self.file_many([e])
        if isinstance(result, Exception):
            raise result
        return result

    def file_many(self, ends: Sequence[Ended]) -> list[JobRecord | Exception]:
        """Each end filed: a retry queued again at once, and the terminal records
        of all the others in one group commit (:meth:`Intake.file_terminals`:
        every terminal record durable before any prompt moves). Per end, in
        order: its record after the end, or what stopped it (its job.json then
        as it was)."""
        now = self.clock.now()
        results: dict[int, JobRecord | Exception] = {}
        batch: list[tuple[int, Terminal]] = []
        for i, e in enumerate(ends):
            try:
                planned = self._plan(e, now)
            except Exception as exc:  # this end's, reported by the caller
                results[i] = exc
                continue
            if isinstance(planned, Terminal):
                batch.append((i, planned))
            else:
                results[i] = planned
        if not batch:
            return [results[i] for i in range(len(ends))]
        filed: list[JobRecord | OSError] | list[Exception]
        try:
            filed = self.intake.file_terminals([t for _, t in batch], now)
        except Exception as exc:  # a bug: every end of the batch waits for the next tick
            filed = [exc] * len(batch)
        for (i, _), result in zip(batch, filed, strict=True):
            results[i] = result
        return [results[i] for i in range(len(ends))]

    def _plan(self, e: Ended, now: datetime) -> JobRecord | Terminal:
        """What filing ``e`` takes: the record it leaves (already filed elsewhere, or
        a retry, queued again here) or the terminal record to commit with the rest."""
        if e.how is How.FILED:
            return e.record
        assert e.reason is not None, e
        if e.how is How.REJECTED:
            return self.intake.rejection(e.run_dir, e.record, e.reason, e.detail, now)
        if e.how is How.ABORTED:
            ledger.note(e.run_dir, "abort_requested", now, reason=Reason.ABORTED)
            return self._close(e.run_dir, e.record, e.reason, e.detail, None, now, e.files)
        if e.how is How.VANISHED:
            return self._vanished(e, now)
        record, reason, detail = self._refined(e)
        return self._close(e.run_dir, record, reason, detail, e.status, now, e.files)

    def _refined(self, e: Ended) -> tuple[JobRecord, Reason, str]:
        """An agent's own summary (agent.json) may say more than its exit status."""
        assert e.reason is not None
        record, reason, detail = e.record, e.reason, e.detail
        by_driver = driven(self.agents, record.agent)
        agent = read_job_summary(e.run_dir, self.clock.now(), driven=by_driver)
        if agent is None:
            return record, reason, detail
        live = read_live_state(e.run_dir)  # the agent's last state and detail
        record = lifecycle.exited(record, Exited(agent={**live, **record_fields(agent)})).record
        refined = final_reason(reason, agent)
        if refined is not None:
            reason, detail = refined
        return record, reason, detail

    def _vanished(self, e: Ended, now: datetime) -> Terminal:
        """Filed ``lost`` once, in a fresh run directory, and never retried (its
        prompt went with the directory); the executor has ended its processes, if
        it had any (a queued job's directory can vanish too)."""
        rec, run_dir = e.record, e.run_dir
        log.error(
            "job=%s state=%s its run directory %s was deleted; filing it lost",
            rec.id,
            rec.state,
            run_dir,
        )
        if run_dir.is_symlink():
            run_dir.unlink()  # the link itself, never what it points to
        run_dir.mkdir(exist_ok=True)
        started = rec.started_at
        duration = (now - started).total_seconds() if started else None
        return Terminal(run_dir, rec, Reason.LOST, e.detail, now, duration)

    def _close(
        self,
        run_dir: Path,
        record: JobRecord,
        reason: Reason,
        detail: str,
        status: ExitStatus | None,
        now: datetime,
        files: tuple[str, ...],
    ) -> JobRecord | Terminal:
        """Retry the job if its policy says so (queued again here, the attempt's
        ``files`` kept), else its terminal record with the figures its exit status gives."""
        record = self._used(run_dir, record, status)
        if self._retries(record, reason):
            return self._retry(run_dir, record, reason, detail, status, files)
        finished = status.finished_at if status is not None else now
        started = record.started_at
        return Terminal(
            run_dir,
            record,
            reason,
            detail,
            finished,
            (finished - started).total_seconds() if started else None,
            ExitFigures(status.exit_code, status.signal) if status else ExitFigures(None, None),
        )

    def _used(self, run_dir: Path, record: JobRecord, status: ExitStatus | None) -> JobRecord:
        """Final figures from exit.json; else (lost) the last live ones."""
        if record.state is JobState.RUNNING:
            used = status.resources if status is not None else None
            used = used or read_resources(run_dir)
            if used is not None:
                record = lifecycle.exited(record, Exited(resources=used)).record
        return record

    @staticmethod
    def _retries(record: JobRecord, reason: Reason) -> bool:
        return record.state is JobState.RUNNING and should_retry(
            reason, record.attempt, record.retries
        )

    def _retry(
        self,
        run_dir: Path,
        record: JobRecord,
        reason: Reason,
        detail: str,
        status: ExitStatus | None,
        files: tuple[str, ...],
    ) -> JobRecord:
        """Keep this attempt's log and the files its executor named (its exit record)
        under attempt-numbered names; requeue."""
        n = record.attempt
        for name in (LOG_FILE, *files):
            source = run_dir / name
            if source.exists():
                stem, dot, ext = name.partition(".")
                source.rename(run_dir / f"{stem}.{n}{dot}{ext}")
        delay = backoff(n, self.config.retry_backoff)
        now = self.clock.now()
        fact = RetryScheduled(
            at=now,
            reason=reason,
            detail=detail,
            delay_seconds=delay,
            not_before=now + timedelta(seconds=delay),
            exit_code=status.exit_code if status else None,
            signal=status.signal if status else None,
        )
        queued = ledger.commit(run_dir, lifecycle.retry_scheduled(record, fact))
        log.info("job=%s attempt=%d reason=%s retry in %gs", record.id, n, reason, delay)
        return queued

    def tidy_worktree(self, final: JobRecord, run_dir: Path) -> None:
        """Remove the worktree after a success (the branch stays), a folder after a success
        or an abort; else report it kept.

        git or a big tree may be slow (a held lock): the removal runs on the hooks'
        thread, before the job's hooks, never on the watcher's loop.
        """
        now = self.clock.now()
        folder = final.workspace == "folder"
        ended = (JobState.SUCCEEDED, JobState.ABORTED) if folder else (JobState.SUCCEEDED,)
        if final.state in ended:

            def remove() -> None:
                layout = self.intake.layout
                why = remove_folder(layout, final) if folder else remove_worktree(final)
                path, at = final.workspace_path, self.clock.now()
                if why is None:
                    ledger.note(run_dir, "workspace_removed", at, path=path, branch=final.branch)
                else:
                    ledger.note(run_dir, "workspace_kept", at, path=path, why=why)

            self.hooks.submit([remove])
        else:
            ledger.note(
                run_dir,
                "workspace_kept",
                now,
                path=final.workspace_path,
                branch=final.branch,
                why=f"the job {final.state}",
            )

    def run_hooks(self, record: JobRecord, run_dir: Path) -> None:
        """Queue the completion hooks a finalized job triggers (job's own win per kind)."""
        conf, own = self.config.hooks, record.hooks
        hooks = HookSet(
            on_success=(own and own.on_success) or conf.on_success,
            on_failure=(own and own.on_failure) or conf.on_failure,
            on_finish=(own and own.on_finish) or conf.on_finish,
            webhook=conf.webhook,
            timeout=conf.timeout,
            webhook_options=webhook_options(conf),
        )
        if hooks.on_success or hooks.on_failure or hooks.on_finish or hooks.webhook:
            self.hooks.submit(calls_for(record, run_dir, hooks))  # else no templates to expand
