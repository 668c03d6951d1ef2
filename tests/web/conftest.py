"""Fixtures for the dashboard's tests (helpers in webtools.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed: pip install -e '.[dev]'")

from starlette.testclient import TestClient

from hopper.store.layout import Layout
from hopper.web.app import create_app
from web.webtools import TOKEN, LiveServer, Stream


@pytest.fixture
def app_client(layout: Layout) -> Iterator[TestClient]:
    """The app in-process, lifespan run; no credentials set."""
    with TestClient(create_app(layout, TOKEN), base_url="http://127.0.0.1:8642") as client:
        yield client


@pytest.fixture
def client(app_client: TestClient) -> TestClient:
    """The app in-process with the Bearer header."""
    app_client.headers["authorization"] = f"Bearer {TOKEN}"
    return app_client


@pytest.fixture
def streams() -> Iterator[list[Stream]]:
    """SSE streams a test opened; closed after the server has stopped (which ends them)."""
    opened: list[Stream] = []
    yield opened
    for s in opened:
        s.close()


@pytest.fixture
def live(layout: Layout, streams: list[Stream]) -> Iterator[LiveServer]:
    """The app under a real uvicorn on 127.0.0.1; the rescan fallback far away (30 s), so
    what a test sees within seconds came from inotify."""
    with LiveServer(layout) as server:
        yield server
