"""The fork server's record of the supervisors that serve job after job
(proc/forkserver.py: ``Server.linked``, pid -> ``Linked``), in-process.

Their lives with real processes (freed, reused, retired, capped) are in
tests/test_forkserver_reuse.py; here a ``Server`` is driven without forking, each
supervisor's link a socket pair whose far end stands for the supervisor: the caps
on free ones (``MAX_IDLE``, ``max_jobs``), which free one a request takes, and
what a retire or a death does to each state.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from hopper.proc import forkserver


class Harness:
    """A server and the far ends: the watcher's control socket and each link's."""

    def __init__(self, max_jobs: int = forkserver.MAX_JOBS) -> None:
        self.watcher, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server = forkserver.Server(theirs, max_jobs=max_jobs)
        self.server.watcher = 0  # never our parent: wake_watcher signals nobody
        self.ends: dict[int, socket.socket] = {}

    def busy(self, pid: int, jobs: int = 1) -> socket.socket:
        """A supervisor serving its job (as after a hand-over); its end of the link."""
        ours, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server.linked[pid] = forkserver.Linked(ours, "busy", jobs)
        self.ends[pid] = end
        return end

    def done(self, pid: int) -> None:
        """It says ``done`` on its link, and the server reads it."""
        self.ends[pid].send(b"done")
        assert self.server.link_ready(pid)

    def unfreed(self, pid: int, jobs: int = 1) -> None:
        self.busy(pid, jobs)
        self.done(pid)

    def told_to_go(self, pid: int) -> bool:
        """EOF on the supervisor's end of its link: what tells it to exit."""
        end = self.ends[pid]
        end.setblocking(False)
        try:
            return end.recv(16) == b""
        except BlockingIOError:
            return False

    def reports(self) -> list[bytes]:
        self.watcher.setblocking(False)
        found = []
        while True:
            try:
                found.append(self.watcher.recv(64))
            except BlockingIOError:
                return found

    def states(self) -> dict[int, str]:
        return {pid: sup.state for pid, sup in self.server.linked.items()}

    def close(self) -> None:
        for fd in (self.server.wake_r, self.server.wake_w):
            os.close(fd)
        for sup in self.server.linked.values():
            sup.link.close()
        for end in self.ends.values():
            end.close()
        self.server.done_r.close()
        self.server.done_w.close()
        self.server.ctrl.close()
        self.watcher.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def test_done_is_passed_on_and_the_supervisor_waits_unfreed(harness: Harness) -> None:
    harness.unfreed(101)
    assert harness.states() == {101: "unfreed"}
    assert harness.reports() == [b"done 101"]
    assert not harness.told_to_go(101)


def test_a_freed_supervisor_is_free_and_the_most_recently_freed_is_taken_first(
    harness: Harness,
) -> None:
    for pid in (101, 102, 103):
        harness.unfreed(pid)
    for pid in (102, 101, 103):
        harness.server.free(pid)
    assert harness.states() == {101: "free", 102: "free", 103: "free"}
    taken = harness.server.take_free()
    assert taken is not None and taken[0] == 103
    harness.server.linked[103].state = "busy"  # what a request's hand-over does
    taken = harness.server.take_free()
    assert taken is not None and taken[0] == 101


def test_a_free_one_found_dead_is_passed_over_and_forgotten(harness: Harness) -> None:
    harness.unfreed(101)
    harness.unfreed(102)
    harness.server.free(101)
    harness.server.free(102)
    harness.ends[102].close()  # it died waiting
    taken = harness.server.take_free()
    assert taken is not None and taken[0] == 101
    assert 102 not in harness.server.linked


def test_past_max_idle_free_ones_a_freed_supervisor_is_told_to_go(harness: Harness) -> None:
    pids = list(range(101, 102 + forkserver.MAX_IDLE))
    for pid in pids:
        harness.unfreed(pid)
    for pid in pids:
        harness.server.free(pid)
    last = pids[-1]
    assert [p for p, state in harness.states().items() if state == "free"] == pids[:-1]
    assert last not in harness.server.linked and harness.told_to_go(last)
    assert not any(harness.told_to_go(pid) for pid in pids[:-1])


def test_a_supervisor_that_served_max_jobs_is_told_to_go_when_freed() -> None:
    h = Harness(max_jobs=2)
    try:
        h.unfreed(101, jobs=1)
        h.unfreed(102, jobs=2)
        h.server.free(101)
        h.server.free(102)
        assert h.states() == {101: "free"}
        assert h.told_to_go(102) and not h.told_to_go(101)
    finally:
        h.close()


def test_a_free_for_a_supervisor_not_waiting_for_one_is_ignored(harness: Harness) -> None:
    harness.busy(101)
    harness.server.free(101)  # still busy: its job is not filed
    harness.server.free(999)  # not ours
    assert harness.states() == {101: "busy"}
    assert not harness.told_to_go(101)


def test_a_retired_unfreed_supervisor_is_told_to_go_at_once(harness: Harness) -> None:
    harness.unfreed(101)
    harness.server.retire(101)
    assert harness.states() == {} and harness.told_to_go(101)


def test_a_supervisor_retired_while_busy_goes_once_done_and_its_done_is_passed_on(
    harness: Harness,
) -> None:
    harness.busy(101)
    harness.server.retire(101)
    assert harness.states() == {101: "retiring"} and not harness.told_to_go(101)
    harness.done(101)
    assert harness.states() == {} and harness.told_to_go(101)
    assert harness.reports() == [b"done 101"]


def test_a_retire_for_a_free_supervisor_changes_nothing(harness: Harness) -> None:
    harness.unfreed(101)
    harness.server.free(101)
    harness.server.retire(101)  # its job is filed: nothing can name it for a job now
    assert harness.states() == {101: "free"}


@pytest.mark.parametrize("state", ["busy", "unfreed", "free"])
def test_a_linked_supervisor_that_died_is_forgotten_and_nothing_reported(
    harness: Harness, state: str
) -> None:
    harness.busy(101)
    if state != "busy":
        harness.done(101)
        harness.reports()
    if state == "free":
        harness.server.free(101)
    harness.ends[101].close()  # EOF on its link: it exited
    assert harness.server.link_ready(101)
    assert harness.states() == {} and harness.reports() == []
