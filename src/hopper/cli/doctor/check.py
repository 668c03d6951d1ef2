"""What a doctor check returns: ok, warn or fail, a one-line finding, and a fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    fix: str = ""


def ok(name: str, message: str) -> Check:
    return Check(name, "ok", message)
