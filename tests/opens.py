"""What a test's code opens by name: ``os.open`` calls without ``dir_fd``, noted."""

from __future__ import annotations

import os

import pytest


def opened_by_name(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on (the test's monkeypatch), each path ``os.open`` gets without a
    ``dir_fd`` (a lookup by name from the root or the cwd), in order."""
    opened: list[str] = []
    real_open = os.open

    def spy(path: object, *args: object, **kw: object) -> int:
        if kw.get("dir_fd") is None:
            opened.append(os.fsdecode(path))  # type: ignore[arg-type]
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    return opened
