"""Starts: the queued jobs, their markers, and which of them start now.

Each turn the watcher asks :meth:`Starts.start_queued`: retries come back
into the queue, ABORT and PRIORITY markers of queued jobs are swept (over
turns when the queue is large), core/schedule.py decides what starts and
what fails, and this carries the decision out through the runner. A job
another watcher took over while we were silent is dropped, never started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from hopper import claims
from hopper.budgetnews import announce
from hopper.budgetwatch import BudgetWatch
from hopper.clock import Clock
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.budgets import Holds
from hopper.core.lifecycle import Held, PriorityChange
from hopper.core.queued import QueuedJobs
from hopper.core.record import JobRecord
from hopper.core.schedule import Decision, KnownJob, SlotLimits, schedule
from hopper.core.states import Reason
from hopper.loopguard import LoopGuard
from hopper.pending_starts import aheads
from hopper.runner import QUEUED_VANISHED, Runner
from hopper.scaleout import ScaleOut
from hopper.store import ledger
from hopper.store.jobfile import ABORT_FILE
from hopper.store.known import KnownJobs
from hopper.store.layout import Layout, run_dir_gone
from hopper.store.markers import read_pause, take_priority_request
from hopper.store.quiet_dirs import QuietDirs
from hopper.store.takeover import taken_by

log = logging.getLogger(__name__)

QUEUE_SWEEP_INTERVAL = 1.0  # seconds between full passes over the queued jobs
SWEEP_BUDGET = 0.1  # seconds of a pass per turn at most: a large queue is swept over turns
SWEEP_REST = 9.0  # after a slice of a pass, this many times its cost without sweeping (<= 10 %)
WINDOW_MIN = 64  # queued jobs below this count are always scheduled in full


class Starts:
    """The queue this watcher holds and the starts it makes from it."""

    def __init__(
        self,
        layout: Layout,
        config: Config,
        clock: Clock,
        guard: LoopGuard,
        runner: Runner,
        scale: ScaleOut,
        limits: SlotLimits,
        queued: QueuedJobs,
        *,
        owner: str,
        keepalive: Callable[[], None],
    ) -> None:
        self.layout = layout
        self.config = config
        self.clock = clock
        self.guard = guard
        self.runner = runner
        self.scale = scale
        self.limits = limits
        self.queued = queued  # by id, with the start order kept (core/queued.py)
        self.owner = owner  # this watcher's owner string
        self.keepalive = keepalive
        self.known = KnownJobs(layout)
        self.paused: frozenset[str] = frozenset()  # queued ids held only by PAUSE
        self.held: frozenset[str] = frozenset()  # queued ids a reached budget holds
        self.budgets = BudgetWatch(layout, config.budgets, clock)
        self._next_queue_sweep = 0.0
        self._sweep: list[str] = []  # queued ids this pass has still to look at, last first
        self._next_slice = 0.0
        self._quiet = QuietDirs(str(layout.runs))  # run dirs with no marker made since

    def mine(self, job_id: str, record: JobRecord) -> bool:
        """Is this queued job still ours? Drops it (logged) if another watcher took it."""
        holder = taken_by(self.layout.run_dir(job_id), record.owner, self.owner)
        if holder is None:
            return True
        self.runner.drop_ahead(job_id)
        self.queued.pop(job_id, None)
        log.warning(
            "job=%s was taken over by %s while this watcher was silent; leaving it to them",
            job_id,
            holder,
        )
        return False

    def start_queued(self) -> None:
        """Abort, reprioritise, then ask core/schedule.py what starts and what fails.

        The jobs claimed this turn have their admission.json and queued record
        written behind their starts' begins (pending_starts.py), or, for those
        that do not start now, before anything else touches them here and at the
        latest as this returns."""
        try:
            self._start_queued()
        finally:
            self._write_claims()

    def _write_claims(self) -> None:
        """Every job claimed this turn written (intake.py's write behind), in claim order."""
        for job_id in list(self.runner.intake.unwritten):
            self._written(job_id)

    def _written(self, job_id: str) -> bool:
        """A queued job's files are on disk (written now if they were still to be);
        False: they could not be, and it left the queue, for recovery to complete
        its claim."""
        if job_id not in self.runner.intake.unwritten:
            return True
        if self.runner.intake.write_behind(job_id) is None:
            return True
        self.runner.drop_ahead(job_id)
        self.queued.pop(job_id, None)
        return False

    def _start_queued(self) -> None:
        for retry in self.runner.take_requeued():
            self.queued[retry.id] = retry
        full = self._sweep_markers()
        if not self.queued:
            self.paused = self.held = frozenset()
            return
        if not full and self.runner.busy >= self.config.max_parallel:
            return  # no slot to fill; failures wait for the next sweep
        began = self.clock.monotonic()
        window = self.queued_window(full)
        mine = self.runner.active()
        pause = read_pause(
            self.layout,
            (r.group for r in window),
            (r.session for r in window),  # on_error = pause
        )
        known = self._known_jobs()
        elsewhere = self.scale.elsewhere(window, mine)  # slots other watchers hold

        def decide(holds: Holds) -> Decision:
            return schedule(
                queued=window,
                running=mine,
                limits=self.limits,
                pause=pause,
                known=known,
                now=self.clock.now(),
                dependency_timeout=self.config.dependency_timeout,
                elsewhere=elsewhere,
                budgets=holds,  # the root's spend ledger, every watcher's jobs
            )

        holds = self.budgets.holds()
        decision = decide(holds)
        if self.budgets.covers_any(self.queued.get(i) for i in decision.start):
            # An agent job under a budget is about to start: the ledger looked at now,
            # not up to CHECK_INTERVAL ago (another watcher's job may just have spent it).
            fresh = self.budgets.holds(fresh=True)
            if fresh != holds:
                decision = decide(fresh)
        self.paused = decision.paused
        if decision.held or decision.fail:
            self._write_claims()  # their records are revised below: written first
        self._mark_held(window, decision.held, set(decision.start), full)
        if full:  # the verdicts over the whole queue: at most a tenth of the loop too
            end = self.clock.monotonic()
            self._next_queue_sweep = max(self._next_queue_sweep, end + SWEEP_REST * (end - began))
        for failure in decision.fail:
            record = self.queued.get(failure.job_id)
            if record is None or not self.mine(failure.job_id, record):
                continue
            del self.queued[failure.job_id]
            self.runner.drop_ahead(failure.job_id)
            self.guard.step(
                f"reject:{failure.job_id}",
                lambda f=failure, r=record: self._reject(f.job_id, r, f.reason, f.detail),  # type: ignore[misc]
            )
        for n, job_id in enumerate(decision.start):
            if n % 16 == 15:
                self.keepalive()
            record = self.queued.get(job_id)
            if record is None or not self.mine(job_id, record):
                continue  # taken over while we were stopped: never start it twice
            del self.queued[job_id]
            if not self.runner.start(record):
                self.queued[job_id] = record  # another watcher took the slot first

    def start_ahead(self) -> None:
        """With every slot busy, begin the next jobs' starts ahead (pending_starts.py).

        Called at the end of a turn, after the turn's starts were released: at
        one slot the next job's supervisor is then forked while the job before
        it runs, and when that one ends only the ``running`` commit and the
        release are left. The next jobs are the first plain ones in start order
        (no session or ``after``, nothing paused or held), as many as
        :func:`~hopper.pending_starts.aheads` allows (one per slot, at most
        three); when the queue holds jobs the scheduler orders otherwise, none
        is begun. A start ahead whose job left the queue or changed is withdrawn
        here, before another is begun.
        """
        self.runner.keep_ahead(self.queued)
        if not self.queued or self.runner.busy < self.config.max_parallel:
            return  # nothing to run next, or a slot is free: the next turn starts it
        if self.queued.special():
            return
        for record in self.queued.first(aheads(self.config.max_parallel)):
            if record.id not in self.paused and record.id not in self.held:
                self.runner.start_ahead(record)

    def _tell_budgets(self) -> None:
        """A budget this watcher saw reached first: its event and hooks (budgetnews.py)."""
        hooks = self.runner.endings.hooks
        while self.budgets.news:
            budget = self.budgets.news.pop()
            self.guard.step(
                f"budget-news:{budget.rule.scope}",
                lambda b=budget: announce(  # type: ignore[misc]
                    self.layout, b, self.budgets.zone, self.config.hooks, hooks, self.clock.now()
                ),
            )

    def budget_turn(self) -> None:
        """Each turn, with budgets set: a budget newly reached is told (once, across the
        watchers), and with ``on_budget = "stop"`` this watcher's running agent jobs of a
        scope whose budget is reached are stopped (reason ``budget_exceeded``; a
        ``budget_stop`` event says which)."""
        if not self.budgets.rules:
            return
        self.budgets.holds()  # looks at the ledger at most every CHECK_INTERVAL
        self._tell_budgets()
        if self.budgets.budgets.on_budget != "stop":
            return
        jobs = {j.record.id: j for j in self.runner.running_jobs() if not j.stop_sent}
        for record, why in self.budgets.over([j.record for j in jobs.values()]):
            job = jobs[record.id]
            ledger.note(job.run_dir, "budget_stop", self.clock.now(), why=why)
            log.warning("job=%s stopped (on_budget = stop): %s", record.id, why)
            self.runner.request_stop(job, Reason.BUDGET_EXCEEDED)

    def _mark_held(
        self, window: list[JobRecord], held: dict[str, str], starting: set[str], full: bool
    ) -> None:
        """Write why each queued job a budget holds waits into its job.json (``waiting``,
        read by status, the index and the web; events budget_held / budget_released),
        and clear it from those no longer held.

        Written only when it changes, and not fsynced: after a crash the next turn
        says it again. A job about to start has it cleared by its ``started`` record.
        """
        now = self.clock.now()
        for record in window:
            why = held.get(record.id)
            if record.waiting == why or (why is None and record.id in starting):
                continue
            if record.id not in self.queued or not self.mine(record.id, record):
                continue
            run_dir = self.layout.run_dir(record.id)
            self.guard.step(
                f"held:{record.id}",
                lambda r=record, d=run_dir, w=why: self._hold(r, d, w, now),  # type: ignore[misc]
            )
        ids = frozenset(held)
        self.held = ids if full else (self.held - {r.id for r in window}) | ids

    def _hold(self, record: JobRecord, run_dir: Path, why: str | None, now: datetime) -> None:
        step = lifecycle.held(record, Held(now, why))
        self.queued[record.id] = ledger.commit(run_dir, step, durable=False)
        if why is None:
            log.info("job=%s released: no budget holds it now", record.id)
        else:
            log.info("job=%s held: %s", record.id, why)

    def _sweep_markers(self) -> bool:
        """ABORT and PRIORITY markers of queued jobs; True when a pass has just ended.

        A pass looks at every queued job (and then the dependency verdicts are
        taken over the whole queue): once a second, not on every turn (a
        backlog of 100,000 would make each start O(n)). A pass spends at most
        SWEEP_BUDGET per turn and then rests SWEEP_REST times as long, so over
        a large queue it is spread over turns, takes at most a tenth of the
        loop's time, and claims and starts go on between its slices. A run
        directory with nothing made in it since it was found quiet costs one
        ``lstat`` (store/quiet_dirs.py).
        """
        mono = self.clock.monotonic()
        if mono < self._next_slice:
            return False
        if not self._sweep:
            if mono < self._next_queue_sweep:
                return False
            self._next_queue_sweep = mono + QUEUE_SWEEP_INTERVAL
            self._sweep = sorted(self.queued, reverse=True)  # taken from the end: claim order
            self._quiet.keep(self.queued)
        deadline = mono + SWEEP_BUDGET
        n = 0
        while self._sweep:
            n += 1
            if n % claims.CLAIM_BATCH == 0:
                self.keepalive()
                if self.clock.monotonic() >= deadline:
                    break
            job_id = self._sweep.pop()
            queued = self.queued.get(job_id)  # started, ended, or a keepalive dropped it
            if queued is None:
                continue
            quiet, mtime = self._quiet.look(job_id)  # one lstat: no marker made since
            if quiet:
                continue
            run_dir = self.layout.run_dir(job_id)
            if mtime is None and run_dir_gone(run_dir):  # deleted by a job: filed lost now
                self.runner.drop_ahead(job_id)
                del self.queued[job_id]
                self.runner.intake.unwritten.pop(job_id, None)  # nowhere to write it
                self.guard.step(
                    f"vanished:{job_id}",
                    lambda q=queued: self.runner.file_vanished(q, QUEUED_VANISHED, leased=False),  # type: ignore[misc]
                )
                continue
            if (run_dir / ABORT_FILE).exists():
                if self.mine(job_id, queued) and self._written(job_id):
                    self.runner.drop_ahead(job_id)
                    self.runner.abort_queued(self.queued.pop(job_id))
                continue
            if not self.mine(job_id, queued):  # taken over (dropped): quiet means ours too
                continue
            self.guard.step(
                f"priority:{job_id}",
                lambda job_id=job_id, run_dir=run_dir: self._apply_priority(  # type: ignore[misc]
                    job_id, run_dir
                ),
            )
            self._quiet.looked(job_id, mtime)
        end = self.clock.monotonic()
        self._next_slice = end + SWEEP_REST * (end - mono)
        return not self._sweep

    def drop_taken(self) -> None:
        """Drop every queued job another watcher took over. A run directory found quiet
        by the sweep (no takeover marker then, nothing made in it since) costs one lstat."""
        for job_id, record in list(self.queued.items()):
            if not self._quiet.look(job_id)[0]:
                self.mine(job_id, record)

    def _reject(self, job_id: str, record: JobRecord, reason: Reason, detail: str) -> None:
        self.runner.reject(record, reason, detail)

    def queued_window(self, full: bool) -> list[JobRecord]:
        """The queued jobs the scheduler needs to see this turn.

        A full sweep sees all of them. Otherwise: every job with a session or
        dependencies (their order and verdicts depend on the rest), plus the
        first few other jobs in start order — enough to fill every slot several
        times over — taken from the order core/queued.py keeps, so a start costs
        O(log n), not a pass over the queue.
        A job the window leaves out (its group paused or at its limit) is seen
        at the end of the next pass of the sweep, within QUEUE_SWEEP_INTERVAL
        while the queue is small enough to sweep in one turn.
        """
        if full or len(self.queued) <= WINDOW_MIN:
            return list(self.queued.values())
        size = max(WINDOW_MIN, 4 * self.config.max_parallel)
        return self.queued.special() + self.queued.first(size)

    def _apply_priority(self, job_id: str, run_dir: Path) -> None:
        """``hopper priority`` left a request: the owner writes it into job.json."""
        request = take_priority_request(run_dir)
        if request is None or not self._written(job_id):
            return
        record = self.queued[job_id]
        now = self.clock.now()
        if isinstance(request, str):
            ledger.note(run_dir, "priority_rejected", now, detail=request)
            log.warning("job=%s priority request ignored: %s", job_id, request)
            return
        updated = ledger.commit(
            run_dir, lifecycle.priority_changed(record, PriorityChange(now, request))
        )
        self.queued[job_id] = updated
        log.info("job=%s priority=%d->%d", job_id, record.priority, request)

    def _known_jobs(self) -> list[KnownJob]:
        """(id, name, state) of every job, only when some queued job has ``after``."""
        if not self.queued.has_after():  # O(jobs with `after`), not a pass over the queue
            return []
        mine = {
            **{i: KnownJob(i, r.name, r.state) for i, r in self.queued.items()},
            **{
                j.record.id: KnownJob(j.record.id, j.record.name, j.record.state)
                for j in self.runner.running_jobs()
            },
        }
        others = [k for k in self.known.refresh(skip=mine) if k.id not in mine]
        return [*mine.values(), *others]
