"""``hopper schema``: the JSON Schema of job.json."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hopper.core.record import JobRecord


def job_schema_text() -> str:
    return json.dumps(JobRecord.model_json_schema(), indent=2, sort_keys=True) + "\n"


def register(sub: Any) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of job.json")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    print(job_schema_text(), end="")
    return 0
