"""A budget reached: told once, through the completion hooks and the webhook.

The watcher that first sees a budget reached in a period (budgetwatch.py: the
one that makes its marker) calls :func:`announce`: a ``budget_reached`` event
in the events.jsonl of the job whose spend reached it, then ``[hooks]
on_budget`` (an argv template: ``${budget.scope}``, ``${budget.period}``,
``${budget.unit}``, ``${budget.limit}``, ``${budget.spent}``,
``${budget.resets}``, ``${budget.reason}``, and that job's ``${job.id}``,
``${job.name}``, ``${job.group}``), and the webhook with ``"event":
"budget_reached"``. Both run on the hooks' thread, like a job's hooks, with
their outcome recorded in that job's events.jsonl (``hook_ok`` /
``hook_failed``, ``webhook_delivered`` / ``webhook_failed``).
"""

from __future__ import annotations

import json
import logging
import secrets
from datetime import datetime, tzinfo
from pathlib import Path

from hopper.config import Hooks
from hopper.core.budgets import Budget, amount, reason, reset_text
from hopper.core.templates import expand_argv, template_values
from hopper.errors import JobFileCorrupt
from hopper.hooks import HookCall, HookRunner, webhook_options
from hopper.store import ledger
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.webhook import Delivery, load_secret

log = logging.getLogger(__name__)


def values(budget: Budget, zone: tzinfo) -> dict[str, str]:
    """The ``${budget.*}`` values of the on_budget hook."""
    rule = budget.rule
    return {
        "budget.scope": rule.scope,
        "budget.period": rule.period,
        "budget.unit": rule.unit,
        "budget.limit": f"{rule.limit:g}",
        "budget.spent": f"{budget.spent:.6g}",
        "budget.resets": reset_text(budget, zone),
        "budget.reason": reason(budget, zone),
    }


def body(budget: Budget, zone: tzinfo, job_id: str, delivery: str) -> bytes:
    """The webhook's JSON body for a budget reached."""
    rule = budget.rule
    return json.dumps(
        {
            "event": "budget_reached",
            "delivery": delivery,
            "budget": {
                "scope": rule.scope,
                "period": rule.period,
                "unit": rule.unit,
                "limit": rule.limit,
                "spent": budget.spent,
                "since": budget.since.isoformat(),
                "resets_at": budget.resets_at.isoformat(),
                "resets": reset_text(budget, zone),
                "key": rule.key,
                "text": f"{amount(budget.spent, rule.unit)} of {amount(rule.limit, rule.unit)}",
                "reason": reason(budget, zone),
            },
            "job": {"id": job_id},
        }
    ).encode()


def announce(
    layout: Layout, budget: Budget, zone: tzinfo, conf: Hooks, runner: HookRunner, now: datetime
) -> None:
    """Record the budget reached in its crossing job's events and fire the hooks once."""
    job_id = budget.crossed_by
    if job_id is None:
        return
    run_dir = layout.run_dir(job_id)
    try:
        record = read_record(run_dir)
        ledger.note(
            run_dir, "budget_reached", now, scope=budget.rule.scope, why=reason(budget, zone)
        )
    except (OSError, JobFileCorrupt) as exc:  # pruned, or unreadable: nowhere to hang the news
        log.warning(
            "budget reached (%s); its job %s cannot carry the hooks: %s",
            budget.rule.key,
            job_id,
            exc,
        )
        return
    timeout = conf.timeout
    if conf.on_budget:
        argv = expand_argv(
            conf.on_budget, {**template_values(record, run_dir), **values(budget, zone)}
        )
        runner.submit([HookCall("on_budget", argv, None, record, run_dir, timeout)])
    if conf.webhook:
        url = conf.webhook
        options = webhook_options(conf)

        def send() -> None:  # on the hooks' thread: the secret file is read there
            delivery_id = f"budget.{job_id}.{secrets.token_hex(4)}"
            runner.webhooks.send(
                Delivery(
                    id=delivery_id,
                    job_id=job_id,
                    url=url,
                    run_dir=Path(run_dir),
                    body=body(budget, zone, job_id, delivery_id),
                    secret=load_secret(options),
                    timeout=timeout,
                    options=options,
                )
            )

        runner.submit([send])
