"""``hopper prune --older-than 30d``: remove finished jobs, their logs and processed prompts.

core/prune.py decides which jobs go (never a queued or running job, nor one
being finalized, nor one a queued job's ``after`` names); store/prune.py
removes them without following a link. ``--dry-run`` lists what would go and
removes nothing. Prints one line per job and a summary of what was freed.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from hopper.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_root_args, fail, read_context
from hopper.cli.common import warn as _warn
from hopper.core.durations import BadDuration, parse_duration
from hopper.core.prune import (
    KEPT_ACTIVE,
    KEPT_DEPENDENCY,
    KEPT_FINALIZING,
    KEPT_RECENT,
    KEPT_STATE,
    KEPT_UNREADABLE,
    age_text,
    ended_at,
    plan_prune,
)
from hopper.core.sizes import format_size
from hopper.core.states import TERMINAL_STATES, JobState
from hopper.core.terminal import terminal_safe
from hopper.errors import HopperError
from hopper.store import prune as store

_KEPT_WORDS = {
    KEPT_ACTIVE: "queued or running",
    KEPT_FINALIZING: "being finalized",
    KEPT_UNREADABLE: "unreadable",
    KEPT_STATE: "other states",
    KEPT_RECENT: "too recent",
    KEPT_DEPENDENCY: "waited on by a queued job",
}


def register(sub: Any) -> None:
    p = sub.add_parser("prune", help="remove finished jobs older than a given age")
    add_root_args(p)
    p.add_argument(
        "--older-than",
        required=True,
        metavar="AGE",
        help="only jobs that ended at least this long ago (30d, 12h, 90m; 0: every finished job)",
    )
    p.add_argument(
        "--state",
        action="append",
        choices=sorted(s.value for s in TERMINAL_STATES),
        help="only jobs in this state (repeatable; default: all three finished states)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        older_than = parse_duration(args.older_than)
    except BadDuration as exc:
        return fail(f"--older-than: {exc}", EXIT_USAGE)
    layout = read_context(args)
    failed: list[dict[str, str]] = []
    if not args.dry_run:
        store.check_safe_rmtree()
        for job_id in store.leftovers(layout):  # a prune that died or failed half-way
            try:
                store.finish_leftover(layout, job_id)
            except (HopperError, OSError) as exc:
                failed.append({"id": job_id, "error": str(exc)})
                if not args.json:
                    _warn(f"{job_id} not removed: {exc}")
    states = {JobState(s) for s in args.state} if args.state else set(TERMINAL_STATES)
    now = datetime.now(UTC)
    gathered = store.gather(layout)
    plan = plan_prune(
        gathered.records,
        now=now,
        older_than=older_than,
        states=states,
        unfiled=gathered.unfiled,
        unreadable=gathered.unreadable,
    )
    total = store.Freed()
    done: list[dict[str, Any]] = []
    for record in plan.prune:
        freed = store.measure(layout, record)
        if not args.dry_run:
            try:
                store.remove(layout, record)
            except (HopperError, OSError) as exc:
                failed.append({"id": record.id, "error": str(exc)})
                if not args.json:
                    _warn(f"{record.id} not removed: {exc}")
                continue
        total.add(freed)
        done.append(
            {
                "id": record.id,
                "name": record.name,
                "state": str(record.state),
                "ended_at": ended_at(record).isoformat(),
                "files": freed.files,
                "bytes": freed.bytes,
            }
        )
        if not args.json:
            verb = "would remove" if args.dry_run else "removed"
            print(
                terminal_safe(
                    f"{verb} {record.id}  {record.state}  ended {age_text(now, record)} ago  "
                    f"{freed.files} files, {format_size(freed.bytes)}"
                )
            )
    if done and not args.dry_run:
        store.drop_index_rows(layout)
    if args.json:
        print(json.dumps(_report(args.dry_run, done, failed, plan.kept, total), indent=2))
    else:
        print(terminal_safe(_summary(args.dry_run, len(done), total, plan.kept_counts())))
    return EXIT_FAILED if failed else EXIT_OK


def _summary(dry_run: bool, jobs: int, total: store.Freed, kept: dict[str, int]) -> str:
    verb = "would free" if dry_run else "freed"
    line = f"{verb} {jobs} job{'s' if jobs != 1 else ''}: {total.files} files, "
    line += format_size(total.bytes)
    if kept:
        parts = ", ".join(f"{n} {_KEPT_WORDS[why]}" for why, n in sorted(kept.items()))
        line += f"; kept {sum(kept.values())} ({parts})"
    return line


def _report(
    dry_run: bool,
    done: list[dict[str, Any]],
    failed: list[dict[str, str]],
    kept: list[Any],
    total: store.Freed,
) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        "pruned": done,
        "failed": failed,
        "kept": [{"id": k.id, "why": k.why, "detail": k.detail} for k in kept],
        "freed": {"jobs": len(done), "files": total.files, "bytes": total.bytes},
    }
