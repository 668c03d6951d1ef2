"""Generated hostile input and run-directory tampering against a LIVE watcher.

Hypothesis throws inbox entries (names that are not UTF-8, FIFOs, symlinks
out of the root, directories, huge sparse files, broken or deeply nested
front matter) and tampering with the run directories of finished and failed
jobs (files replaced by FIFOs, symlinks, directories, garbage JSON, planted
takeover markers) at one ``hopper run``. After each example a good prompt is
dropped and must succeed, and at the end:

- the watcher is still up;
- every good prompt ran exactly once and ended in one terminal state;
- nothing outside the root changed (the symlink target's bytes and mtime).

Bounded: a fixed number of examples, derandomized so CI is reproducible.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Watchers, drop, wait_for
from hopper.core.states import JobState
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout

EXAMPLES = 25

BODIES = [
    b'+++\nagent = "bash"\n+++\necho fuzz\n',
    b"+++\nafter = " + b"[" * 1000 + b"]" * 1000 + b"\n+++\necho deep\n",
    b"+++\ntimeout = nan\n+++\necho nan\n",
    b'+++\nagent = "no-such-agent"\n+++\n',
    b"+++\nunclosed = 1\n",
    b"\xff\xfe\x00garbage\x80",
    b"",
]
INBOX_KINDS = ["file", "fifo", "symlink", "dir", "sparse"]
RUN_FILES = [
    "job.json",
    "exit.json",
    "events.jsonl",
    "PRIORITY",
    "agent.json",
    "resources.json",
    "claim.json",
    ".takeover-0123456789abcdef0123",
]
TAMPER_KINDS = ["fifo", "symlink", "dir", "garbage"]

names = st.binary(min_size=1, max_size=24).filter(
    lambda b: b"/" not in b and b"\0" not in b and not b.startswith(b".")
)
inbox_entry = st.tuples(names, st.sampled_from(INBOX_KINDS), st.sampled_from(BODIES))
tampering = st.tuples(
    st.integers(0, 1000), st.sampled_from(RUN_FILES), st.sampled_from(TAMPER_KINDS)
)


def place(path: bytes, kind: str, body: bytes, outside: Path) -> None:
    if kind == "file":
        with open(path, "wb") as fh:
            fh.write(body)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        os.symlink(outside, path)
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(4 << 30)


def replace_with(path: Path, kind: str, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        return  # already something odd: leave it
    path.unlink(missing_ok=True)
    if kind == "garbage":
        path.write_bytes(b'{"state": [[[[' + b"\xff" * 10)
    else:
        place(os.fsencode(path), kind, b"", outside)


def good_record(layout: Layout, name: str) -> JobState | None:
    for run_dir in layout.runs.iterdir():
        if f"-{name}-" in run_dir.name:
            try:
                return read_record(run_dir).state
            except (OSError, ValueError):
                return None
    return None


def test_fuzzed_inbox_and_run_dirs_never_stop_the_watcher(
    layout: Layout, config_file: Path, watchers: Watchers, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside the root\n")
    before = (outside.read_bytes(), outside.stat().st_mtime_ns)
    ledger = tmp_path / "ledger"
    log = tmp_path / "watcher.log"
    config_file.write_text(config_file.read_text() + 'reconcile_interval = "0.2s"\n')
    proc = watchers.start(stderr=log)
    goods: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(inbox_entry, max_size=4), st.lists(tampering, max_size=4))
    def example(
        entries: list[tuple[bytes, str, bytes]], tampers: list[tuple[int, str, str]]
    ) -> None:
        inbox = os.fsencode(layout.inbox)
        for name, kind, body in entries:
            path = os.path.join(inbox, name + b".prompt.md")
            if not os.path.lexists(path):
                place(path, kind, body, outside)
        victims = sorted(d for d in layout.runs.iterdir() if "-good" not in d.name)
        for pick, filename, kind in tampers:
            if victims:
                replace_with(victims[pick % len(victims)] / filename, kind, outside)
        name = f"good{len(goods):03d}"
        goods.append(name)
        drop(layout, name, f'+++\nagent = "bash"\n+++\necho {name} >> {ledger}\n')
        wait_for(
            lambda: good_record(layout, name) is JobState.SUCCEEDED or proc.poll() is not None,
            timeout=60,
            what=f"{name} runs",
        )
        assert proc.poll() is None, f"the watcher died:\n{log.read_text()[-4000:]}"
        assert good_record(layout, name) is JobState.SUCCEEDED

    try:
        example()
        assert proc.poll() is None
        print(f"fuzz: {len(goods)} examples, {len(list(layout.runs.iterdir()))} run directories")
    finally:
        for fifo in layout.inbox.rglob("*"):
            if fifo.is_fifo():
                fifo.unlink()  # nothing may block the teardown's rescans
    ran = Counter(ledger.read_text().split())
    assert all(ran[g] == 1 for g in goods), ran
    for run_dir in layout.runs.iterdir():
        if "-good" in run_dir.name:
            rec = read_record(run_dir)
            events = Counter(e["event"] for e in read_events(run_dir))
            assert rec.state is JobState.SUCCEEDED and events["finalized"] == 1, (rec, events)
    assert (outside.read_bytes(), outside.stat().st_mtime_ns) == before, "outside the root changed"
