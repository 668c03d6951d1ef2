"""proc/writeall.py: every byte written, however few each os.write takes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from hopper.proc import writeall
from hopper.proc.writeall import write_all


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_write = os.write

    def one_byte(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(writeall.os, "write", one_byte)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        write_all(fd, b"hello")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"hello"
    assert calls == [5, 4, 3, 2, 1]


def test_the_failing_write_raises_and_nothing_more_is_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_write = os.write

    def fill(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data[:2]))

    monkeypatch.setattr(writeall.os, "write", fill)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError) as caught:
            write_all(fd, b"hello")
    finally:
        os.close(fd)
    assert caught.value.errno == errno.ENOSPC
    assert (path.read_bytes(), calls) == (b"he", [5, 3])


def test_nothing_to_write_makes_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writeall.os, "write", lambda *a: pytest.fail("os.write called"))
    write_all(-1, b"")
