"""Slow and hostile clients against a real ``hopper web`` process on 127.0.0.1.

Stalled log followers of a job writing 100 MB must cost a bounded amount of
memory (measured with psutil, the server killed early if it runs away so a
regression fails fast instead of eating the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from hopper.core.states import JobState
from hopper.store.layout import Layout
from hopper.web import feeds, guard, sse
from hopper.web.token import read_token, token_path
from waiting import poll_until
from web.webtools import free_port, make_job

MB = 1 << 20
RSS_LIMIT = 200 * MB  # the bound the dashboard must keep (issue 27)
RSS_GUARD = 400 * MB  # past this the server is killed: the test fails without harm
END = b"END-OF-THE-LOG"
_NOFILE = resource.RLIMIT_NOFILE


@dataclass
class Web:
    proc: subprocess.Popen[str]
    port: int
    token: str
    peak: int = 0
    killed: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sample(self) -> None:
        """On a thread: the server's peak RSS, every 20 ms; kill it past the guard."""
        ps = psutil.Process(self.proc.pid)
        while not self._stop.wait(0.02):
            try:
                rss = ps.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            if rss > RSS_GUARD:
                self.killed = True
                self.proc.kill()
                return

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"hopper web ended (peak RSS {self.peak / MB:.0f} MB, killed by the guard: "
                f"{self.killed})"
            )


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def hopper_web(layout: Layout, nofile: int | None = None) -> Iterator[Web]:
    """A real ``hopper web`` on 127.0.0.1 (its soft descriptor limit ``nofile`` if given),
    its RSS sampled from the start."""
    port = free_port()
    root = str(layout.root)

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(_NOFILE)[1]))

    proc = subprocess.Popen(
        [sys.executable, "-m", "hopper", "web", "--root", root, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=limit,  # setrlimit only, before exec
    )
    server = Web(proc, port, "")
    sampler = threading.Thread(target=server.sample, daemon=True)
    try:
        poll_until(lambda: listening(port), 30, "hopper web to listen", check=server.alive)
        server.token = read_token(token_path(layout))  # written before the port listens
        sampler.start()
        yield server
    finally:
        server._stop.set()
        proc.kill()
        proc.wait(timeout=30)
        if sampler.is_alive():
            sampler.join(timeout=10)


@pytest.fixture
def web(layout: Layout) -> Iterator[Web]:
    with hopper_web(layout) as server:
        yield server


def stalled_follower(web: Web, job_id: str) -> socket.socket:
    """A client that asks for the live log, reads the response head, then never reads."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", web.port))
    s.sendall(
        f"GET /api/jobs/{job_id}/log HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {web.token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, f"the server closed a follower before answering: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


def backlog_ends(web: Web, job_id: str) -> bool:
    """A fresh follower's backlog (the end of the log up to where the server has read)
    holds the last line: the server is done with the file."""
    headers = {"authorization": f"Bearer {web.token}", "accept": "text/event-stream"}
    seen = b""
    deadline = time.monotonic() + 10
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(10.0)) as client,
            client.stream("GET", f"{web.base}/api/jobs/{job_id}/log", headers=headers) as r,
        ):
            for chunk in r.iter_bytes():
                seen = (seen + chunk)[-4 * MB :]
                if END in seen:
                    return True
                if time.monotonic() > deadline:
                    return False
    except httpx.HTTPError:
        return False  # the server went away: poll_until's check says why
    return False


def read_until(s: socket.socket, marker: bytes, timeout: float) -> bytes:
    s.settimeout(timeout)
    got = b""
    deadline = time.monotonic() + timeout
    while marker not in got[-64 * 1024 :] and time.monotonic() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            break
        got = (got + chunk)[-1 * MB :]
    return got


def test_ten_stalled_followers_of_a_100_mb_log_keep_hopper_web_small(
    layout: Layout, web: Web, tmp_path: Path
) -> None:
    run = make_job(layout, "big", JobState.RUNNING)
    log = run / "job.log"
    log.write_bytes(b"")
    followers = [stalled_follower(web, "big") for _ in range(10)]
    try:
        # 100 MB of control bytes: JSON escapes each one as \u0001, six times its size
        line = b"\x01" * 1023 + b"\n"
        with log.open("ab") as f:
            for _ in range(100):
                f.write(line * 1024)
                f.flush()
                web.alive()
            f.write(END + b"\n")
        poll_until(
            lambda: backlog_ends(web, "big"), 180, "the server to reach the end", check=web.alive
        )
        web.alive()
        # a dropped follower is told to reload (once it reads again)
        told = read_until(followers[0], b"event: reload", 60)
        assert b"event: reload" in told, told[-300:]
    finally:
        for s in followers:
            s.close()  # the rest disconnect without reading
    ps = psutil.Process(web.proc.pid)
    poll_until(
        lambda: not [c for c in ps.net_connections() if c.status == psutil.CONN_ESTABLISHED],
        60,
        "the server to let the followers go",
        check=web.alive,
    )
    assert httpx.get(
        f"{web.base}/api/overview", headers={"authorization": f"Bearer {web.token}"}
    ).is_success
    web.alive()
    print(f"hopper web peak RSS: {web.peak / MB:.0f} MB")
    assert web.peak < RSS_LIMIT, f"peak RSS {web.peak / MB:.0f} MB"


def test_a_client_is_bounded_in_bytes_and_dropped_with_reload_and_frames_stay_small() -> None:
    big = ("log", json.dumps("\x01" * feeds.CHUNK_CHARS))  # ~192 KiB once escaped
    sub = feeds.Subscriber()
    puts = 0
    while not sub.closed:
        sub.put(big)
        puts += 1
    assert puts * feeds.size(big) <= feeds.QUEUE_BYTES + feeds.size(big)
    assert puts < 1024  # bytes bound it, long before the old 1024-message bound
    assert sub.queued == 0 and sub.queue.qsize() == 2  # emptied: reload, then the end
    event, data = sub.take() or ("", "")
    assert event == "reload" and "fell behind" in json.loads(data)["reason"]
    assert sub.take() is None

    async def frames_of(sub: feeds.Subscriber) -> list[bytes]:
        return [f async for f in sse.frames(sub, [], lambda: None)]

    sub = feeds.Subscriber()
    for _ in range(30):  # ~5.6 MiB waiting for a client that wakes up
        sub.put(big)
    sub.close()
    frames = asyncio.run(frames_of(sub))
    assert b"".join(frames).count(b"event: log") == 30
    assert max(len(f) for f in frames) <= sse.FRAME_BYTES + 2 * feeds.size(big)


def test_half_sent_requests_neither_starve_a_real_request_nor_stay_open(layout: Layout) -> None:
    """1,100 connections that send half a request line, against a server whose descriptor
    limit is 1024: a real request is still answered at once, and every one of them is
    closed by the server after the header timeout."""
    soft, hard = resource.getrlimit(_NOFILE)
    want = 1100 + 200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"this test needs {want} descriptors; the hard limit is {hard}")
    resource.setrlimit(_NOFILE, (max(soft, want), hard))
    half: list[socket.socket] = []
    try:
        with hopper_web(layout, nofile=1024) as web:
            for _ in range(1100):
                s = socket.create_connection(("127.0.0.1", web.port), timeout=10)
                s.sendall(b"GET /api/jo")
                half.append(s)
            started = time.monotonic()
            r = httpx.get(
                f"{web.base}/api/overview",
                headers={"authorization": f"Bearer {web.token}"},
                timeout=httpx.Timeout(30.0),
            )
            assert r.status_code == 200, r.text
            answered = time.monotonic() - started
            assert answered < guard.HEADER_TIMEOUT, f"answered only after {answered:.1f}s"
            deadline = time.monotonic() + guard.HEADER_TIMEOUT + 60
            still_open = [s for s in half if not closed_by_peer(s, deadline)]
            assert not still_open, f"{len(still_open)} half requests still open"
            web.alive()
            assert psutil.Process(web.proc.pid).num_fds() < 200
    finally:
        for s in half:
            s.close()
        resource.setrlimit(_NOFILE, (soft, hard))


def closed_by_peer(s: socket.socket, deadline: float) -> bool:
    s.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return s.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_at_the_cap_with_every_connection_busy_the_newcomer_is_closed(layout: Layout) -> None:
    nofile = guard.RESERVE_FDS + guard.MIN_CAP + 4  # a cap of MIN_CAP + 4 connections
    cap = guard.connection_cap(nofile)
    streams: list[socket.socket] = []
    try:
        with hopper_web(layout, nofile=nofile) as web:
            request = (
                f"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                f"{web.token}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
            for _ in range(cap):  # live job-list streams: serving a request, never evicted
                s = socket.create_connection(("127.0.0.1", web.port), timeout=30)
                s.sendall(request)
                assert read_until(s, b"event: hello", 30).startswith(b"HTTP/1.1 200")
                streams.append(s)
            late = socket.create_connection(("127.0.0.1", web.port), timeout=30)
            streams.append(late)
            late.sendall(request)
            assert closed_by_peer(late, time.monotonic() + 30)
            for s in streams[:-1]:  # the busy ones were left alone
                s.sendall(b"")
                assert not closed_by_peer(s, time.monotonic() + 0.05)
            web.alive()
    finally:
        for s in streams:
            s.close()
