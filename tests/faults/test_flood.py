"""A flood of prompts never makes a live watcher look dead.

Before turns were bounded, one turn claimed every complete prompt in the
inbox: 15,000 prompts let another host (``host_dead_after``) take the
watcher's jobs over, and 40,000 meant no ``WATCHDOG=1`` for 88 s against
``WatchdogSec=30``. Now a turn claims at most CLAIM_BATCH prompts and the
claim loop sends the heartbeat and the watchdog ping whenever they are due.

To keep CI fast the flood is small and each claim is made slow on a skewed
clock: every claim moves the watcher's clock (monotonic and wall) on by
CLAIM_COST, as a slow disk would. The pings arrive on a real NOTIFY_SOCKET
datagram socket and are stamped with that clock as they are drained.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from conftest import drop
from faults.test_loop_guard import fast_config
from hopper.intake import Intake
from hopper.scaleout import ScaleOut
from hopper.store.layout import Layout
from hopper.watcher import Watcher

FLOOD = 1500  # prompts: several turns of CLAIM_BATCH claims
CLAIM_COST = 0.01  # seconds each claim moves the clock on: the flood "takes" 15 s
WATCHDOG_SEC = 2.0


class SkewedClock:
    """The system clock plus a skew the test moves forward (a slow disk, simulated)."""

    def __init__(self) -> None:
        self.skew = 0.0

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def monotonic(self) -> float:
        return time.monotonic() + self.skew

    def time(self) -> float:
        return time.time() + self.skew


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        sock.setblocking(False)
        yield sock


def test_a_flood_of_prompts_keeps_watchdog_and_heartbeat_coming(
    layout: Layout,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    notify_socket: socket.socket,
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    monkeypatch.setenv("WATCHDOG_USEC", str(int(WATCHDOG_SEC * 1_000_000)))
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    for i in range(FLOOD):  # rejected at the claim (unknown agent): no job process to wait for
        drop(layout, f"p{i:05d}", '+++\nagent = "no-such-agent"\n+++\n')
    clock = SkewedClock()
    config = fast_config()
    watcher = Watcher(layout, config, clock=clock, host="flood")
    pings: list[float] = []
    beats: list[float] = []

    def drain() -> None:
        while True:
            try:
                message = notify_socket.recv(4096).decode()
            except BlockingIOError:
                return
            if "WATCHDOG=1" in message.split("\n"):
                pings.append(clock.monotonic())

    real_take = Intake.take
    claims = 0

    def slow_take(self: Intake, path: Path, *, behind: bool = False) -> object:
        nonlocal claims
        drain()
        claims += 1
        clock.skew += CLAIM_COST
        return real_take(self, path, behind=behind)

    real_beat = ScaleOut._write_beat

    def stamped_beat(self: ScaleOut, *args: object, **kw: object) -> None:
        beats.append(clock.monotonic())
        real_beat(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Intake, "take", slow_take)
    monkeypatch.setattr(ScaleOut, "_write_beat", stamped_beat)
    assert watcher.run(until_idle=True) == 0
    drain()

    assert claims == FLOOD
    assert len(list(layout.processed.rglob("*.prompt.md"))) == FLOOD
    assert len(pings) >= FLOOD * CLAIM_COST / WATCHDOG_SEC, pings
    ping_gap = max(b - a for a, b in pairwise(pings))
    beat_gap = max(b - a for a, b in pairwise(beats))
    slack = 0.5  # one slow claim on a loaded CI box
    print(f"flood of {FLOOD}: max WATCHDOG gap {ping_gap:.2f}s, max heartbeat gap {beat_gap:.2f}s")
    # Pings are due every 0.4 x WatchdogSec; one slow claim may delay one a little.
    assert ping_gap < WATCHDOG_SEC * 0.75, f"WATCHDOG=1 {ping_gap:.2f}s apart"
    assert beat_gap < config.heartbeat_interval + slack, f"heartbeat {beat_gap:.1f}s apart"
