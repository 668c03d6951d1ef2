"""(exit status, what hopper asked for) -> terminal reason and a sentence. Pure."""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

from hopper.core.record import ExitStatus
from hopper.core.sizes import format_size
from hopper.core.states import Reason

BUDGET_STOP = (
    'stopped: a budget of its scope was reached (on_budget = "stop"); '
    "its budget_stop event and `hopper budgets` say which"
)


@dataclass(frozen=True)
class Outcome:
    reason: Reason
    detail: str


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(status: ExitStatus, stop_requested: Reason | None) -> Outcome:
    """Decide how a job that ran ended.

    What hopper asked for wins over how the process died: a job told to stop
    for a timeout that then exits 143 timed out; it did not fail on its own.
    """
    if status.error and not status.started:
        return Outcome(Reason.SPAWN_FAILED, f"could not start: {status.error}")
    if status.timed_out or stop_requested is Reason.TIMEOUT:
        return Outcome(Reason.TIMEOUT, "stopped: it ran past its timeout")
    if status.limit == "memory":
        return Outcome(
            Reason.MEMORY_LIMIT,
            f"stopped: its processes used more memory than memory_max{_peak(status)}",
        )
    if status.limit == "output":
        return Outcome(
            Reason.OUTPUT_LIMIT,
            f"stopped: it wrote more than output_max to job.log{_written(status)}",
        )
    if status.limit == "idle":
        return Outcome(Reason.IDLE_TIMEOUT, "stopped: it wrote nothing to job.log for idle_timeout")
    if stop_requested is Reason.ABORTED:
        return Outcome(Reason.ABORTED, "stopped: an ABORT marker was found")
    if stop_requested is Reason.SHUTDOWN:
        return Outcome(Reason.SHUTDOWN, "stopped: the watcher was shut down (on_stop = abort)")
    if stop_requested is Reason.BUDGET_EXCEEDED:
        return Outcome(Reason.BUDGET_EXCEEDED, BUDGET_STOP)
    if status.signal is not None:
        return Outcome(Reason.SIGNALED, f"killed by {signal_name(status.signal)}")
    if status.exit_code == 0:
        return Outcome(Reason.COMPLETED, "exited 0")
    return Outcome(Reason.EXIT_NONZERO, f"exited {status.exit_code}")


def _peak(status: ExitStatus) -> str:
    res = status.resources
    return f" (peak {format_size(res.peak_rss_bytes)} RSS)" if res and res.peak_rss_bytes else ""


def _written(status: ExitStatus) -> str:
    res = status.resources
    return f" ({format_size(res.output_bytes)} written)" if res and res.output_bytes else ""
