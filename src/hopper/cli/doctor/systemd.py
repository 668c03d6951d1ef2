"""The check of systemd's notify socket as this shell sees it."""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Mapping

from hopper.cli.doctor.check import Check, ok


def check_notify_socket(env: Mapping[str, str]) -> Check:
    value = env.get("NOTIFY_SOCKET", "")
    if not value:
        if env.get("WATCHDOG_USEC"):
            return Check(
                "notify",
                "warn",
                "WATCHDOG_USEC is set without NOTIFY_SOCKET: a leftover from a service's env",
                "unset WATCHDOG_USEC WATCHDOG_PID in this shell",
            )
        return ok("notify", "NOTIFY_SOCKET not set (normal outside systemd)")
    if value.startswith("@"):
        return ok("notify", f"NOTIFY_SOCKET={value} (abstract socket)")
    if not value.startswith("/"):
        return Check(
            "notify",
            "warn",
            f"NOTIFY_SOCKET={value!r} is not a form hopper supports (a path or @name)",
            "hopper run will not notify systemd; use Type=notify with a local socket",
        )
    try:
        is_socket = stat_mod.S_ISSOCK(os.stat(value).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        return Check(
            "notify",
            "warn",
            f"NOTIFY_SOCKET={value} is not a socket: a hopper run started from here "
            "would notify nobody",
            "unset NOTIFY_SOCKET in this shell (it leaked from a service's environment)",
        )
    return ok("notify", f"NOTIFY_SOCKET={value} is a socket")
