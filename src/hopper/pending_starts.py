"""Starts on their way: queued jobs begun under their executor, not yet released to run.

:meth:`Runner.start <hopper.runner.Runner.start>` hands each job here: its
workspace and launch are prepared, its executor starts it, and a start that
reports later (a supervisor still setting up) waits in this set until
:meth:`PendingStarts.settle` commits a turn's ``running`` records in one group
commit (store/ledger.py: durable before anything acts on them) and releases
each job to the runner. A start that fails costs its job, never the loop: the
job is handed back to the runner's one ended path, its leases with it.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hopper import prepare
from hopper.config import Config
from hopper.core.lifecycle import Step
from hopper.core.prompt import BadPrompt
from hopper.core.record import JobRecord
from hopper.core.states import Reason
from hopper.executors.protocol import Deferred, Ended, Executor, How, Launch, Starting
from hopper.intake import Intake
from hopper.loopguard import LoopGuard
from hopper.running import Running
from hopper.scaleout import ScaleOut
from hopper.store import ledger
from hopper.store.layout import Layout
from hopper.workspace import WorkspaceFailed


@dataclass
class PendingStarts:
    layout: Layout
    config: Config
    intake: Intake
    scale: ScaleOut  # the leases a start holds
    guard: LoopGuard  # one bad job never stops the loop
    executor_for: Callable[[JobRecord], Executor]
    released: Callable[[Running], None]  # it runs: the runner tracks it
    never_ran: Callable[[Ended], None]  # it ends before it ran: the runner files it, leased
    handed_back: Callable[[JobRecord], None]  # its executor deferred it: back to the queue
    _starting: dict[str, Starting] = field(default_factory=dict)  # begun, not yet released

    def __len__(self) -> int:
        return len(self._starting)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._starting

    def records(self) -> list[JobRecord]:
        return [s.record for s in self._starting.values()]

    def start(self, record: JobRecord) -> bool:
        """Start a queued job under its executor; False if its leases are taken elsewhere.

        Whatever happens next (it runs, it waits for its executor, it is
        rejected) is this method's to settle: it never raises.
        """
        if not self.scale.acquire(record):
            return False
        try:
            self._start(record)
        except Exception as exc:  # costs this job, never the loop
            self._start_failed(record, exc)
        return True

    def _start_failed(self, record: JobRecord, exc: Exception) -> None:
        """A start that raised (a write refused, a bug): the job is rejected, leases given back."""
        bug = "" if isinstance(exc, OSError) else " (a bug in hopper: please report it)"
        self.guard.report(f"start:{record.id}", exc, what=f"job={record.id} could not start")
        detail = f"could not start: {exc}{bug}"

        def reject() -> None:
            run_dir = self.layout.run_dir(record.id)
            self.never_ran(Ended(record, run_dir, How.REJECTED, Reason.SPAWN_FAILED, detail))

        self.guard.step(f"reject:{record.id}", reject)

    def _start(self, record: JobRecord) -> None:
        run_dir = self.layout.run_dir(record.id)
        launch = self._launch(record, run_dir)
        if isinstance(launch, Ended):
            self.never_ran(launch)
            return
        result = self.executor_for(record).start(launch)
        if isinstance(result, Running):
            self.released(result)
        elif isinstance(result, Starting):
            self._starting[record.id] = result  # finished by settle
            self.scale.starting.add(record.id)  # its lease is in use, though it is queued
        elif isinstance(result, Deferred):
            self.scale.release(record)
            self.handed_back(result.record)
        else:
            self.never_ran(result)

    def _launch(self, record: JobRecord, run_dir: Path) -> Launch | Ended:
        try:
            record = prepare.with_workspace(self.layout, record)
        except WorkspaceFailed as exc:
            why = f"{record.inbox_path}: {exc}"
            return Ended(record, run_dir, How.REJECTED, Reason.WORKSPACE_FAILED, why)
        try:
            ready = prepare.prepare(self.layout, self.config, self.intake.agents, record, run_dir)
        except BadPrompt as exc:
            why = exc.describe(record.inbox_path)
            return Ended(record, run_dir, How.REJECTED, Reason.BAD_PROMPT, why)
        return Launch(record, run_dir, ready.prep, ready.workdir, ready.env, ready.job_vars)

    def settle(self, timeout: float = 0.0) -> None:
        """Finish the starts whose executors have reported (or whose deadline has
        passed): their ``running`` records are committed in one group commit
        (store/ledger.py: durable before anything acts on them), then each job
        is released. Waits up to ``timeout`` for the first report."""
        if not self._starting:
            return
        ready: list[Starting] = list(self._starting.values())
        try:
            ready = select.select(ready, [], [], timeout)[0]
        except (OSError, ValueError):
            pass  # a descriptor gone bad: collect them all, each fails on its own
        mono = time.monotonic()  # real time: the executor's deadline is for real processes
        ready += [s for s in self._starting.values() if s.deadline <= mono and s not in ready]
        entries: list[tuple[Starting, ledger.Entry]] = []
        for start in ready:
            del self._starting[start.record.id]
            report = self._report(start)
            if isinstance(report, Ended):
                self.guard.step(f"reject:{start.record.id}", self._never_ran(report))
            elif report is not None:
                entries.append((start, ledger.Entry(start.run_dir, report)))
        try:
            self._commit_starts(entries)
        finally:
            self.scale.starting.difference_update(s.record.id for s in ready)

    def _commit_starts(self, entries: list[tuple[Starting, ledger.Entry]]) -> None:
        if not entries:
            return
        failed = ledger.commit_batch([e for _, e in entries], crash="start.after_record")
        errors = {id(f.entry): f.error for f in failed}
        for start, entry in entries:
            error = errors.get(id(entry))
            if error is None:
                self.released(start.release(entry.step.record))
            else:
                start.abandon()
                self._start_failed(start.record, error)

    def _never_ran(self, end: Ended) -> Callable[[], None]:
        def handle() -> None:
            self.never_ran(end)

        return handle

    def _report(self, start: Starting) -> Step | Ended | None:
        """A start's report; None if collecting it raised (the job is then rejected)."""
        try:
            return start.report()
        except Exception as exc:  # costs this job, never the loop
            start.abandon()
            self._start_failed(start.record, exc)
            return None

    def finish(self) -> None:
        """Settle every start on its way (before recovery looks at the runs, or at exit)."""
        while self._starting:
            self.settle(timeout=0.05)

    def waiting_on(self) -> list[Starting]:
        """What the loop's sleep should wake for besides its own pipe."""
        return list(self._starting.values())
