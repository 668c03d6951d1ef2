"""The agent's live state, as the driver sees it: ``runs/<id>/agent.state.json``.

Standard library only (written by the job driver). The driver runs inside the
job and never writes job.json (the watcher is its one writer); it replaces
this small file atomically when the state changes, and at most once a
second while output flows (for ``last_activity_at``). The watcher folds it
into job.json with each heartbeat (``hopper.agents.summary.read_live_state``).

States (``STATES``): ``starting`` (the CLI is launched, no output yet),
``working`` (output is flowing), ``waiting_for_input`` (the agent asked a
question, or was refused a permission it needs: headless, nobody answers),
``retrying`` (an API error is being retried, by the CLI or by hopper;
``error_kind`` says which), ``api_error`` (an error no retry fixes;
``error_kind``), ``idle`` (no output for a while, or the run is over).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from hopper.store.atomic import write_atomic

STATE_FILE = "agent.state.json"
STATES = ("starting", "working", "waiting_for_input", "retrying", "api_error", "idle")
ACTIVITY_WRITE_INTERVAL = 1.0


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


class LiveState:
    """Writes ``agent.state.json`` on each change of state, throttled for activity."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / STATE_FILE
        self.state = "starting"
        self.error_kind: str | None = None
        self.detail: str | None = None
        self.last_activity: float | None = None
        self._written_at = 0.0

    def set(self, state: str, error_kind: str | None = None, detail: str | None = None) -> None:
        assert state in STATES, state
        if (state, error_kind, detail) == (self.state, self.error_kind, self.detail):
            return
        self.state, self.error_kind, self.detail = state, error_kind, detail
        self._write()

    def activity(self) -> None:
        """Output arrived: ``working`` (unless an error state holds), last_activity_at now."""
        self.last_activity = time.time()
        if self.state in ("starting", "idle", "retrying", "waiting_for_input"):
            self.set("working")
        elif time.monotonic() - self._written_at >= ACTIVITY_WRITE_INTERVAL:
            self._write()

    def _write(self) -> None:
        data = {
            "agent_state": self.state,
            "error_kind": self.error_kind,
            "detail": self.detail,
            "last_activity_at": iso(self.last_activity) if self.last_activity else None,
            "updated_at": iso(time.time()),
        }
        try:
            write_atomic(self.path, json.dumps(data).encode() + b"\n", durable=False)
        except OSError:
            pass  # a full disk must not kill the agent; the state is advisory
        self._written_at = time.monotonic()
