"""The usage page's budgets in real Chromium: a bar per budget, the reached one red with
what it holds (the dashboard started with a [budgets] config)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import uvicorn
from selenium import webdriver
from selenium.webdriver.common.by import By

from hopper.config import Config
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.spend import file_spends
from hopper.web.app import create_app
from waiting import poll_until
from web.test_browser import browser, until  # noqa: F401 - the browser fixture
from web.webtools import TOKEN, free_port

CONFIG = Config.model_validate(
    {"budgets": {"timezone": "UTC", "daily_usd": 50, "groups": {"app": {"daily_usd": 1}}}}
)


@pytest.fixture
def served(layout: Layout) -> Iterator[str]:
    port = free_port()
    app = create_app(layout, TOKEN, CONFIG, fallback=30.0)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll_until(lambda: server.started, 20, "uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=20)


def put(layout: Layout, n: int, state: JobState, usage: Usage | None) -> JobRecord:
    now = datetime.now(UTC)
    done = state is JobState.SUCCEEDED
    rec = JobRecord(
        id=f"{now:%Y%m%d-%H%M%S}-{n:03d}-j{n}-0001",
        name=f"j{n}",
        state=state,
        reason=Reason.COMPLETED if done else None,
        agent="claude",
        host="h",
        inbox_path=f"inbox/app/j{n}.prompt.md",
        group="app",
        created_at=now,
        finished_at=now if done else None,
        usage=usage,
    )
    layout.run_dir(rec.id).mkdir(parents=True)
    write_record(layout.run_dir(rec.id), rec, durable=False)
    return rec


def test_the_usage_page_draws_a_bar_per_budget(
    layout: Layout,
    served: str,
    browser: webdriver.Chrome,  # noqa: F811
) -> None:
    file_spends(layout, [put(layout, 1, JobState.SUCCEEDED, Usage(cost_usd=1.25))])
    put(layout, 2, JobState.QUEUED, None)
    browser.get(f"{served}/?token={TOKEN}")
    until(browser, lambda d: "?token" not in d.current_url, "the token to leave the URL")
    browser.get(f"{served}/ui/#/usage")
    until(browser, lambda d: d.find_element(By.ID, "budgets").is_displayed(), "the budgets")
    rows = browser.find_elements(By.CSS_SELECTOR, "#budget-bars .budget")
    assert len(rows) == 2
    every, app = rows
    assert "all · day: $1.25 of $50.00" in every.text
    assert "reached" not in (every.get_attribute("class") or "")
    assert "group:app · day: $1.25 of $1.00 · 1 held · resets 00:00 UTC" in app.text
    assert "reached" in (app.get_attribute("class") or "")
    assert "raise [budgets.groups.app] daily_usd" in app.text
    meter = app.find_element(By.TAG_NAME, "meter")
    assert (meter.get_attribute("max"), meter.get_attribute("value")) == ("1", "1")
