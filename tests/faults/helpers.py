"""Invariant checks shared by the fault-injection tests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hopper.core.states import is_terminal
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout


def ledger_script(ledger: Path, token: str) -> str:
    """A bash job that appends its token to the ledger: ran-exactly-once evidence."""
    return f'+++\nagent = "bash"\n+++\necho {token} >> {ledger}\n'


def check_invariants(layout: Layout, ledger: Path, tokens: list[str]) -> dict[str, int]:
    """Every prompt in exactly one place (processed/), ran once, one terminal record."""
    records = []
    for run_dir in layout.runs.iterdir():
        if run_dir.name.startswith(".") or not (run_dir / "job.json").exists():
            assert not (run_dir / "prompt.md").exists(), f"{run_dir}: prompt without a record"
            continue
        records.append(read_record(run_dir))
    assert all(is_terminal(r.state) for r in records), [
        (r.id, r.state) for r in records if not is_terminal(r.state)
    ]
    assert len(records) == len(tokens), f"{len(records)} jobs for {len(tokens)} prompts"
    in_inbox = list(layout.inbox.rglob("*.prompt.md"))
    in_runs = list(layout.runs.glob("*/prompt.md"))
    in_processed = list(layout.processed.rglob("*.prompt.md"))
    assert in_inbox == [] and in_runs == [], (in_inbox, in_runs)
    assert len(in_processed) == len(tokens)
    ran = Counter(ledger.read_text().split()) if ledger.exists() else Counter()
    twice = {t: n for t, n in ran.items() if n > 1}
    missing = [t for t in tokens if t not in ran]
    assert not twice, f"ran more than once: {twice}"
    assert not missing, f"never ran: {missing[:10]}"
    return {"jobs": len(records), "ran": sum(ran.values()), "duplicates": len(twice)}
