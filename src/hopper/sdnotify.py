"""The sd_notify(3) protocol: tell systemd we are ready, alive, reloading or stopping.

Theory of operation
-------------------
systemd passes a Type=notify service the address of a datagram socket in
``NOTIFY_SOCKET``: a filesystem path (``/run/systemd/notify``) or, when it starts
with ``@``, a name in the Linux abstract socket namespace (the ``@`` stands for a
leading NUL byte). A notification is one ``AF_UNIX``/``SOCK_DGRAM`` datagram of
newline-separated ``KEY=VALUE`` assignments, for example::

    READY=1                     start-up finished (Type=notify leaves "activating")
    STATUS=3 running, 1 queued  free text shown by ``systemctl status``
    WATCHDOG=1                  keep-alive; must arrive within WatchdogSec=
    RELOADING=1                 a reload began; send READY=1 again when it is done.
    MONOTONIC_USEC=...          With RELOADING=1: CLOCK_MONOTONIC in microseconds,
                                required by Type=notify-reload (systemd >= 253),
                                ignored by older versions
    STOPPING=1                  shutdown began
    EXTEND_TIMEOUT_USEC=...     push the start/stop timeout out by this much

systemd checks who sent a datagram against ``NotifyAccess=`` (``main``: only the
main PID), so a child that inherits ``NOTIFY_SOCKET`` cannot speak for the
service. Jobs should still not see these variables: :data:`ENV_KEYS` lists the ones
to drop from a child's environment.

The watchdog is armed by ``WatchdogSec=``; systemd then exports ``WATCHDOG_USEC``
(the timeout) and ``WATCHDOG_PID`` (the process it is meant for). If that PID is
not ours, the variables were inherited and the watchdog is not our business. The
service must send ``WATCHDOG=1`` more often than the timeout; half of it is the
customary interval (:meth:`Notifier.watchdog_interval`). This module starts no
thread: the caller's main loop pings only while it is actually healthy, so a hung
loop is exactly what the watchdog catches.

Without ``NOTIFY_SOCKET`` (started by hand, in tests) every method is a no-op.
Sending never raises: a service must not die because its supervisor's socket
went away. The first failure is logged at WARNING, later ones at DEBUG.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

__all__ = ["ENV_KEYS", "Notifier"]

logger = logging.getLogger(__name__)

#: Variables systemd sets for the notify protocol; strip them from job environments.
ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

# A datagram to a stuck receiver can block; the main loop must not hang on it.
_SEND_TIMEOUT_S = 1.0


class Notifier:
    """Sends sd_notify messages to the socket named in an environment.

    ``environ`` defaults to :data:`os.environ` and is read once, at construction.
    Every sending method returns True when a datagram was sent, False when there
    is nothing to send to (no socket, watchdog disabled) or sending failed.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = _parse_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = _parse_watchdog(env)
        self._warned = False

    @property
    def enabled(self) -> bool:
        """True when a notify socket is configured."""
        return self._address is not None

    @property
    def watchdog_enabled(self) -> bool:
        """True when systemd armed a watchdog for this very process."""
        return self._address is not None and self._watchdog_usec is not None

    def watchdog_interval(self) -> float | None:
        """Seconds between keep-alives (half of WATCHDOG_USEC), or None if disabled."""
        if not self.watchdog_enabled or self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2_000_000

    def ready(self, status: str | None = None) -> bool:
        """Start-up (or a reload) is complete: READY=1, optionally with a STATUS."""
        if status is None:
            return self.notify(READY=1)
        return self.notify(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        """One line of free text for ``systemctl status`` (newlines become spaces)."""
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        """Keep-alive: WATCHDOG=1. A no-op when the watchdog is not ours."""
        if not self.watchdog_enabled:
            return False
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown began: STOPPING=1."""
        if status is None:
            return self.notify(STOPPING=1)
        return self.notify(STOPPING=1, STATUS=status)

    def reloading(self, monotonic_usec: int | None = None) -> bool:
        """A reload began: RELOADING=1 and MONOTONIC_USEC (default: now).

        ``monotonic_usec`` is CLOCK_MONOTONIC in microseconds, the clock systemd
        compares it with. Send :meth:`ready` once the reload is done.
        """
        if monotonic_usec is None:
            monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify(RELOADING=1, MONOTONIC_USEC=monotonic_usec)

    def extend_timeout(self, usec: int) -> bool:
        """Ask for ``usec`` more microseconds before the start/stop timeout fires."""
        return self.notify(EXTEND_TIMEOUT_USEC=usec)

    def notify(self, **fields: str | int) -> bool:
        """Send one datagram of ``KEY=VALUE`` lines; never raises.

        Values are converted with ``str``; newlines in them are replaced by spaces
        because a newline ends an assignment in the protocol.
        """
        if self._address is None or not fields:
            return False
        payload = "\n".join(f"{key}={_one_line(value)}" for key, value in fields.items())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.settimeout(_SEND_TIMEOUT_S)
                sock.sendto(payload.encode("utf-8", errors="replace"), self._address)
        except OSError as exc:
            self._log_failure(exc)
            return False
        return True

    def _log_failure(self, exc: OSError) -> None:
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        logger.log(level, "sd_notify send failed address=%r error=%s", self._address, exc)


def _parse_address(value: str) -> bytes | None:
    """The socket address for NOTIFY_SOCKET, or None if unset or unusable."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return os.fsencode(value)
    # systemd >= 254 may also hand out "vsock:CID:PORT"; only a VM guest sees that.
    logger.warning("sd_notify disabled: unsupported NOTIFY_SOCKET=%r", value)
    return None


def _parse_watchdog(env: Mapping[str, str]) -> int | None:
    """WATCHDOG_USEC as an int if it is meant for this process, else None."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid is not None:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec


def _one_line(value: str | int) -> str:
    return str(value).replace("\r", " ").replace("\n", " ")
