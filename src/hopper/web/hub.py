"""Live updates: one inotify thread, one index thread, fanned out to every client.

Theory of operation. One inotify descriptor (watchdog's ``InotifyFD``, read by
its one thread) watches ``<root>`` (for PAUSE), ``runs/`` (new run
directories) and the directory of every queued or running job (job.json
replaced, job.log and events.jsonl appended). The thread only records which
job's which file changed and asks the event loop to flush, at most every
``min_gap`` seconds, so a job writing thousands of lines a second costs a
few reads a second, however many browsers watch it. On the loop:

* a changed job.log / events.jsonl is pumped once (``feeds.Feed``) and the
  new text goes to each follower's queue;
* a changed job.json or a new run directory asks for one index refresh
  (``catalog.Catalog.changes``); the changed jobs' job.json texts go to every
  job-list client, and a job that became terminal ends its feeds.

Events are hints and the directories are the truth: every ``fallback``
seconds the hub refreshes and pumps anyway (a missed event, an inotify
overflow, a network file system, no inotify at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from hopper.core.states import TERMINAL_STATES
from hopper.sessionhost.contract import CAST_FILE
from hopper.store.jobfile import EVENTS_FILE, JOB_FILE, LOG_FILE
from hopper.store.layout import Layout
from hopper.store.markers import PAUSE_FILE
from hopper.web.catalog import Catalog, Changes, state_of
from hopper.web.feeds import Feed, Message, Subscriber

log = logging.getLogger(__name__)

FEED_FILES = {"log": LOG_FILE, "events": EVENTS_FILE, "cast": CAST_FILE}
_RESCAN = "\0rescan"  # a hint meaning: refresh everything
_ROOT = "\0root"  # the watch key of <root> itself (job ids never hold a NUL)


class Hub:
    def __init__(
        self, layout: Layout, catalog: Catalog, *, fallback: float = 10.0, min_gap: float = 0.05
    ) -> None:
        self.layout = layout
        self.catalog = catalog
        self.fallback = fallback
        self.min_gap = min_gap
        self.job_clients: set[Subscriber] = set()
        self.feeds: dict[tuple[str, str], Feed] = {}
        self.active: set[str] = set()
        self.young: set[str] = set()  # new run directories not yet in the index
        self.paused = False
        self.inotify_ok = False
        self._lock = threading.Lock()
        self._hints: dict[str | None, set[str]] = {}
        self._scheduled = False
        self._last_flush = 0.0
        self._want_refresh = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inotify: Any = None
        self._watches: dict[str | None, Any] = {}

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.paused = os.path.lexists(self.layout.root / PAUSE_FILE)
        self._start_inotify()
        self._apply(await self.catalog.call(self.catalog.changes), first=True)
        self._tasks = [
            asyncio.create_task(self._refresher(), name="hopper-web-refresh"),
            asyncio.create_task(self._fallback(), name="hopper-web-fallback"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.close_clients()
        if self._inotify is not None:
            self._inotify.stop()  # sets the thread's stop flag, then closes the descriptor
            self._inotify.join(timeout=5)

    def close_clients(self) -> None:
        """End every stream now (the server is stopping): browsers reconnect to the next one."""
        for sub in list(self.job_clients):
            sub.close()
        for feed in self.feeds.values():
            for sub in list(feed.subscribers):
                sub.close()

    def _start_inotify(self) -> None:
        try:
            from watchdog.observers.inotify_c import InotifyFD

            self._inotify = InotifyFD()
            self._inotify.daemon = True
            self._inotify.start()
            self.layout.runs.mkdir(parents=True, exist_ok=True)
            self._watch(None, self.layout.runs, _RUNS_MASK)
            self._watch(_ROOT, self.layout.root, _ROOT_MASK)
            self.inotify_ok = True
        except (ImportError, OSError) as exc:
            log.warning("no inotify (%s): the dashboard refreshes every %ss", exc, self.fallback)
            self.inotify_ok = False

    def _watch(self, key: str | None, path: Path, mask: int) -> None:
        if self._inotify is None or key in self._watches:
            return
        callback = _Callback(self, key)
        wd = self._inotify.add_callback(os.fsencode(path), mask, callback, id(callback))
        self._watches[key] = (wd, id(callback))

    def _unwatch(self, key: str | None) -> None:
        entry = self._watches.pop(key, None)
        if entry is not None and self._inotify is not None:
            self._inotify.remove_callbacks([entry])

    # -- the inotify thread -------------------------------------------------------

    def hint(self, key: str | None, name: str) -> None:
        """Called on the inotify thread: ``key``'s file ``name`` changed."""
        with self._lock:
            self._hints.setdefault(key, set()).add(name)
            if self._scheduled or self._loop is None:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._schedule_flush)

    # -- the event loop -------------------------------------------------------------

    def _schedule_flush(self) -> None:
        assert self._loop is not None
        delay = max(0.0, self._last_flush + self.min_gap - self._loop.time())
        self._loop.call_later(delay, self._flush)

    def _flush(self) -> None:
        assert self._loop is not None
        self._last_flush = self._loop.time()
        with self._lock:
            hints, self._hints, self._scheduled = self._hints, {}, False
        for key, names in hints.items():
            if key is None or _RESCAN in names:
                self._want_refresh.set()
                if _RESCAN in names:
                    self._pump_all()
                if key is None:  # new run directories: watch them before job.json appears
                    self.young.update(n for n in names if not n.startswith((".", "\0")))
                    self._sync_watches()
            elif key == _ROOT:
                if PAUSE_FILE in names:
                    self._pause_changed()
            else:
                if JOB_FILE in names:
                    self._want_refresh.set()
                for kind, file in FEED_FILES.items():
                    feed = self.feeds.get((key, kind))
                    if feed is not None and file in names:
                        self._pump(feed)

    def _pump(self, feed: Feed) -> None:
        feed.broadcast(feed.pump())
        if not feed.subscribers:  # every follower dropped (lagging) or gone: stop reading
            self._forget(feed)
        elif feed.more:  # more than one read's worth waiting: carry on next turn
            self.hint_local(feed)

    def _forget(self, feed: Feed) -> None:
        for key, f in list(self.feeds.items()):
            if f is feed:
                del self.feeds[key]
                self._sync_watches()

    def hint_local(self, feed: Feed) -> None:
        for (job_id, _), f in self.feeds.items():
            if f is feed:
                self.hint(job_id, feed.path.name)
                return

    def _pump_all(self) -> None:
        for feed in list(self.feeds.values()):
            self._pump(feed)

    def _pause_changed(self) -> None:
        paused = os.path.lexists(self.layout.root / PAUSE_FILE)
        if paused != self.paused:
            self.paused = paused
            self._broadcast(("pause", json.dumps({"paused": paused})))

    def _broadcast(self, message: Message) -> None:
        for sub in list(self.job_clients):
            sub.put(message)
            if sub.closed:
                self.job_clients.discard(sub)

    async def _refresher(self) -> None:
        while True:
            await self._want_refresh.wait()
            self._want_refresh.clear()
            try:
                self._apply(await self.catalog.call(self.catalog.changes))
            except Exception:  # a bad moment on disk must not end live updates
                log.exception("refreshing the job list failed; trying again at the next change")
            await asyncio.sleep(self.min_gap)

    async def _fallback(self) -> None:
        while True:
            await asyncio.sleep(self.fallback)
            self._want_refresh.set()
            self._pump_all()
            self._pause_changed()

    def _apply(self, changes: Changes, *, first: bool = False) -> None:
        if not first:
            for text in changes.changed.values():
                self._broadcast(("job", text.strip()))
            for job_id in changes.removed:
                self._broadcast(("removed", json.dumps(job_id)))
        for (job_id, kind), feed in list(self.feeds.items()):
            state = state_of(changes.changed.get(job_id, ""))
            if job_id in changes.removed or state in TERMINAL_STATES:
                self._end_feed(job_id, kind, feed, state.value if state else None)
        self.active = changes.active
        self.young = {
            j for j in self.young - changes.changed.keys() if self.layout.run_dir(j).is_dir()
        }
        self._sync_watches()

    def _sync_watches(self) -> None:
        """Watch the directory of every active or followed job, and no other."""
        wanted = self.active | self.young | {job_id for job_id, _ in self.feeds}
        for key in [k for k in self._watches if k is not None and k != _ROOT]:
            if key not in wanted:
                self._unwatch(key)
        for job_id in wanted:
            if job_id not in self._watches:
                try:
                    self._watch(job_id, self.layout.run_dir(job_id), _DIR_MASK)
                except OSError as exc:  # watch limit, or gone: the fallback covers it
                    log.debug("cannot watch %s: %s", job_id, exc)
                    self.young.discard(job_id)

    def _end_feed(self, job_id: str, kind: str, feed: Feed, state: str | None) -> None:
        for messages in feed.finish() if feed.subscribers else ():
            feed.broadcast(messages)  # a laggard is dropped as it goes, not at the end
        for sub in list(feed.subscribers):
            sub.close(("end", json.dumps({"state": state})))
        del self.feeds[(job_id, kind)]

    # -- subscriptions ----------------------------------------------------------------

    def subscribe_jobs(self) -> Subscriber:
        sub = Subscriber()
        self.job_clients.add(sub)
        return sub

    def unsubscribe_jobs(self, sub: Subscriber) -> None:
        self.job_clients.discard(sub)

    def follow(self, job_id: str, kind: str, state: str | None) -> tuple[Subscriber, list[Message]]:
        """A follower of ``job_id``'s log or events: its backlog now, live after it.

        ``state`` is the job's state as just read from job.json: a finished job
        gets its backlog and ``end`` at once.
        """
        run_dir = self.layout.run_dir(job_id)
        sub = Subscriber()
        feed = self.feeds.get((job_id, kind))
        if feed is None:
            feed = Feed(
                run_dir / FEED_FILES[kind],
                lines=kind != "log",
                event="cast" if kind == "cast" else "event",
            )
        else:
            self._pump(feed)
        backlog = feed.backlog()
        if state is not None and state in {s.value for s in TERMINAL_STATES}:
            for messages in feed.finish():
                backlog.extend(messages)
            sub.close(("end", json.dumps({"state": state})))
            return sub, backlog
        feed.subscribers.add(sub)
        self.feeds[(job_id, kind)] = feed
        self._sync_watches()
        return sub, backlog

    def unfollow(self, job_id: str, kind: str, sub: Subscriber) -> None:
        feed = self.feeds.get((job_id, kind))
        if feed is None:
            return
        feed.subscribers.discard(sub)
        if not feed.subscribers:
            del self.feeds[(job_id, kind)]
            self._sync_watches()


