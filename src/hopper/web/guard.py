"""Connections that never finish a request: a header timeout and a connection cap.

uvicorn's h11 protocol keeps a connection that sent half a request line for
as long as the client likes (its keep-alive timeout applies only between
requests, and any byte cancels it). A thousand such connections use up the
process's file descriptors; then ``accept`` fails with ``EMFILE`` and nobody,
the operator included, is answered until they go. :class:`GuardedH11` adds:

* a header timeout: a connection that has not finished a request's line and
  headers ``header_timeout`` seconds after it opened, or after its last
  response, is closed;
* a cap below the descriptor limit (``RLIMIT_NOFILE`` minus a reserve for
  files, inotify, the index): a new connection over the cap closes the
  connection that has waited longest for its request headers, so a
  legitimate request is answered at once while such connections are held
  (when every connection is busy with a real request, the newcomer is
  closed instead).

Connections serving a request (a live log stream, say) are never touched.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds to send a request line and headers
RESERVE_FDS = 128  # descriptors kept for everything but connections
MIN_CAP = 16


def connection_cap(soft_nofile: int | None = None) -> int:
    """How many connections fit under the descriptor limit, with the reserve left over."""
    if soft_nofile is None:
        soft_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_nofile == resource.RLIM_INFINITY:
        soft_nofile = 1 << 20
    return max(MIN_CAP, soft_nofile - RESERVE_FDS)


def guarded_protocol(
    cap: int | None = None, header_timeout: float = HEADER_TIMEOUT
) -> type[GuardedH11]:
    """uvicorn's ``http=`` class with this server's cap and timeout."""
    attrs = {"cap": connection_cap() if cap is None else cap, "header_timeout": header_timeout}
    return type("GuardedH11", (GuardedH11,), attrs)


class GuardedH11(H11Protocol):
    cap = 1 << 20
    header_timeout = HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting_since = 0.0
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_waiting()
        if len(self.connections) > self.cap:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._start_waiting()  # the next request's headers are due in time too

    @property
    def waiting_for_headers(self) -> bool:
        """No request under way: nothing sent yet, or half a request line."""
        busy = self.cycle is not None and not self.cycle.response_complete
        return self.conn.their_state is h11.IDLE and not busy

    def _start_waiting(self) -> None:
        self.waiting_since = self.loop.time()
        if self.header_timer is not None:
            self.header_timer.cancel()
        self.header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)

    def _header_timed_out(self) -> None:
        self.header_timer = None
        if self.waiting_for_headers and not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> None:
        open_ = [c for c in self.connections if not c.transport.is_closing()]
        excess = len(open_) - self.cap
        idle = sorted(
            (c for c in open_ if isinstance(c, GuardedH11) and c.waiting_for_headers),
            key=lambda c: c.waiting_since,
        )
        for victim in idle[:excess]:
            victim.transport.close()
        if excess > len(idle) and not self.transport.is_closing():
            self.transport.close()  # every other connection is serving a request
