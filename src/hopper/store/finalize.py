"""Finalizing: the terminal job.json first, then the prompt into processed/.

Steps and what a crash after each leaves behind:

1. write ``job.json`` (terminal, with processed_path)  -> prompt.md still in
   the run dir: recovery moves it (the move is idempotent).
2. ``rename runs/<id>/prompt.md -> processed/…``       -> done; the
   "finalized" event may be missing and is appended by recovery.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from hopper.core.record import JobRecord
from hopper.faults import crash_point
from hopper.store.jobfile import PROMPT_FILE, append_event, write_record
from hopper.store.layout import Layout


def finalize(layout: Layout, run_dir: Path, record: JobRecord, now: datetime) -> None:
    """Write the terminal ``record`` (its processed_path set) and move the prompt."""
    assert record.processed_path is not None
    write_record(run_dir, record)
    crash_point("finalize.after_record")
    move_prompt(layout, run_dir, record.processed_path)
    crash_point("finalize.after_move")
    append_event(
        run_dir,
        "finalized",
        now,
        state=record.state,
        reason=record.reason,
        processed_path=record.processed_path,
    )


def move_prompt(layout: Layout, run_dir: Path, processed_rel: str) -> bool:
    """Move prompt.md to ``processed_rel``; False if it was already moved."""
    source = run_dir / PROMPT_FILE
    target = layout.root / processed_rel
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(source, target)
    except FileNotFoundError:
        if target.exists():
            return False
        raise
    return True
