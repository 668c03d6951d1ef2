"""``GET /api/budgets``: the rows of ``hopper budgets --json``, behind the same gate."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from hopper.config import Config
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.spend import file_spends
from hopper.web.app import create_app
from web.webtools import TOKEN

CONFIG = Config.model_validate(
    {"budgets": {"timezone": "UTC", "daily_usd": 50, "groups": {"app": {"daily_usd": 1}}}}
)


def record(n: int, state: JobState, usage: Usage | None) -> JobRecord:
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
    return rec


@pytest.fixture
def budget_client(layout: Layout) -> Iterator[TestClient]:
    with TestClient(create_app(layout, TOKEN, CONFIG), base_url="http://127.0.0.1:8642") as c:
        yield c


def put(layout: Layout, rec: JobRecord) -> None:
    run_dir = layout.run_dir(rec.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, rec, durable=False)


def test_budgets_with_spend_held_jobs_and_reset(layout: Layout, budget_client: TestClient) -> None:
    spent = record(1, JobState.SUCCEEDED, Usage(cost_usd=1.5, input_tokens=10))
    put(layout, spent)
    file_spends(layout, [spent])
    put(layout, record(2, JobState.QUEUED, None))
    assert budget_client.get("/api/budgets").status_code == 401  # the token gate
    budget_client.headers["authorization"] = f"Bearer {TOKEN}"
    body = budget_client.get("/api/budgets").json()
    assert (body["timezone"], body["on_budget"]) == ("UTC", "finish")
    rows = {r["scope"]: r for r in body["budgets"]}
    assert (rows["all"]["spent"], rows["all"]["reached"]) == (1.5, False)
    app = rows["group:app"]
    assert (app["spent"], app["limit"], app["reached"], app["held"]) == (1.5, 1.0, True, 1)
    assert app["resets"] == "00:00 UTC"
    assert app["reason"] == (
        "waiting: group app spent $1.50 of $1.00 today; resets 00:00 UTC; "
        "raise [budgets.groups.app] daily_usd"
    )


def test_no_budgets_is_an_empty_list(client: TestClient) -> None:
    assert client.get("/api/budgets").json() == {
        "timezone": None,
        "on_budget": None,
        "budgets": [],
    }
