"""The fork server's spare supervisor, its error paths in-process (proc/forkserver.py).

The spare's life with real processes (given to a start, replaced when dead,
gone with its server) is in tests/test_forkserver.py; here a ``Server`` is
driven without forking: a spare that cannot be forked (no descriptors, no
process), a spare found dead, and a hand-over that fails after the answer.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Iterator

import pytest

from hopper.proc import forkserver


@pytest.fixture
def server() -> Iterator[forkserver.Server]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv = forkserver.Server(theirs)
    yield srv
    for fd in (srv.wake_r, srv.wake_w):
        os.close(fd)
    if srv.spare is not None:
        srv.spare[1].close()
    ours.close()
    theirs.close()


def _refused(*args: object) -> int:
    raise OSError(errno.EAGAIN, "Resource temporarily unavailable")


def test_a_spare_that_cannot_be_forked_is_tried_again_after_a_second(
    server: forkserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fork", _refused)
    before = time.monotonic()
    server.refill()
    assert server.spare is None  # requests fork their own meanwhile
    assert server.refill_at is not None
    assert server.refill_at >= before + forkserver.REFILL_RETRY


def test_no_descriptor_for_a_spares_socket_is_tried_again_after_a_second(
    server: forkserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fds(*args: object) -> tuple[socket.socket, socket.socket]:
        raise OSError(errno.EMFILE, "Too many open files")

    forked: list[int] = []

    def fork() -> int:
        forked.append(1)
        return 0

    monkeypatch.setattr(socket, "socketpair", no_fds)
    monkeypatch.setattr(os, "fork", fork)
    before = time.monotonic()
    server.refill()
    assert (server.spare, forked) == (None, [])  # not forked without its socket
    assert server.refill_at is not None and server.refill_at >= before + forkserver.REFILL_RETRY


def test_taking_no_spare_keeps_a_retry_already_due_later(server: forkserver.Server) -> None:
    later = time.monotonic() + forkserver.REFILL_RETRY
    server.refill_at = later
    assert server.take_spare() is None
    assert server.refill_at == later  # a request does not bring a failing fork forward


def test_a_spare_found_dead_is_not_given_a_job(server: forkserver.Server) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()  # the spare's end: it died
    server.spare = (12345, ours)
    before = time.monotonic()
    assert server.take_spare() is None  # this request forks its supervisor itself
    assert server.spare is None and ours.fileno() == -1  # its socket closed
    assert server.refill_at is not None
    assert before <= server.refill_at <= time.monotonic() + forkserver.REFILL_QUIET


def test_a_live_spare_is_taken_and_the_next_one_is_due_once_quiet(
    server: forkserver.Server,
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.spare = (12345, ours)
    try:
        assert server.take_spare() == (12345, ours)
        assert server.spare is None
        assert server.refill_at is not None
        assert server.refill_at <= time.monotonic() + forkserver.REFILL_QUIET
    finally:
        ours.close()
        theirs.close()


def test_a_hand_over_that_fails_after_the_answer_closes_the_jobs_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spare died between the liveness look and the hand-over: the watcher,
    waiting on the channel for the pid line, sees EOF (its start fails) instead of
    waiting for a supervisor that will never write."""
    link, spare_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    spare_end.close()
    watcher_end, channel = socket.socketpair()
    try:
        forkserver.Server.hand_over((12345, link), channel.detach())
        assert link.fileno() == -1
        watcher_end.settimeout(5)
        assert watcher_end.recv(1) == b""  # EOF: no one else holds the channel
    finally:
        watcher_end.close()
        link.close()
