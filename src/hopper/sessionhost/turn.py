"""One message's turn: its files in the job's run directory, and how it ended.

The host types the message, then feeds the turn what the terminal shows
(terminal.cast), what the agent's session log says (job.log's readable
text, the result, the usage) and finally how the turn ended: ``turn.json``
durably last, after ``result.md`` and ``agent.json`` (the driver's summary
format, so the watcher files the job as it files a headless agent's), so a
reader that sees turn.json sees the rest. Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopper.agents.livestate import LiveState
from hopper.core.prices import Limits, Price, job_spend, limit_reached
from hopper.proc.rundir import RunDir
from hopper.sessionhost.cast import Cast
from hopper.sessionhost.contract import (
    BUDGET,
    CAST_FILE,
    COMPLETED_TURNS,
    TURN_FILE,
    TurnEnd,
    TurnRequest,
)

LOG_FILE = "job.log"
EVENTS_FILE = "events.jsonl"
RESULT_FILE = "result.md"
SUMMARY_FILE = "agent.json"
RESULT_LIMIT = 1024 * 1024  # result.md's bytes at most

Usage = dict[str, float | int | None]


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


def usage_delta(
    before: Mapping[str, float | int | None], after: Mapping[str, float | int | None]
) -> Usage:
    """The turn's figures: the difference of the session's cumulative ones."""
    out: Usage = {}
    for key, value in after.items():
        if value is None:
            continue
        prior = before.get(key) or 0
        diff = value - prior
        out[key] = round(diff, 6) if isinstance(diff, float) else diff
    return out


def log_model(entries: list[Mapping[str, Any]]) -> str | None:
    """The model the session log's last assistant entry names (Claude's ``message.model``)."""
    for entry in reversed(entries):
        message = entry.get("message")
        model = message.get("model") if isinstance(message, Mapping) else None
        if entry.get("type") == "assistant" and isinstance(model, str) and model:
            return model
    return None


def over_budget(
    request: TurnRequest, usage: Mapping[str, float | int | None], model: str | None, agent: str
) -> str | None:
    """The detail of the job's own limit the turn's ``usage`` has reached, or None.
    Claude's session log carries no cost: the tokens are priced by the config's
    ``[prices]`` row for ``model`` (the log's), else the request's (``[agents.NAME] model``)."""
    limits = Limits(request.max_cost_usd, request.max_tokens)
    if not limits.any:
        return None
    prices: dict[str, Price] = {}
    for name, row in request.prices.items():
        try:
            prices[name] = Price.of(row)
        except (KeyError, TypeError, ValueError):
            continue  # not a price row: the cost stays unknown, tokens still count
    spent = job_spend(usage, model or request.model, prices)
    if spent.cost_usd is None and request.model and model != request.model:
        spent = job_spend(usage, request.model, prices)  # the log's model has no row
    return limit_reached(limits, spent, agent)


@dataclass
class Turn:
    request: TurnRequest
    number: int
    started: float  # monotonic
    started_at: str
    deadline: float | None  # monotonic: the job's timeout
    markers: frozenset[str]  # the agent's markers before the turn
    usage_before: Usage
    files: RunDir
    cast: Cast
    log_fd: int
    live: LiveState  # agent.state.json: the watcher folds it into job.json
    result: str | None = None
    last_change: float = 0.0  # monotonic: when the agent's log last grew
    enter: bytes = b""  # the Enter still to type after the paste
    typed_at: float = 0.0  # monotonic: when the message (or a nudge) was last typed
    nudges: int = 0  # idle nudges typed this turn
    typed: list[str] = field(default_factory=list)  # ... their texts
    resumed: bool = False  # on_dead = "resume": the agent was restarted once this turn
    retype: bool = False  # ... and the message is to be typed again once it is ready
    marker_at: float | None = None  # monotonic: when the Stop hook's marker appeared
    retries: int = 0  # on_error = "retry": times the message was typed again after an API error
    retry_at: float | None = None  # monotonic: when it is typed again (hopper's backoff)
    ended: str | None = None
    detail: str = ""
    entries: list[Mapping[str, Any]] = field(default_factory=list)  # the log's, this turn

    @classmethod
    def begin(
        cls,
        request: TurnRequest,
        number: int,
        markers: frozenset[str],
        usage: Usage,
        size: tuple[int, int],
        now: float,
    ) -> Turn:
        files = RunDir(request.run_dir)
        cast = Cast(files, CAST_FILE, size, request.cast_max, start=now)
        log_fd = files.open_log(str(Path(request.run_dir) / LOG_FILE))
        deadline = None if request.timeout is None else now + request.timeout
        turn = cls(
            request,
            number,
            now,
            iso(time.time()),
            deadline,
            markers,
            dict(usage),
            files,
            cast,
            log_fd,
            LiveState(Path(request.run_dir)),
            last_change=now,
            typed_at=now,
        )
        turn.live.set("working")
        return turn

    def log(self, text: str) -> None:
        try:
            os.write(self.log_fd, text.encode(errors="replace"))
        except OSError:
            pass  # disk full: the turn goes on; turn.json is retried until it lands

    def event(self, name: str, **fields: object) -> None:
        """A line of the job's events.jsonl (one append, as the driver writes its own)."""
        line = json.dumps({"ts": iso(time.time()), "event": name, **fields}) + "\n"
        try:
            self.files.append(EVENTS_FILE, line.encode())
        except OSError:
            pass  # advisory: job.log says it too

    def finish(
        self,
        ended: str,
        detail: str,
        session_id: str | None,
        agent_pid: int | None,
        usage_after: Usage,
        error: str | None = None,
        paused: str | None = None,
    ) -> TurnEnd:
        """Write result.md and agent.json; the record :meth:`commit` then writes.
        ``error``: the kind of the API error that ended a completed turn (the job fails
        ``agent_error``); ``paused``: the session that error paused (on_error = "pause")."""
        self.ended, self.detail = ended, detail
        self.cast.close()
        usage = usage_delta(self.usage_before, usage_after)
        wrote_result = False
        if self.result:
            data = self.result.encode(errors="replace")[:RESULT_LIMIT]
            try:
                self.files.replace(RESULT_FILE, data + b"\n", durable=False)
                wrote_result = True
            except OSError:
                pass
        done = ended in COMPLETED_TURNS
        failed = done and error is not None
        outcome = ("agent_error" if failed else "succeeded") if done else None
        summary: dict[str, object] = {
            "outcome": BUDGET if ended == BUDGET else outcome,
            "detail": detail,
            "error_kind": error if failed else None,
            "session_id": session_id,
            "agent_pid": agent_pid,  # the process that ended the turn (a resume's new one)
            "turns": self.number,
            "usage": {k: v for k, v in usage.items() if v is not None and v >= 0},
            "agent_state": ("api_error" if failed else "waiting_for_input") if done else "idle",
            "session_paused": paused,
        }
        self.live.set(str(summary["agent_state"]), error if failed else None)
        if wrote_result:
            summary["result_path"] = RESULT_FILE
        try:
            self.files.replace(SUMMARY_FILE, json.dumps(summary).encode() + b"\n", durable=False)
        except OSError:
            pass
        self.log(f"[hopper] turn {self.number} ended: {ended}{': ' + detail if detail else ''}\n")
        record = TurnEnd(
            job_id=self.request.job_id,
            turn=self.number,
            ended=ended,
            detail=detail,
            session_id=session_id,
            agent_pid=agent_pid,
            host_pid=os.getpid(),
            started_at=self.started_at,
            finished_at=iso(time.time()),
            usage=usage,
            result=wrote_result,
        )
        return record

    def commit(self, record: TurnEnd) -> None:
        """turn.json, durably (retried a few times on a full disk): the turn is over."""
        delay = 0.1
        for _ in range(20):
            if self.files.gone():
                break  # the run directory was deleted: the watcher files the job lost
            try:
                self.files.replace(TURN_FILE, record.to_json(), durable=True)
                break
            except OSError:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            os.close(self.log_fd)
        except OSError:
            pass
        os.close(self.files.fd)
