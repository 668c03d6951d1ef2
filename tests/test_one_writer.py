"""One writer of job state: store/ledger.py writes job.json and events.jsonl, and only
core/lifecycle.py changes a record.

Every module under src/hopper is parsed with `ast`. Outside the ledger (and
the low-level helpers in store/jobfile.py it uses), nothing may name the
record and event writers, or pass job.json / events.jsonl to a write. The
supervisor and the agent driver are other processes (stdlib-only, or inside
the job) that append their own lines to events.jsonl; they are named below.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "hopper"

# store/jobfile.py's low-level writers
WRITERS = frozenset({"write_record", "append_event", "append_events"})
LEDGER = frozenset({"store/ledger.py", "store/jobfile.py"})
# Other processes, each appending its own events (they cannot call into the watcher).
OTHER_PROCESSES = frozenset({"proc/supervise.py", "agents/drive.py"})
WRITE_CALLS = frozenset(
    {"write_atomic", "append_line", "append_line_in", "open_regular", "open", "write_text"}
)
STATE_FILES = frozenset({"JOB_FILE", "EVENTS_FILE", "job.json", "events.jsonl"})
# Call sites not converted yet. This set may only shrink: a module that no longer
# needs its place here fails the test until it is removed.
PENDING: frozenset[str] = frozenset()


@cache
def modules() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(SRC)): ast.parse(p.read_text(), str(p)) for p in sorted(SRC.rglob("*.py"))
    }


def _names(node: ast.AST) -> set[str]:
    """Names, attributes, imported names and string constants anywhere under ``node``."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.alias):
            found.add(sub.name)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.add(sub.value)
    return found


def writes_of(tree: ast.Module) -> list[str]:
    """What in ``tree`` writes job state: a writer named, or a state file passed to a write."""
    hits = [f"line {n.lineno}: {name}" for n in ast.walk(tree) for name in _writer_refs(n)]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if called in WRITE_CALLS:
            args = set().union(*(_names(a) for a in [*node.args, *node.keywords, func]))
            if args & STATE_FILES:
                hits.append(f"line {node.lineno}: {called}(… {sorted(args & STATE_FILES)} …)")
    return hits


def _writer_refs(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and node.id in WRITERS:
        return [node.id]
    if isinstance(node, ast.Attribute) and node.attr in WRITERS:
        return [node.attr]
    if isinstance(node, ast.alias) and node.name in WRITERS:
        return [node.name]
    return []


def record_copies(tree: ast.Module) -> list[str]:
    """``x.model_copy(…)`` calls, except on a Config (``config.model_copy``)."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "model_copy":
            receiver = node.value
            name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
            if name != "config":
                hits.append(f"line {node.lineno}: {ast.unparse(node)}")
    return hits


def test_only_the_ledger_writes_job_json_and_events() -> None:
    found = {
        name: hits
        for name, tree in modules().items()
        if name not in LEDGER | OTHER_PROCESSES | PENDING and (hits := writes_of(tree))
    }
    assert found == {}, "write job state through store/ledger.py (commit, note)"


def test_records_change_only_in_the_lifecycle() -> None:
    found = {
        name: hits
        for name, tree in modules().items()
        if name not in PENDING and (hits := record_copies(tree))
    }
    assert found == {}, "change a JobRecord through a transition in core/lifecycle.py"


def test_pending_modules_still_need_their_place() -> None:
    trees = modules()
    done = {n for n in PENDING if not writes_of(trees[n]) and not record_copies(trees[n])}
    assert done == set(), "converted: remove them from PENDING"


def test_the_checks_catch_a_direct_write_and_a_copy() -> None:
    bad = ast.parse(
        "from hopper.store.jobfile import write_record\n"
        "write_atomic(run_dir / JOB_FILE, data)\n"
        "append_line(run_dir / 'events.jsonl', b'x')\n"
        "new = record.model_copy(update={'state': 'x'})\n"
        "ok = config.model_copy(update={'kill_grace': 1.0})\n"
    )
    assert len(writes_of(bad)) == 3
    assert record_copies(bad) == ["line 4: record.model_copy"]
