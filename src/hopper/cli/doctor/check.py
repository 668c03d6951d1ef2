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


#: How to free space on the root, for the disk and degraded checks (docs/operations.md,
#: "A full disk", says the same at length). Name only commands hopper has.
FIX_FREE_SPACE = (
    "free space: abort a runaway job (hopper abort ID), or remove old finished jobs "
    "(hopper prune --older-than 30d --dry-run, then without --dry-run; "
    "docs/operations.md: A full disk)"
)
