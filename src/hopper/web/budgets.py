"""``GET /api/budgets``: each budget's limit, spend this period, held jobs and reset time.

The same rows as ``hopper budgets --json`` (hopper/budgetreport.py), from the
root's spend ledger and the config the dashboard was started with; the usage
page draws a bar per budget from them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hopper.budgetreport import BudgetReport, queued_job_texts, report
from hopper.config import Config
from hopper.store.index import JobIndex
from hopper.store.layout import Layout
from hopper.web.catalog import Catalog


async def budgets(request: Request) -> Response:
    config: Config = request.app.state.config
    layout: Layout = request.app.state.layout
    if not config.budgets.all_rules():
        body: dict[str, object] = {"timezone": None, "on_budget": None, "budgets": []}
        return JSONResponse(body, headers={"cache-control": "no-store"})

    def build(index: JobIndex) -> BudgetReport:
        Catalog.summaries(index)  # refreshed: the queued jobs as they are now
        return report(layout, config.budgets, datetime.now(UTC), queued_job_texts(index))

    catalog: Catalog = request.app.state.catalog
    found = await catalog.call(build)
    return JSONResponse(found.as_json(), headers={"cache-control": "no-store"})
