"""core/outcome.classify: every branch, and what hopper asked for wins."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import pytest

from hopper.core.outcome import classify, signal_name
from hopper.core.record import ExitStatus
from hopper.core.states import Reason

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def status(**kw: object) -> ExitStatus:
    return ExitStatus(finished_at=NOW, **{"started": True, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("st", "stop", "reason", "fragment"),
    [
        (
            status(started=False, error="bash: not found"),
            None,
            Reason.SPAWN_FAILED,
            "bash: not found",
        ),
        (status(started=False, error="x"), Reason.TIMEOUT, Reason.SPAWN_FAILED, "could not start"),
        (status(exit_code=143, timed_out=True), None, Reason.TIMEOUT, "timeout"),
        (status(signal=15), Reason.TIMEOUT, Reason.TIMEOUT, "timeout"),
        (status(exit_code=0, timed_out=True), Reason.ABORTED, Reason.TIMEOUT, "timeout"),
        (status(signal=15), Reason.ABORTED, Reason.ABORTED, "ABORT"),
        (status(exit_code=0), Reason.ABORTED, Reason.ABORTED, "ABORT"),
        (status(signal=9), Reason.SHUTDOWN, Reason.SHUTDOWN, "shut down"),
        (status(signal=9), None, Reason.SIGNALED, "SIGKILL"),
        (status(signal=11), None, Reason.SIGNALED, "SIGSEGV"),
        (status(exit_code=0), None, Reason.COMPLETED, "exited 0"),
        (status(exit_code=7), None, Reason.EXIT_NONZERO, "exited 7"),
        (status(exit_code=143), None, Reason.EXIT_NONZERO, "exited 143"),
        (status(error="late error", exit_code=0), None, Reason.COMPLETED, "exited 0"),
    ],
    ids=[
        "spawn-failed",
        "spawn-failed-beats-stop",
        "timed-out-flag",
        "stop-timeout",
        "timed-out-beats-abort",
        "abort-signal",
        "abort-clean-exit",
        "shutdown",
        "signaled-kill",
        "signaled-segv",
        "completed",
        "nonzero",
        "nonzero-143-unrequested",
        "error-after-start-ignored",
    ],
)
def test_classify(st: ExitStatus, stop: Reason | None, reason: Reason, fragment: str) -> None:
    outcome = classify(st, stop)
    assert outcome.reason is reason
    assert fragment in outcome.detail


def test_signal_name() -> None:
    assert signal_name(int(signal.SIGTERM)) == "SIGTERM"
    assert signal_name(999) == "signal 999"


def test_unknown_signal_number_still_classifies() -> None:
    outcome = classify(status(signal=99), None)
    assert outcome.reason is Reason.SIGNALED and "signal 99" in outcome.detail


def test_limits_name_the_figures_and_beat_a_stop_request() -> None:
    from hopper.core.record import Resources

    used = Resources(cpu_seconds=1.0, peak_rss_bytes=300 << 20, output_bytes=5 << 20)
    memory = classify(status(signal=15, limit="memory", resources=used), None)
    assert memory.reason is Reason.MEMORY_LIMIT and "300.0M" in memory.detail
    output = classify(status(signal=9, limit="output", resources=used), Reason.ABORTED)
    assert output.reason is Reason.OUTPUT_LIMIT and "5.0M written" in output.detail
    bare = classify(status(exit_code=143, limit="memory"), None)
    assert bare.reason is Reason.MEMORY_LIMIT and bare.detail.endswith("memory_max")
    # A spawn failure or a timeout the supervisor recorded still comes first.
    assert classify(status(timed_out=True, limit="memory"), None).reason is Reason.TIMEOUT
