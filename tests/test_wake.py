"""The loop's wake-up pipe (wake.py): :meth:`Waker.pending` looks without draining."""

from __future__ import annotations

import socket

from hopper.wake import Waker


def test_pending_says_whether_wait_would_return_at_once_and_drains_nothing() -> None:
    waker = Waker()
    try:
        assert not waker.pending()
        waker.wake()
        assert waker.pending() and waker.pending(), "looking drains nothing"
        waker.wait(0)  # the loop's sleep drains the pipe
        assert not waker.pending()
    finally:
        waker.close()


def test_pending_counts_a_readable_descriptor_beside_the_pipe() -> None:
    waker = Waker()
    ready, writer = socket.socketpair()
    try:
        assert not waker.pending([ready])
        writer.send(b"x")
        assert waker.pending([ready])
        assert ready.recv(1) == b"x", "left for its reader"
    finally:
        ready.close()
        writer.close()
        waker.close()


def test_a_descriptor_gone_bad_counts_as_pending() -> None:
    """The loop's own wait sorts it out (each start fails on its own), not a claim batch."""
    waker = Waker()
    gone, other = socket.socketpair()
    other.close()
    gone.close()  # fileno() is -1 now: select refuses it
    try:
        assert waker.pending([gone])
    finally:
        waker.close()
