"""Slow and hostile clients against a real ``hopper web`` process on 127.0.0.1.

Stalled log followers of a job writing 100 MB must cost a bounded amount of
memory (measured with psutil, the server killed early if it runs away so a
regression fails fast instead of eating the machine).
"""

from __future__ import annotations

import asyncio
import json
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
from hopper.web import feeds, sse
from hopper.web.token import read_token, token_path
from waiting import poll_until
from web.webtools import free_port, make_job

MB = 1 << 20
RSS_LIMIT = 200 * MB  # the bound the dashboard must keep (issue 27)
RSS_GUARD = 400 * MB  # past this the server is killed: the test fails without harm
END = b"END-OF-THE-LOG"


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


@pytest.fixture
def web(layout: Layout) -> Iterator[Web]:
    port = free_port()
    root = str(layout.root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hopper", "web", "--root", root, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    server = Web(proc, port, "")
    sampler = threading.Thread(target=server.sample, daemon=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the URL: the token file is written
        server.token = read_token(token_path(layout))
        poll_until(lambda: listening(port), 30, "hopper web to listen", check=server.alive)
        sampler.start()
        yield server
    finally:
        server._stop.set()
        proc.kill()
        proc.wait(timeout=30)
        if sampler.is_alive():
            sampler.join(timeout=10)


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
