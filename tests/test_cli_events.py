"""``hopper events``: --tail reads backwards (bytes read ∝ N, not file size); -f follows."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import bash, drop
from hopper.store.layout import Layout
from hopper.store.tail import read_new_lines, tail_lines


class CountingReader:
    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0

    def __call__(self, fd: int, length: int, offset: int) -> bytes:
        data = os.pread(fd, length, offset)
        self.bytes += len(data)
        self.calls += 1
        return data


def event_line(i: int) -> bytes:
    return json.dumps({"ts": "2026-11-22T12:00:00+00:00", "event": "tick", "n": i}).encode()


def test_tail_of_a_200mb_file_reads_a_block_or_two(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with path.open("wb") as fh:
        # 200 MB of real lines is slow to write; a hole of the same size (sparse, no disk)
        # followed by real lines is just as large to a reader that scans from the start.
        fh.truncate(200 * 1024 * 1024)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + b"\n".join(event_line(i) for i in range(5000)) + b"\n")
    assert path.stat().st_size > 200 * 1024 * 1024
    reader = CountingReader()
    lines, end = tail_lines(path, 10, reader=reader)
    assert [json.loads(x)["n"] for x in lines] == list(range(4990, 5000))
    assert end == path.stat().st_size
    assert reader.bytes <= 64 * 1024  # one block, out of 200 MB


def test_bytes_read_grow_with_n_not_with_the_file(tmp_path: Path) -> None:
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_bytes(b"".join(event_line(i) + b"\n" for i in range(20_000)))
    with big.open("wb") as fh:
        for _ in range(10):
            fh.write(b"".join(event_line(i) + b"\n" for i in range(20_000)))
    counts = {}
    for path in (small, big):
        for n in (1, 1000, 5000):
            reader = CountingReader()
            lines, _ = tail_lines(path, n, reader=reader, block=4096)
            assert [json.loads(x)["n"] for x in lines] == list(range(20_000 - n, 20_000))
            counts[path.name, n] = reader.bytes
    line = len(event_line(19_999)) + 1
    for n in (1, 1000, 5000):
        assert counts["small.jsonl", n] == counts["big.jsonl", n]  # file size does not matter
        assert counts["big.jsonl", n] <= n * line + 2 * 4096  # N lines plus at most two blocks


def test_tail_edge_cases(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    assert tail_lines(path, 5) == ([], 0)
    path.write_bytes(b"a\nb\nc\npartial")
    assert tail_lines(path, 2, block=2) == ([b"b", b"c"], 6)
    assert tail_lines(path, 10, block=3) == ([b"a", b"b", b"c"], 6)
    assert tail_lines(path, 0) == ([], 6)
    assert read_new_lines(path, 2) == ([b"b", b"c"], 6)


def test_events_command(layout: Layout, hopper) -> None:
    drop(layout, "ev", bash("echo hi"))
    assert hopper("run", "--until-idle").returncode == 0
    out = hopper("events", "ev", "--json")
    assert out.returncode == 0, out.stderr
    events = [json.loads(x)["event"] for x in out.stdout.splitlines()]
    assert events[0] == "claimed" and events[-1] == "finalized"
    tail = hopper("events", "ev", "--tail", "2", "--json")
    assert [json.loads(x)["event"] for x in tail.stdout.splitlines()] == events[-2:]
    human = hopper("events", "ev", "--tail", "1")
    assert "finalized" in human.stdout
    # -f on a finished job prints what is there and stops
    follow = hopper("events", "ev", "-f", "--tail", "1", timeout=20)
    assert follow.returncode == 0 and "finalized" in follow.stdout
    assert hopper("events", "ev", "--tail", "-1").returncode == 2
    assert hopper("events", "nope").returncode == 1
