"""A watcher that was stopped long enough to look dead drops what was taken over.

Watcher A (``--host-id A``) holds queued jobs (held by a PAUSE marker):
``gate`` and two jobs ``after = ["gate"]``. A is SIGSTOPped; B
(``host_dead_after = 4s``) finds host A dead, takes the jobs over and runs
them. Then A wakes up (SIGCONT) with the same ids in its in-memory queue.
Before this was fixed, A started them again: ``gate`` was rejected as
"vanished" (failed/bad_prompt for a job that succeeded) and its dependents
filed ``dependency_failed`` while B ran them. Now A re-checks ownership before
it starts, rejects or finalizes anything, and drops what B took (logged once).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

from conftest import Watchers, drop, wait_for
from faults.helpers import check_invariants, ledger_script
from faults.test_scale_out import all_terminal, records
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events
from hopper.store.layout import Layout

STALE_CONFIG = 'host_dead_after = "4s"\nreconcile_interval = "0.5s"\n'


def test_a_woken_watcher_drops_jobs_another_host_took(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    config_file.write_text(config_file.read_text() + STALE_CONFIG)
    ledger = layout.root / "ledger"
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    pause = layout.root / "PAUSE"
    pause.touch()  # A claims the prompts but starts none of them
    a = watchers.start("--host-id", "A", stderr=a_log)
    tokens = ["gate", "after1", "after2"]
    drop(layout, "gate", ledger_script(ledger, "gate"))
    for token in tokens[1:]:
        drop(
            layout,
            token,
            f'+++\nagent = "bash"\nafter = ["gate"]\n+++\necho {token} >> {ledger}\n',
        )
    wait_for(
        lambda: (
            len(records(layout)) == 3
            and all(r.state is JobState.QUEUED and r.host == "A" for r in records(layout))
        ),
        what="A holds the three jobs queued",
    )
    a.send_signal(signal.SIGSTOP)
    try:
        pause.unlink()
        watchers.start("--host-id", "B", stderr=b_log)
        wait_for(lambda: all_terminal(layout, 3), timeout=60, what="B ran the jobs A held")
        assert {r.host for r in records(layout)} == {"B"}
    finally:
        woke = time.time()
        a.send_signal(signal.SIGCONT)
    (a_beat,) = (layout.state_dir / "watchers").glob("A--*.json")
    wait_for(lambda: a_beat.stat().st_mtime > woke, what="A beats again after waking")
    # A's loop goes on: the next good prompt runs (on whichever host).
    drop(layout, "next", ledger_script(ledger, "next"))
    wait_for(lambda: all_terminal(layout, 4), timeout=30, what="the next prompt runs")
    wait_for(lambda: a.poll() is None and a_beat.stat().st_mtime > woke + 1, what="A still up")
    watchers.stop_all()

    check_invariants(layout, ledger, [*tokens, "next"])
    for rec in records(layout):
        assert rec.state is JobState.SUCCEEDED and rec.reason is Reason.COMPLETED, rec
        events = Counter(e["event"] for e in read_events(layout.run_dir(rec.id)))
        assert events["started"] == 1 and events["finalized"] == 1, (rec.id, events)
        assert events["rejected"] == 0, (rec.id, events)
    text = a_log.read_text()
    for rec in records(layout):
        if rec.name in tokens:
            assert text.count(f"job={rec.id} was taken over") == 1, text  # logged once
