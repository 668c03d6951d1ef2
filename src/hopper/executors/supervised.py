"""Jobs under their own supervisor process on this host: the part local and
container executors share, by composition (neither is built on the other).

Start: a warm supervisor from the pool is handed the launch spec, writes
nothing until the watcher has recorded the job ``running`` with its pid, then
opens the gate (:mod:`hopper.proc.spawn`). Poll: cheap by design, as it runs
every tick for every job: a supervisor that is our child is looked at only
after a SIGCHLD (``Tick.children``) or on a sweep, and then only if the fork
server reported it gone (its reports are read once per poll, not once per
job) or the fork server itself was lost; an adopted one (not our child) is
checked on each sweep through its pidfd, all of them in one ``poll``
(:mod:`hopper.executors.adopted`; by exit.json and its pid + start time
where no pidfd can be had). An exit comes back as :class:`Ended` (``exited``
with the supervisor's exit record, or ``lost`` when it vanished without one,
after ending any orphans), as the supervisor's record says: an executor that
knows more about an end (the container engine) refines the value it gets.

What a supervised job's executor keeps for it lives in ``Running.held``
(:class:`Held`); the shell never reads it.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from hopper.core import lifecycle
from hopper.core.lifecycle import Started, Step
from hopper.core.outcome import classify
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import Reason
from hopper.errors import JobFileCorrupt
from hopper.executors.adopted import AdoptedWatch
from hopper.executors.protocol import Context, Ended, How, Launch, Polled, Starting, Tick
from hopper.faults import crash_point
from hopper.prepare import in_scratch
from hopper.proc import identity, spawn, treekill
from hopper.proc.forkclient import Forked
from hopper.running import Running, adopt
from hopper.store import ledger
from hopper.store.jobfile import EXIT_FILE, LOG_FILE, read_exit

log = logging.getLogger(__name__)

# The files of an attempt a retry keeps under numbered names (besides job.log).
ATTEMPT_FILES = (EXIT_FILE,)


@dataclass
class Held:
    """What a supervised job's executor keeps for it (``Running.held``)."""

    supervisor: spawn.Handle | None = None  # None when adopted after a restart
    bad_exit: str | None = None  # why an exit.json found while it ran was not trusted


def held(job: Running) -> Held:
    """The job's :class:`Held`, made on first use (an adopted job starts with none)."""
    if not isinstance(job.held, Held):
        job.held = Held()
    assert isinstance(job.held, Held)
    return job.held


def _reap_adopted(pid: int | None) -> None:
    """Reap an adopted supervisor if it is our child (after a SIGHUP re-exec it is).

    Only that pid: a blanket waitpid(-1) would steal statuses from Popen objects.
    A zombie keeps its pid, so this cannot hit an unrelated process.
    """
    if pid is None:
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not ours (adopted after a crash): init reaps it


def _stop_that_acted(stop: Reason | None, status: ExitStatus) -> Reason | None:
    """The stop hopper asked for, unless the supervisor's exit record shows it came
    too late: an abort or a shutdown asked for once the job had ended (no stop
    signal was sent) did not end it, and the record says how it did."""
    late = status.started and not status.stop_signal_sent
    return None if late and stop in (Reason.ABORTED, Reason.SHUTDOWN) else stop


def _unreported(sup: spawn.Handle | None, generation: int) -> bool:
    """A supervisor forked by the live fork server, which has not reported its exit
    (nor that its exit.json is written: ``done``)."""
    return (
        isinstance(sup, Forked)
        and sup.returncode is None
        and not sup.done
        and sup.generation == generation
    )


@dataclass(frozen=True)
class Command:
    """What a supervisor runs for a job."""

    argv: list[str]
    env: dict[str, str]
    grace: float  # the supervisor's wait between its stop signals
    memory_max: int | None  # bytes the supervisor lets the job's tree use
    # The agent's files (run-dir name -> text, a bash job's script.sh): the supervisor
    # writes them at the release, before the job's exec, so the watcher makes no file
    # for them.
    files: dict[str, str]


