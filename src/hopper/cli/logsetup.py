"""The watcher's log lines on stderr: one record, one line, escaped; with syslog
priority prefixes when stderr is the journal.

Under systemd, stderr is a stream into journald, which reads a ``<N>`` at the
start of each line as that line's priority (``SyslogLevelPrefix=yes``, the
default; sd-daemon(3)): ``journalctl -p warning -u hopper`` then shows the
warnings and errors alone, in colour. systemd tells a process its stderr is that
stream by ``JOURNAL_STREAM=<device>:<inode>`` (systemd.exec(5)); the variable is
inherited by children, so it counts only when it matches stderr itself — a
``hopper run`` started from a shell inside a unit, or with stderr redirected,
writes plain lines.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from hopper.core.terminal import terminal_safe

# syslog(3) priorities by logging level: crit, err, warning, info, debug
PRIORITIES = (
    (logging.CRITICAL, 2),
    (logging.ERROR, 3),
    (logging.WARNING, 4),
    (logging.INFO, 6),
)
DEBUG_PRIORITY = 7


def priority(level: int) -> int:
    """The syslog priority of a logging level (a level between two takes the lower's)."""
    return next((pri for at, pri in PRIORITIES if level >= at), DEBUG_PRIORITY)


def stderr_is_journal(environ: Mapping[str, str], fd: int = 2) -> bool:
    """Does ``JOURNAL_STREAM`` name the file ``fd`` is (device and inode, decimal)?"""
    value = environ.get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


class LineFormatter(logging.Formatter):
    """One record, one line: log lines quote inbox names, whose control characters
    (a newline too: it would forge a line of the journal) reach stderr escaped. With
    ``journal``, each line (a traceback's too) starts with the record's priority."""

    def __init__(self, fmt: str, *, journal: bool = False) -> None:
        super().__init__(fmt)
        self.journal = journal

    def formatMessage(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return terminal_safe(super().formatException(ei), lines=True)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if not self.journal:
            return text
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))


def stderr_handler(environ: Mapping[str, str]) -> logging.Handler:
    """A handler for stderr: priority prefixes if stderr is the journal."""
    handler = logging.StreamHandler()  # sys.stderr
    journal = stderr_is_journal(environ, handler.stream.fileno())
    handler.setFormatter(LineFormatter("%(levelname)s %(name)s: %(message)s", journal=journal))
    return handler


def lean_records() -> None:
    """Log records made without what no watcher line shows (the logging HOWTO's
    "Optimization"): the caller's file and line (a walk up the stack, ~9 frames
    a record), the thread, the process id (a getpid(2) each) and the
    multiprocessing name. The format above uses none of them; three lines per job
    (queued, running, ended) made each of these every time."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
