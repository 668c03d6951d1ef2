"""Several watchers, several "hosts" (``--host-id``), one root (docs/scale-out.md).

1. Three watchers share a global ``max_parallel``: jobs log start and end
   times into one file, and the measured overlap never exceeds the limit.
2. One host dies mid-run (its watcher, supervisors and jobs SIGKILLed
   together): after ``host_dead_after`` a survivor takes over each of its
   jobs exactly once — lost jobs retried or failed per policy, queued ones
   run — and everything ends terminal, each prompt filed once.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from conftest import Watchers, drop, wait_for
from faults.helpers import check_invariants
from hopper.core.states import JobState, Reason, is_terminal
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

SCALE_CONFIG = 'host_dead_after = "3s"\nreconcile_interval = "0.5s"\n'


def timed_job(ledger: Path, spans: Path, token: str, seconds: float, retries: int = 0) -> str:
    return (
        f'+++\nagent = "bash"\nretries = {retries}\n+++\n'
        f'echo "start {token} $(date +%s.%N)" >> {spans}\n'
        f"echo {token} >> {ledger}\n"
        f"sleep {seconds}\n"
        f'echo "end {token} $(date +%s.%N)" >> {spans}\n'
    )


def gated_job(ledger: Path, token: str, gate: Path, retries: int = 0) -> str:
    """Runs until ``gate`` exists (a 120 s deadline): still running whenever the test kills."""
    return (
        f'+++\nagent = "bash"\nretries = {retries}\n+++\n'
        f"echo {token} >> {ledger}\n"
        f"for _ in $(seq 1200); do [ -e {gate} ] && exit 0; sleep 0.1; done\n"
        "exit 7\n"
    )


def max_overlap(spans: Path) -> int:
    edges = []
    for line in spans.read_text().splitlines():
        kind, _token, at = line.split()
        edges.append((float(at), 1 if kind == "start" else -1))
    level = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        level += step
        peak = max(peak, level)
    return peak


def records(layout: Layout) -> list:  # type: ignore[type-arg]
    out = []
    for run_dir in sorted(layout.runs.iterdir()):
        if (run_dir / "job.json").exists():
            out.append(read_record(run_dir))
    return out


def all_terminal(layout: Layout, count: int) -> bool:
    """Every job terminal and its prompt filed (finalizing writes job.json first)."""
    recs = records(layout)
    return (
        len(recs) == count
        and all(is_terminal(r.state) for r in recs)
        and len(list(layout.processed.rglob("*.prompt.md"))) == count
    )


def claimed(layout: Layout, count: int) -> Callable[[], bool]:
    return lambda: len(records(layout)) == count and not list(layout.inbox.rglob("*.prompt.md"))


def test_three_hosts_share_global_slots(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path, hopper: Any
) -> None:
    """Each host claims its own batch (the others held with SIGSTOP), then all compete."""
    config = 'host_dead_after = "60s"\nreconcile_interval = "0.5s"\nmax_parallel = 2\n'
    config_file.write_text(config_file.read_text() + config)
    ledger, spans = layout.root / "ledger", tmp_path / "spans"
    tokens: list[str] = []
    procs = []
    started = time.monotonic()
    try:
        for n, host in enumerate(("h1", "h2", "h3")):
            proc = watchers.start("--host-id", host, stderr=tmp_path / f"{host}.log")
            procs.append(proc)
            wait_for(
                lambda h=host: list((layout.state_dir / "watchers").glob(f"{h}--*.json")),
                what=f"{host} beat",
            )
            batch = [f"t{n}{i:02d}" for i in range(6)]
            for token in batch:
                drop(layout, token, timed_job(ledger, spans, token, 0.3))
            tokens += batch
            wait_for(claimed(layout, len(tokens)), what=f"{host} claimed its batch")
            if host != "h3":
                proc.send_signal(signal.SIGSTOP)  # the next batch goes to the next host
        listed = json.loads(hopper("watchers", "--json").stdout)
        assert sorted(w["host"] for w in listed) == ["h1", "h2", "h3"]
        assert all(w["boot_id"] and w["version"] for w in listed)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
    wait_for(lambda: all_terminal(layout, len(tokens)), timeout=120, what="all jobs terminal")
    elapsed = time.monotonic() - started
    figures = check_invariants(layout, ledger, tokens)
    peak = max_overlap(spans)
    hosts = Counter(r.host for r in records(layout))
    print(f"scale-out: 3 watchers, {len(tokens)} jobs, peak {peak}/2, {elapsed:.1f}s, {hosts}")
    logs = "".join((tmp_path / f"{h}.log").read_text() for h in ("h1", "h2", "h3"))
    assert peak <= 2, f"{peak} jobs ran at once with max_parallel = 2\n{spans.read_text()}{logs}"
    assert peak == 2, "the two slots were never used together"
    assert all(r.state is JobState.SUCCEEDED for r in records(layout))
    assert hosts == {"h1": 6, "h2": 6, "h3": 6}, hosts
    assert figures["duplicates"] == 0
    assert all(w["state"] == "alive" for w in json.loads(hopper("watchers", "--json").stdout))
    watchers.stop_all()
    assert list((layout.state_dir / "watchers").glob("*.json")) == [], "beats removed on exit"
    assert list((layout.state_dir / "slots").rglob("[0-9]*")) == [], "every lease released"


def kill_host(pid: int) -> int:
    """Simulate a host dying: its watcher and everything below it, SIGKILLed at once."""
    root = psutil.Process(pid)
    victims = [root, *root.children(recursive=True)]
    for proc in victims:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=10)
    return len(victims)


def test_a_dead_hosts_jobs_are_taken_over_exactly_once(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    config_file.write_text(config_file.read_text() + SCALE_CONFIG + "max_parallel = 4\n")
    ledger, gate = layout.root / "ledger", tmp_path / "gate"
    tokens = [f"d{i:02d}" for i in range(6)]
    victim = watchers.start("--host-id", "h1", stderr=tmp_path / "h1.log")
    wait_for(lambda: (layout.state_dir / "watchers").exists(), what="h1 beat")
    for i, token in enumerate(tokens):
        drop(layout, token, gated_job(ledger, token, gate, retries=i % 2))
    # Four running and all six recorded: a prompt claimed in the turn that recorded the
    # fourth running has its queued record written as that turn's starts end.
    wait_for(
        lambda: (
            len(recs := records(layout)) == 6
            and sum(r.state is JobState.RUNNING for r in recs) == 4
        ),
        what="h1 running four jobs, six recorded",
    )
    assert {r.host for r in records(layout)} == {"h1"} and len(records(layout)) == 6
    for host in ("h2", "h3"):
        watchers.start("--host-id", host, stderr=tmp_path / f"{host}.log")
    wait_for(lambda: len(list((layout.state_dir / "watchers").glob("*.json"))) == 3, what="beats")
    running_at_kill = {r.id for r in records(layout) if r.state is JobState.RUNNING}
    killed = kill_host(victim.pid)
    died = time.monotonic()
    gate.touch()  # the jobs h1 ran are dead by now; the rest may end
    wait_for(lambda: all_terminal(layout, len(tokens)), timeout=90, what="all jobs terminal")
    recovered = time.monotonic() - died

    final = records(layout)
    lost_ids = set()
    for rec in final:
        events = Counter(e["event"] for e in read_events(layout.run_dir(rec.id)))
        assert events["taken_over"] <= 1 and events["lost"] <= 1, (rec.id, events)
        if events["lost"]:
            lost_ids.add(rec.id)
            assert events["taken_over"] == 1, (rec.id, events)
            if rec.retries:
                assert rec.state is JobState.SUCCEEDED and rec.attempt == 2, rec
            else:
                assert rec.state is JobState.FAILED and rec.reason is Reason.LOST, rec
        else:
            assert rec.state is JobState.SUCCEEDED and rec.attempt == 1, rec
    assert lost_ids == running_at_kill, "exactly the jobs running on h1 were taken over"
    assert len(lost_ids) == 4, f"h1 ran four jobs; {len(lost_ids)} were taken over as lost"
    assert all(r.host in ("h2", "h3") for r in final if r.reason is not Reason.LOST)
    # Ran at most twice (the killed attempt and one retry), filed once, all terminal.
    ran = Counter(ledger.read_text().split())
    assert all(n <= 2 for n in ran.values()), ran
    retried = {r.name for r in final if r.id in lost_ids and r.retries}
    for token in tokens:
        assert ran[token] == (2 if token in retried else 1), (token, ran[token])
    assert len(list(layout.processed.rglob("*.prompt.md"))) == len(tokens)
    assert not list(layout.inbox.rglob("*.prompt.md")) and not list(layout.runs.glob("*/prompt.md"))
    takers = Counter(
        json.loads(line)["owner"].split(":")[0]
        for rec in final
        for line in (layout.run_dir(rec.id) / "events.jsonl").read_text().splitlines()
        if '"taken_over"' in line
    )
    print(
        f"host death: {killed} processes of h1 killed, {len(lost_ids)} lost jobs taken over "
        f"once each ({dict(takers)}), all {len(tokens)} terminal {recovered:.1f}s after the kill"
    )