class SupervisedStart(Starting):
    """A supervised start on its way: the supervisor is asked for; its report comes
    on the channel the shell selects on."""

    def __init__(
        self,
        sup: Supervised,
        launch: Launch,
        pending: spawn.Pending,
        fields: Mapping[str, object],
    ) -> None:
        super().__init__(launch.record, launch.run_dir, pending.deadline)
        self.sup, self.launch, self.pending, self.fields = sup, launch, pending, fields
        self.proc: spawn.Supervisor | None = None

    def fileno(self) -> int:
        return self.pending.fileno()

    def report(self) -> Step | Ended:
        """Raises :class:`spawn.SpawnFailed`: the shell's start policy
        (pending_starts.py) decides whether the job's start is tried again."""
        self.proc, pid = self.pending.collect()
        return self.sup.reported(self, self.proc, pid)

    def release(self, record: JobRecord) -> Running:
        assert self.proc is not None
        spawn.release(self.proc)
        log.info("job=%s state=queued->running pid=%s", record.id, record.pid)
        ctx = self.sup.ctx
        next_beat = ctx.clock.monotonic() + ctx.config.heartbeat_interval
        return Running(record, self.run_dir, next_beat, held=Held(self.proc))

    def abandon(self) -> None:
        if self.proc is None:
            self.pending.abandon()
            return
        spawn.refuse(self.proc)  # it ends the gated job and records started=false
        self.sup.forget_handle(self.proc)

    def withdraw(self) -> None:
        self.pending.withdraw()


