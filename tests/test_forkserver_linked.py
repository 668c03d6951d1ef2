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


# -- `ended` before `done` (a job's exit.json in place, then durable) ---------------------
def test_ended_is_passed_on_before_done_and_changes_no_state(harness: Harness) -> None:
    """A reused supervisor's first word: its slot may be freed, but it is not freed
    (nor may be) until its ``done``."""
    harness.busy(101)
    harness.ends[101].send(b"ended")
    assert harness.server.link_ready(101)
    assert harness.reports() == [b"ended 101"]
    assert harness.states() == {101: "busy"}
    harness.server.free(101)  # too early: ignored
    assert harness.states() == {101: "busy"}
    harness.done(101)
    assert harness.reports() == [b"done 101"]
    assert harness.states() == {101: "unfreed"}


def test_ended_with_done_already_behind_it_is_passed_on_as_done_alone(harness: Harness) -> None:
    harness.busy(101)
    harness.ends[101].send(b"ended")
    harness.ends[101].send(b"done")
    assert harness.server.link_ready(101)
    assert harness.reports() == [b"done 101"]
    assert harness.states() == {101: "unfreed"}


def test_a_retiring_supervisors_ended_is_passed_on_and_it_goes_once_done(
    harness: Harness,
) -> None:
    harness.busy(101)
    harness.server.retire(101)
    harness.ends[101].send(b"ended")
    assert harness.server.link_ready(101)
    assert harness.states() == {101: "retiring"} and not harness.told_to_go(101)
    harness.done(101)
    assert harness.states() == {} and harness.told_to_go(101)
    assert harness.reports() == [b"ended 101", b"done 101"]


def test_a_supervisor_that_died_after_ended_is_forgotten(harness: Harness) -> None:
    harness.busy(101)
    harness.ends[101].send(b"ended")
    harness.ends[101].close()  # killed between its rename and its fsyncs
    assert harness.server.link_ready(101)
    assert harness.states() == {}  # its exit report (when reaped) tells the watcher


def test_a_per_request_supervisors_hints_are_passed_on_in_order(harness: Harness) -> None:
    """One forked for a request says ``ended`` and ``done`` on the server's done
    socket (Server.tell_ended, tell_done): passed on in that order; an ``ended``
    whose ``done`` is in the same read goes as ``done`` alone."""
    server = harness.server
    server.done_w.send(b"ended 201")
    assert server.done()
    assert harness.reports() == [b"ended 201"]
    server.done_w.send(b"201")
    assert server.done()
    assert harness.reports() == [b"done 201"]
    for hint in (b"ended 202", b"ended 203", b"202", b"junk", b"ended x"):
        server.done_w.send(hint)
    assert server.done()
    assert harness.reports() == [b"ended 203", b"done 202"]


def test_a_per_request_supervisors_own_hints_name_it(harness: Harness) -> None:
    server = harness.server
    server.tell_ended()
    server.tell_done()
    assert server.done()
    assert harness.reports() == [b"done %d" % os.getpid()]
    server.tell_ended()
    assert server.done()
    assert harness.reports() == [b"ended %d" % os.getpid()]


def _wakes(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    woken: list[int] = []
    monkeypatch.setattr(harness.server, "wake_watcher", lambda: woken.append(1))
    return woken


def test_a_done_the_watcher_waits_for_on_its_socket_comes_without_a_wake(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``quiet PID``: the watcher read the ``ended`` and selects on its socket for the
    ``done`` (no second turn of its loop for a SIGCHLD); once only."""
    woken = _wakes(harness, monkeypatch)
    harness.busy(101)
    harness.ends[101].send(b"ended")
    assert harness.server.link_ready(101) and woken == [1]
    harness.server.hush(101)
    harness.done(101)
    assert harness.reports() == [b"ended 101", b"done 101"] and woken == [1]
    harness.server.free(101)
    harness.server.linked[101].state = "busy"  # its next job (as a hand-over makes it)
    harness.done(101)
    assert woken == [1, 1], "the next job's done wakes the watcher as ever"


def test_a_quiet_for_a_supervisor_done_already_changes_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    woken = _wakes(harness, monkeypatch)
    harness.unfreed(101)
    harness.server.hush(101)  # came after its done (which woke the watcher)
    assert woken == [1] and not harness.server.linked[101].quiet


def test_a_per_request_supervisors_quiet_done_comes_without_a_wake(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    woken = _wakes(harness, monkeypatch)
    server = harness.server
    server.done_w.send(b"ended 201")
    assert server.done() and woken == [1]
    server.hush(201)
    server.done_w.send(b"201")
    assert server.done() and woken == [1]
    assert harness.reports() == [b"ended 201", b"done 201"]
    assert server.quiet == set()


def test_a_quiet_for_a_per_request_supervisor_not_between_ended_and_done_is_ignored(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One already reaped (its pid may come back for another supervisor): nothing kept."""
    woken = _wakes(harness, monkeypatch)
    harness.server.hush(301)
    assert harness.server.quiet == set()
    harness.server.done_w.send(b"301")
    assert harness.server.done() and woken == [1]