class _Callback:
    """watchdog's InotifyFD calls these on its thread."""

    def __init__(self, hub: Hub, key: str | None) -> None:
        self.hub = hub
        self.key = key

    def on_event(self, event: Any) -> None:
        self.hub.hint(self.key, os.fsdecode(event.name))

    def on_watch_deleted(self, wd: Any) -> None:
        self.hub.hint(None, _RESCAN)

    def on_queue_overflow(self) -> None:
        self.hub.hint(None, _RESCAN)


def _masks() -> tuple[int, int, int]:
    try:
        from watchdog.observers.inotify_c import InotifyConstants as C
    except ImportError:
        return 0, 0, 0
    only_dir = C.IN_ONLYDIR | C.IN_DONT_FOLLOW
    runs = C.IN_CREATE | C.IN_MOVED_TO | C.IN_DELETE | C.IN_MOVED_FROM | only_dir
    root = C.IN_CREATE | C.IN_DELETE | C.IN_MOVED_TO | C.IN_MOVED_FROM | only_dir
    run_dir = C.IN_MODIFY | C.IN_CLOSE_WRITE | C.IN_MOVED_TO | C.IN_CREATE | only_dir
    return runs, root, run_dir


_RUNS_MASK, _ROOT_MASK, _DIR_MASK = _masks()