class Supervised:
    """Supervisors from the fork server, their jobs watched and ended.

    ``engine_exit``: when a supervisor vanished without a record, how the job's
    own process ended if something else knows (the container engine), noted as
    ``engine_event``; asked in the middle of ending the job's orphans, so it is
    the one thing an executor hands in rather than refines afterwards.
    """

    def __init__(
        self,
        ctx: Context,
        engine_event: str = "exit_from_engine",
        engine_exit: Callable[[JobRecord], ExitStatus | None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.pool = ctx.fork_server  # shared, started and closed once whoever asks
        self.engine_event, self.engine_exit = engine_event, engine_exit
        self._reap: list[spawn.Handle] = []
        self.adopted = AdoptedWatch()  # pidfds of the supervisors adopted after a restart

    def open(self) -> None:
        self.pool.start()

    def close(self) -> None:
        self.pool.close()
        self.adopted.close()

    # -- start ----------------------------------------------------------------------
    def begin(
        self, launch: Launch, command: Command, fields: Mapping[str, object] | None = None
    ) -> SupervisedStart:
        """Ask for the job's supervisor (``fields``: more to say in its ``started``
        event). A start ahead is begun too: it records nothing until released."""
        config, record, run_dir, prep = self.ctx.config, launch.record, launch.run_dir, launch.prep
        spec = spawn.LaunchSpec(
            argv=command.argv,
            cwd=str(launch.workdir),
            env=command.env,
            log=str(run_dir / LOG_FILE),
            stop_signals=prep.stop_signals,
            grace=command.grace,
            timeout=record.timeout_seconds,
            memory_max=command.memory_max,
            output_max=record.output_max_bytes,
            sample_interval=config.sample_interval,
            idle_timeout=prep.idle_timeout,
            # A start ahead with no bound on its wait is forked; one the shell withdraws
            # within lease-break-time is spawned, as a start is (proc/gate.py).
            long_gate=launch.ahead and launch.held_for is None,
            files=command.files,  # written by the supervisor at the release (prepare.py)
            make_cwd=in_scratch(launch.workdir, run_dir),  # work/: made by the supervisor too
        )
        # SpawnFailed is the shell's to judge (pending_starts.py: tried again or failed)
        pending = spawn.begin(run_dir, spec, self.pool)
        return SupervisedStart(self, launch, pending, fields or {})

    def reported(self, start: SupervisedStart, proc: spawn.Supervisor, pid: int) -> Step:
        """The ``running`` step of a job whose supervisor reported its pid."""
        crash_point("start.after_spawn")
        launch = start.launch
        fact = Started(
            at=self.ctx.clock.now(),
            owner=self.ctx.owner,
            workdir=str(launch.workdir),
            argv0=launch.prep.argv[0],
            pid=pid,
            pid_start_time=identity.start_time(pid),
            supervisor_pid=proc.pid,
            supervisor_start_time=identity.start_time(proc.pid),
            host=self.ctx.host,  # a retry taken over from a dead host runs here
        )
        step = lifecycle.started(launch.record, fact)
        if start.fields:
            (event,) = step.events
            step = replace(step, events=(replace(event, fields={**event.fields, **start.fields}),))
        return step

    # -- monitor --------------------------------------------------------------------
    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        polled = Polled()
        if not (tick.children or tick.sweep):
            return polled  # no supervisor of ours exited and no sweep is due: nothing to look at
        self.pool.collect()  # the fork server's exit reports, applied to their handles
        generation = self.pool.generation
        # Not those whose fork server is alive and has not reported them gone.
        look = [job for job in jobs if not _unreported(held(job).supervisor, generation)]
        ended = self._adopted_ended(jobs, look) if tick.sweep else set[str]()
        for job in look:
            if (
                held(job).supervisor is None
                and job.record.id not in ended
                and self.adopted.watching(job.record.id)
            ):
                continue  # its pidfd says its supervisor lives: nothing to read
            found: list[Ended] = []
            if self.ctx.guard.step(
                f"poll:{job.record.id}",
                lambda job=job, found=found: self._poll_one(job, tick, found, ended),  # type: ignore[misc]
                what=f"job={job.record.id} cannot be polled or finished",
            ):
                polled.ended.extend(found)
            else:
                polled.failed.append(job)
        self._reap = [p for p in self._reap if p.poll() is None]
        return polled

    def _adopted_ended(self, jobs: Sequence[Running], look: Sequence[Running]) -> set[str]:
        """The adopted jobs whose supervisor exited, from their pidfds (one poll);
        each adopted job of this host (in ``look``: no live fork server's) is
        watched from its first sweep here."""
        if self.adopted:
            self.adopted.keep_only({job.record.id for job in jobs})
        for job in look:
            rec = job.record
            if (
                held(job).supervisor is None
                and rec.host == self.ctx.host
                and not self.adopted.watching(rec.id)
            ):
                self.adopted.watch(rec.id, rec.supervisor_pid, rec.supervisor_start_time)
        return self.adopted.ended()

    def _poll_one(self, job: Running, tick: Tick, found: list[Ended], ended: set[str]) -> None:
        # A supervisor that is our child writes exit.json and then exits, so
        # its exit (SIGCHLD, Popen.poll) is the cheap signal to look; so is an
        # adopted one's, through its pidfd (it writes exit.json, then exits).
        supervisor = held(job).supervisor
        if supervisor is None and self.adopted.watching(job.record.id):
            if tick.sweep and job.record.id in ended:
                status = self._own_exit(job)
                found.append(self.exited(job, status) if status is not None else self.lost(job))
            return
        # An adopted one without a pidfd needs exit.json read, on each sweep.
        if supervisor is None and tick.sweep:
            status = self._own_exit(job)
            if status is not None:
                found.append(self.exited(job, status))
                return
        look = tick.children if supervisor is not None else tick.sweep
        if look and self._supervisor_gone(job):
            status = self._own_exit(job)  # it may have written just before exiting
            found.append(self.exited(job, status) if status is not None else self.lost(job))

    def _own_exit(self, job: Running) -> ExitStatus | None:
        """exit.json if this job's own supervisor wrote it (not a stale one from a crash)."""
        try:
            status = read_exit(job.run_dir)
        except JobFileCorrupt as exc:
            # Not the supervisor's (it writes a valid one, by rename, when the
            # job ends): the job wrote it. Ignore it; if the supervisor then
            # dies without replacing it, lost() says why.
            mine = held(job)
            if mine.bad_exit is None:
                log.warning("job=%s ignoring %s", job.record.id, exc.render())
            mine.bad_exit = exc.message
            return None
        if status is None:
            return None
        mine_pid = job.record.supervisor_pid
        if (
            status.supervisor_pid is not None
            and mine_pid is not None
            and status.supervisor_pid != mine_pid
        ):
            return None
        return status

    def _supervisor_gone(self, job: Running) -> bool:
        supervisor = held(job).supervisor
        if supervisor is not None:
            # done: its exit.json is durable and it is exiting (forkclient.py)
            done = isinstance(supervisor, Forked) and supervisor.done
            return done or supervisor.poll() is not None
        rec = job.record
        return not identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time)

    # -- end ------------------------------------------------------------------------
    def _handed_over(self, job: Running) -> Ended | None:
        """Checked before anything is written: another watcher may own the job now."""
        holder = self.ctx.holder(job)
        if holder is None:
            return None
        self.forget(job)
        return Ended(job.record, job.run_dir, How.HANDED_OVER, detail=holder)

    def exited(self, job: Running, status: ExitStatus, recorded: bool = True) -> Ended:
        """``status`` from the supervisor's exit record (``recorded``), or learned
        from the engine after the supervisor vanished."""
        self.adopted.drop(job.record.id)
        taken = self._handed_over(job)
        if taken is not None:
            return taken
        supervisor = held(job).supervisor
        filed = None
        if isinstance(supervisor, Forked) and supervisor.done:
            # It waits to serve another job; the fork server gives it one only once
            # this end is filed: from then on nothing signals it for this job.
            filed = partial(self.pool.free, supervisor)
        elif supervisor is not None:
            self._reap.append(supervisor)
        elif job.record.host == self.ctx.host:  # never a pid of another host
            _reap_adopted(job.record.supervisor_pid)
        stop = job.record.stop_requested
        if recorded:  # exit.json wins over a stop asked for after the job ended
            stop = _stop_that_acted(stop, status)
        outcome = classify(status, stop)
        ledger.note(
            job.run_dir,
            "exited",
            self.ctx.clock.now(),
            exit_code=status.exit_code,
            signal=status.signal,
            timed_out=status.timed_out,
            leftovers_killed=status.leftovers_killed,
            limit=status.limit,
            resources=status.resources.model_dump() if status.resources else None,
        )
        return Ended(
            job.record,
            job.run_dir,
            How.EXITED,
            outcome.reason,
            outcome.detail,
            status,
            files=ATTEMPT_FILES,
            filed=filed,
        )

    def lost(self, job: Running) -> Ended:
        """The supervisor is gone and recorded nothing: end any orphans; lost."""
        self.adopted.drop(job.record.id)
        taken = self._handed_over(job)
        if taken is not None:
            return taken
        rec = job.record
        killed = 0
        local = rec.host == self.ctx.host  # a dead host's pids are not ours to judge
        known = self.engine_exit(rec) if local and self.engine_exit is not None else None
        if local:
            # Everything carrying the job's token, and the job's own tree if its
            # pid is still the job: a setsid'd orphan under init included.
            alive = rec.pid is not None and identity.is_alive(rec.pid, rec.pid_start_time)
            roots = frozenset([rec.pid]) if alive and rec.pid else frozenset[int]()
            killed = treekill.end_job(rec.id, roots)
        now = self.ctx.clock.now()
        if known is not None:
            ledger.note(
                job.run_dir,
                self.engine_event,
                now,
                exit_code=known.exit_code,
                orphans_killed=killed,
            )
            return self.exited(job, known, recorded=False)
        ledger.note(job.run_dir, "lost", now, orphans_killed=killed)
        bad_exit = held(job).bad_exit
        detail = "the supervisor vanished without recording an exit status" + (
            f" (its exit.json was not trusted: {bad_exit})" if bad_exit else ""
        )
        return Ended(rec, job.run_dir, How.LOST, Reason.LOST, detail, files=ATTEMPT_FILES)

    def cancel(self, job: Running) -> None:
        """SIGTERM to the supervisor, which escalates to SIGKILL after the grace."""
        rec = job.record
        if identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time):
            assert rec.supervisor_pid is not None
            identity.send(rec.supervisor_pid, signal.SIGTERM)

    def forget(self, job: Running, *, end: bool = False) -> None:
        """Drop what we hold for the job; ``end``: its run directory is gone, so the
        supervisor, told to stop, ends the tree and exits without a record."""
        self.adopted.drop(job.record.id)
        supervisor = held(job).supervisor
        if isinstance(supervisor, Forked):
            self.pool.retire(supervisor)  # the job is not ours to file: no next job for it
        if supervisor is not None:
            self._reap.append(supervisor)
        rec = job.record
        if not end or rec.host != self.ctx.host:
            return
        if identity.is_alive(rec.supervisor_pid, rec.supervisor_start_time):
            assert rec.supervisor_pid is not None
            identity.send(rec.supervisor_pid, signal.SIGTERM)
        else:
            treekill.end_job(rec.id)

    def forget_handle(self, proc: spawn.Handle) -> None:
        """A supervisor never released: reaped once it has exited."""
        self._reap.append(proc)

    # -- after a restart ------------------------------------------------------------
    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return adopt(record, run_dir, self.ctx)

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended:
        """The end of a job recovery found finished: from its exit record, else lost."""
        assert snap.record is not None
        job = Running(snap.record, run_dir)
        if lost or snap.exit is None:
            return self.lost(job)
        return self.exited(job, snap.exit)
