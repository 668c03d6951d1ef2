"""Chaos and races: many jobs, a watcher SIGKILLed at random, several watchers at once.

Sizes default to what CI runs in about a minute; set HOPPER_CHAOS_JOBS,
HOPPER_CHAOS_KILLS and HOPPER_RACE_PROMPTS for the bigger by-hand runs
reported in docs/reliability.md.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import hopper_cmd
from faults.helpers import check_invariants, ledger_script
from hopper.store.layout import Layout

CHAOS_JOBS = int(os.environ.get("HOPPER_CHAOS_JOBS", "300"))
CHAOS_KILLS = int(os.environ.get("HOPPER_CHAOS_KILLS", "20"))
RACE_PROMPTS = int(os.environ.get("HOPPER_RACE_PROMPTS", "2000"))


def bulk_drop(layout: Layout, ledger: Path, count: int, prefix: str) -> list[str]:
    tokens = []
    for i in range(count):
        token = f"{prefix}{i:05d}"
        sub = layout.inbox / f"g{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        tmp = sub / f".{token}.tmp"
        tmp.write_text(ledger_script(ledger, token))
        os.rename(tmp, sub / f"{token}.prompt.md")
        tokens.append(token)
    return tokens


def watcher(layout: Layout, config: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config), *extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_chaos_sigkill_the_watcher_at_random(layout: Layout, config_file: Path) -> None:
    config_file.write_text(config_file.read_text() + "max_parallel = 8\n")
    ledger = layout.root / "ledger"
    rng = random.Random(20261122)
    tokens = bulk_drop(layout, ledger, CHAOS_JOBS, "c")
    kills = 0
    started = time.monotonic()
    while kills < CHAOS_KILLS:
        proc = watcher(layout, config_file)
        try:
            proc.wait(timeout=rng.uniform(0.3, 1.2))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        else:
            raise AssertionError(f"the watcher exited by itself with {proc.returncode}")
    final = subprocess.run(
        hopper_cmd("run", "--root", str(layout.root), "--config", str(config_file), "--until-idle"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert final.returncode == 0, final.stderr[-2000:]
    figures = check_invariants(layout, ledger, tokens)
    print(
        f"chaos: {figures['jobs']} jobs, {kills} SIGKILLs, 0 lost, 0 duplicates, "
        f"{time.monotonic() - started:.1f}s"
    )


@pytest.mark.timeout(400)
def test_racing_watchers_claim_each_prompt_once(layout: Layout, config_file: Path) -> None:
    # max_parallel is global across watchers (leases): 8 slots shared by 4 watchers.
    config_file.write_text(config_file.read_text() + "max_parallel = 8\n")
    ledger = layout.root / "ledger"
    tokens = bulk_drop(layout, ledger, RACE_PROMPTS, "r")
    started = time.monotonic()
    procs = [watcher(layout, config_file, "--until-idle") for _ in range(4)]
    for proc in procs:
        assert proc.wait(timeout=600) == 0
    # A watcher that went idle early can leave jobs that another still runs:
    # all four are done only when every one exited.
    figures = check_invariants(layout, ledger, tokens)
    owners = {
        (d / "job.json").read_text().split('"owner": "')[1].split('"')[0]
        for d in layout.runs.iterdir()
        if (d / "job.json").exists()
    }
    print(
        f"race: {figures['jobs']} prompts, 4 watchers ({len(owners)} claimed some), "
        f"each claimed once, {time.monotonic() - started:.1f}s"
    )
    assert len(owners) >= 2, "the race never happened: one watcher took everything"
