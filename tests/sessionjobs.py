"""Set-up shared by the interactive-job tests through a real watcher: the fake agent's
(tests/test_session_jobs.py) and the real Claude CLIs' (tests/agents/test_interactive_*.py).

A plugin of tests/conftest.py, so its fixtures reach both folders: ``hosts`` ends every
session host under the test's root afterwards (SIGKILL to its group), ``work`` is a
workdir. :func:`find`, :func:`running` and :func:`ended` wait for a job by name.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopper.core.record import JobRecord
from hopper.sessionhost import contract as c
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from waiting import poll_until

WAIT = 120.0
ENDED = ("succeeded", "failed", "aborted")


@pytest.fixture
def hosts(layout: Layout) -> Iterator[None]:
    """Every session host under the root is ended after the test (SIGKILL to its group)."""
    yield
    for state_file in [*layout.root.glob("sessions/*/session.json"),
                       *layout.root.glob("runs/*/session/session.json")]:  # fmt: skip
        state = c.read_session(state_file.parent)
        if state is not None:
            try:
                os.killpg(state.host_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def find(layout: Layout, name: str, states: tuple[str, ...], wait: float = WAIT) -> JobRecord:
    """The record of job ``name`` once it is in one of ``states``."""

    def look() -> JobRecord | None:
        for run in layout.runs.iterdir():
            try:
                rec = read_record(run)
            except Exception:
                continue
            if rec.name == name and rec.state in states:
                return rec
        return None

    return poll_until(look, wait, f"job {name} {states}")


def running(layout: Layout, name: str, wait: float = WAIT) -> JobRecord:
    return find(layout, name, ("running",), wait)


def ended(layout: Layout, name: str, wait: float = WAIT) -> JobRecord:
    return find(layout, name, ENDED, wait)
