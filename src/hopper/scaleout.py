"""Several watchers, several hosts, one root: heartbeats, global leases, host death.

The watcher's edge for docs/scale-out.md. Each turn it may:

- write this watcher's heartbeat file and read everyone's (every
  ``heartbeat_interval``; a handful of small files), and say when a host has
  newly died so the watcher reconciles at once; once a minute, remove the
  files of watchers dead for an hour whose jobs are no longer theirs
  (core/watcherview.py, ``stale``);
- count the leases other watchers hold in the scopes the queued jobs need
  (one small directory listing per scope; no walk over the runs) and hand
  them to the pure scheduler as :class:`~hopper.core.schedule.Elsewhere`;
- take a lease in every scope of a job before starting it, and give them
  back when it stops running.

The decisions stay pure: core/hosts.py (which hosts are dead),
core/schedule.py (what starts), core/recovery.py (what to do with a dead
host's job). store/leases.py, store/watchers.py and store/takeover.py are
the files.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from hopper.clock import Clock
from hopper.config import Config
from hopper.core.hosts import Beat, HostView
from hopper.core.owner import WatcherId, parse_owner
from hopper.core.record import JobRecord
from hopper.core.schedule import Elsewhere, SlotLimits
from hopper.core.states import JobState, is_terminal
from hopper.core.watcherview import keep_after
from hopper.errors import JobFileCorrupt
from hopper.proc import identity
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.leases import Lease, Scope, SlotLeases, scope_name
from hopper.store.watchers import beat_path, prune_beats, read_beats, remove_beat, write_beat

log = logging.getLogger(__name__)

ALL = "all"
SWEEP_INTERVAL = 1.0  # seconds between stale-lease sweeps of one full scope
PRUNE_INTERVAL = 60.0  # seconds between looks for stale heartbeat files of dead watchers


class ScaleOut:
    def __init__(
        self, layout: Layout, config: Config, ident: WatcherId, clock: Clock, limits: SlotLimits
    ) -> None:
        self.layout = layout
        self.config = config
        self.ident = ident
        self.clock = clock
        self.limits = limits
        self.dead_after = config.host_dead_after
        self.leases = SlotLeases(layout, ident.owner, ident.host)
        self.pid = os.getpid()
        owner = parse_owner(ident.owner)
        self.started = owner.start if owner else clock.time()
        self.beats: tuple[Beat, ...] = ()
        self._since = clock.monotonic()
        self._next_beat = 0.0
        self._next_prune = 0.0
        self.wrote = False  # did the last beat() write our file (False: not due yet)
        self._dead: set[str] = set()
        self._next_sweep: dict[str, float] = {}
        self.starting: set[str] = set()  # ids the runner is starting: queued, lease held
        # The leases this watcher took, by job: released by name, without reading
        # every lease of the scope (jobs adopted after a restart are not here).
        self._taken: dict[str, list[Path]] = {}

    # -- heartbeats -------------------------------------------------------------
    def start(self) -> None:
        """First beat, before anything is claimed; prune our host's dead watchers' files."""
        for beat in read_beats(self.layout, self.clock.time()):
            if beat.host != self.ident.host or beat.owner == self.ident.owner:
                continue
            owner = parse_owner(beat.owner)
            if owner is not None and not identity.is_alive(owner.pid, owner.start):
                remove_beat(self.layout, beat.host, beat.pid)  # we adopt what it left
        self._since = self.clock.monotonic()

    def beat(self, running: Collection[str], queued: int, *, force: bool = False) -> bool:
        """Write our heartbeat when due and read the others'; True if a host newly died."""
        mono = self.clock.monotonic()
        self.wrote = False
        if not force and mono < self._next_beat:
            return False
        self._next_beat = mono + self.config.heartbeat_interval
        self._write_beat(len(running), queued, jobs=running)
        self.wrote = True
        self.beats = tuple(read_beats(self.layout, self.clock.time()))
        dead = self.view().dead_hosts(self.ident.host)
        newly = dead - self._dead
        # known dead: those judged so now, and those whose files were pruned (no file,
        # no news); a host that beats again has a file and leaves the set
        self._dead = dead | (self._dead - {b.host for b in self.beats})
        if mono >= self._next_prune:  # after judging: a host is seen dead before its file goes
            self._next_prune = mono + PRUNE_INTERVAL
            self.prune_dead()
        if newly:
            log.warning(
                "host(s) %s: no watcher heartbeat for %gs; taking over their jobs",
                ", ".join(sorted(newly)),
                self.dead_after,
            )
        return bool(newly)

    def prune_dead(self) -> None:
        """Remove the heartbeat files of watchers dead for ``keep_after`` whose jobs are
        no longer theirs (a host retired, a watcher taken over): ``hopper watchers``
        would list them forever with their old counts."""
        older = keep_after(self.dead_after)
        for path, beat in prune_beats(
            self.layout, self.clock.time(), older, keep_owner=self.ident.owner
        ):
            log.info(
                "removed the heartbeat file %s of watcher %s pid %d: no beat for %.0fs, "
                "none of its jobs is still its own",
                path.name,
                beat.host,
                beat.pid,
                beat.age,
            )

    def view(self, *, fresh: bool = False) -> HostView:
        """The heartbeats as last read; ``fresh`` reads them again first (before judging)."""
        if fresh:
            self.beats = tuple(read_beats(self.layout, self.clock.time()))
        return HostView(self.beats, self.dead_after, self.clock.monotonic() - self._since)

    def close(self, running_left: int) -> None:
        """A clean exit: remove our heartbeat, or mark it stopped if jobs keep running;
        remove our lease spares (store/leases.py)."""
        self.leases.close()
        if running_left:
            self._write_beat(running_left, 0, stopped=True)
        else:
            remove_beat(self.layout, self.ident.host, self.pid)

    def _write_beat(
        self, running: int, queued: int, *, jobs: Collection[str] = (), stopped: bool = False
    ) -> None:
        write_beat(
            self.layout,
            host=self.ident.host,
            pid=self.pid,
            owner=self.ident.owner,
            started=self.started,
            running=running,
            queued=queued,
            jobs=jobs,
            stopped=stopped,
        )

    def my_beat(self) -> Path:
        return beat_path(self.layout, self.ident.host, self.pid)

    # -- leases -----------------------------------------------------------------
    def scopes(self, record: JobRecord) -> list[Scope]:
        out = [
            Scope(ALL, self.limits.max_parallel),
            Scope(scope_name("agent", record.agent), self.limits.for_agent(record.agent)),
        ]
        group_limit = self.limits.for_group(record.group)
        if record.group is not None and group_limit is not None:
            out.append(Scope(scope_name("group", record.group), group_limit))
        if record.session:
            out.append(Scope(scope_name("session", record.session), 1))
        return out

    def elsewhere(self, queued: Iterable[JobRecord], running: Iterable[JobRecord]) -> Elsewhere:
        """What other watchers hold in the scopes ``queued`` needs (their leases minus ours)."""
        mine = list(running)
        records = list(queued)
        agents = {r.agent for r in records}
        groups = {r.group for r in records if r.group is not None}
        sessions = {r.session for r in records if r.session}
        total = self._held(Scope(ALL, self.limits.max_parallel)) - len(mine)
        by_agent = Counter(r.agent for r in mine)
        by_group = Counter(r.group for r in mine)
        by_session = Counter(r.session for r in mine if r.session)
        other_agents = {
            a: n
            for a in agents
            if (
                n := self._held(Scope(scope_name("agent", a), self.limits.for_agent(a)))
                - by_agent[a]
            )
            > 0
        }
        other_groups: dict[str, int] = {}
        for g in groups:
            limit = self.limits.for_group(g)
            if limit is None:
                continue
            n = self._held(Scope(scope_name("group", g), limit)) - by_group[g]
            if n > 0:
                other_groups[g] = n
        busy = frozenset(
            s
            for s in sessions
            if self._held(Scope(scope_name("session", s), 1)) - by_session[s] > 0
        )
        return Elsewhere(max(0, total), other_agents, other_groups, busy)

    def _held(self, scope: Scope) -> int:
        """Leases in ``scope``; a full scope is swept for stale leases (at most once a second)."""
        held = self.leases.count(scope.name)
        if held >= scope.limit:
            mono = self.clock.monotonic()
            if mono >= self._next_sweep.get(scope.name, 0.0):
                self._next_sweep[scope.name] = mono + SWEEP_INTERVAL
                if self.leases.sweep(scope.name, self.clock.time(), self.valid):
                    held = self.leases.count(scope.name)
        return held

    def acquire(self, record: JobRecord) -> bool:
        """A lease in every scope of ``record``, or none (then it waits)."""
        taken = self.leases.acquire(record.id, self.scopes(record), self.clock.time(), self.valid)
        if taken is None:
            return False
        self._taken[record.id] = taken
        return True

    def released(self, before: Mapping[str, JobRecord], running: Collection[str]) -> None:
        """Give back the leases of the jobs in ``before`` that no longer run."""
        for job_id, record in before.items():
            if job_id not in running:
                self.release(record)

    def release(self, record: JobRecord) -> None:
        taken = self._taken.pop(record.id, None)
        if taken is not None:
            self.leases.release_taken(record.id, taken)
            return
        names = [s.name for s in self.scopes(record)]
        self.leases.release_job(record.id, names, self.clock.time())

    def valid(self, lease: Lease) -> bool:
        """Is ``lease`` still needed? Its job runs, or is being started by a live watcher."""
        if not lease.job_id:
            return lease.age < self.dead_after  # being written, or torn: give it time
        try:
            record = read_record(self.layout.run_dir(lease.job_id))
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return lease.age < self.dead_after
        except (OSError, JobFileCorrupt):
            return True  # cannot tell: keep it
        if is_terminal(record.state):
            return False
        if record.state is JobState.RUNNING:
            return True  # a dead host's job is finished by takeover; then the lease goes
        # Queued: a start in progress, ours (the runner says) or a live watcher's.
        if lease.owner == self.ident.owner:
            return lease.job_id in self.starting and lease.age < self.dead_after
        if lease.age >= self.dead_after:
            return False
        owner = parse_owner(lease.owner)
        if owner is None:
            return False
        if owner.host == self.ident.host:
            return identity.is_alive(owner.pid, owner.start)
        return self.view(fresh=True).owner_alive(lease.owner)  # a new watcher may not be known yet
