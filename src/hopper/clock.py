"""Time, injected: wall time for what job.json records, monotonic for deadlines."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


def local_zone(env: Mapping[str, str] | None = None) -> tzinfo:
    """The host's time zone, aware of its clock changes: ``$TZ`` when it names a
    zone, else the zone ``/etc/localtime`` links to, else that file's rules
    (named "local time"), else UTC."""
    env = os.environ if env is None else env
    name = env.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    target = os.path.realpath("/etc/localtime")
    _, marker, key = target.partition("/zoneinfo/")
    if marker and key:
        try:
            return ZoneInfo(key)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    try:
        with open("/etc/localtime", "rb") as rules:
            return ZoneInfo.from_file(rules)
    except (OSError, ValueError):
        return UTC
