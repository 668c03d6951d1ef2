"""The session host's files: names and shapes, read and written with the stdlib.

A live session has a directory (``<root>/sessions/<name>/``, or
``runs/<id>/session/`` for an interactive job with no session name):

- ``session.json``: the host's record of the session, replaced atomically on
  every change (host pid + start time, agent pid, state, turns, cumulative
  usage, the job in progress, the agent's session id, why it ended);
- ``requests/<job id>.json``: a message for the agent, dropped by the
  executor (0600, atomic); the host takes them in job-id (claim) order and
  removes each once its turn ends;
- ``host.sock``: attach, interrupt, close (:mod:`hopper.sessionhost.client`);
- ``host.log``: the host's own diagnostics.

Each message job's run directory gets, from the host: ``turn.json`` (how the
turn ended, written durably once, like exit.json), ``terminal.cast`` (the raw
terminal as asciicast v2), ``job.log`` (readable text), ``result.md`` and
``agent.json`` (the driver's summary format, so a turn ends through the same
path as a headless agent job).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SESSION_FILE = "session.json"
REQUESTS_DIR = "requests"
SOCKET_NAME = "host.sock"
HOST_LOG = "host.log"
TURN_FILE = "turn.json"
CAST_FILE = "terminal.cast"
READ_LIMIT = 256 * 1024  # any of these files, read with a cap

# session.json ``state``
STARTING, IDLE, BUSY, CLOSING, ENDED = "starting", "idle", "busy", "closing", "ended"
LIVE_STATES = frozenset({STARTING, IDLE, BUSY, CLOSING})

# turn.json ``ended``: how a turn ended
STOP_HOOK = "stop_hook"  # the agent's Stop hook wrote its marker
SESSION_LOG = "session_log"  # the session log says the agent waits for input
TIMEOUT = "timeout"  # the job's timeout passed first
INTERRUPTED = "interrupted"  # hopper interrupt, or an ABORT of the message job
AGENT_EXITED = "agent_exited"  # the agent process ended during the turn
SESSION_ENDED = "session_ended"  # the session was closed or hit a limit during the turn
BUDGET = "budget_exceeded"  # the turn's spend reached the job's max_tokens / max_cost_usd
IDLE_TIMEOUT = "idle_timeout"  # working, yet silent for idle_timeout (on_idle = "abort")
COMPLETED_TURNS = frozenset({STOP_HOOK, SESSION_LOG})

# session.json ``ended_reason``
ENDED_IDLE = "idle"  # session_idle passed with no message: the agent ends, its id is kept
ENDED_MAX_AGE = "max_age"  # session_max passed
ENDED_MEMORY = "memory"  # the tree's RSS passed memory_max
ENDED_CLOSED = "closed"  # hopper sessions close, a double interrupt, or SIGTERM
ENDED_AGENT = "agent_exited"  # the agent process ended by itself
ENDED_JOB = "job_done"  # a session of its own (no session name): its one job ended
ENDED_FAILED = "start_failed"  # the agent could not be started


@dataclass(frozen=True)
class TurnRequest:
    """One message for the agent: ``requests/<job_id>.json``."""

    job_id: str
    run_dir: str
    text: str
    timeout: float | None = None  # seconds; the job's timeout
    cast_max: int | None = None  # bytes of terminal.cast; None: the default cap
    max_cost_usd: float | None = None  # the job's own limits, followed during the turn
    max_tokens: int | None = None
    model: str | None = None  # [agents.NAME] model: prices the tokens (the log's model wins)
    prices: dict[str, Any] = field(default_factory=dict)  # the config's [prices] rows
    idle_timeout: float | None = None  # seconds working with nothing new: on_idle
    on_idle: str | None = None  # "abort" (None too) | "nudge"
    max_nudges: int = 0  # idle nudges this turn at most
    on_dead: str | None = None  # "fail" (None too) | "resume": the agent died mid-turn
    on_error: str | None = None  # "retry" (None too) | "fail" | "pause": an API error ended it
    api_retries: int = 0  # on_error = "retry": the message typed again at most this often
    retry_backoff: float = 0.0  # seconds before the first retyping (doubling; agents/policy.py)
    session: str | None = None  # the job's session name (on_error = "pause" holds it) ...
    sessions_dir: str | None = None  # ... by a marker here (agents/sessionmap.py)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> TurnRequest | None:
        obj = _object(data)
        if obj is None:
            return None
        job_id, run_dir, text = obj.get("job_id"), obj.get("run_dir"), obj.get("text")
        if not (isinstance(job_id, str) and isinstance(run_dir, str) and isinstance(text, str)):
            return None
        prices = obj.get("prices")
        return cls(
            job_id,
            run_dir,
            text,
            _number(obj.get("timeout")),
            _int(obj.get("cast_max")),
            _number(obj.get("max_cost_usd")),
            _int(obj.get("max_tokens")),
            _str(obj.get("model")),
            {str(k): v for k, v in prices.items() if isinstance(v, dict)}
            if isinstance(prices, dict)
            else {},
            _number(obj.get("idle_timeout")),
            _str(obj.get("on_idle")),
            _int(obj.get("max_nudges")) or 0,
            _str(obj.get("on_dead")),
            _str(obj.get("on_error")),
            _int(obj.get("api_retries")) or 0,
            _number(obj.get("retry_backoff")) or 0.0,
            _str(obj.get("session")),
            _str(obj.get("sessions_dir")),
        )


@dataclass(frozen=True)
class TurnEnd:
    """``runs/<id>/turn.json``: how one turn ended, written once by the host."""

    job_id: str
    turn: int  # the session's turn number (1 for its first message)
    ended: str  # one of STOP_HOOK, SESSION_LOG, TIMEOUT, INTERRUPTED, AGENT_EXITED, SESSION_ENDED
    detail: str
    session_id: str | None
    agent_pid: int | None
    host_pid: int
    started_at: str
    finished_at: str
    usage: dict[str, float | int | None] = field(default_factory=dict)
    result: bool = False  # result.md was written

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> TurnEnd | None:
        obj = _object(data)
        if obj is None:
            return None
        try:
            return cls(
                job_id=str(obj["job_id"]),
                turn=int(obj["turn"]),
                ended=str(obj["ended"]),
                detail=str(obj.get("detail") or ""),
                session_id=_str(obj.get("session_id")),
                agent_pid=_int(obj.get("agent_pid")),
                host_pid=int(obj["host_pid"]),
                started_at=str(obj["started_at"]),
                finished_at=str(obj["finished_at"]),
                usage=_usage(obj.get("usage")),
                result=obj.get("result") is True,
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class SessionState:
    """``session.json``: the host's record of one live session."""

    name: str
    agent: str
    workdir: str
    state: str
    host_pid: int
    host_start: float | None
    started_at: str
    updated_at: str
    agent_pid: int | None = None
    turns: int = 0
    usage: dict[str, float | int | None] = field(default_factory=dict)
    job: str | None = None  # the message job in progress
    session_id: str | None = None
    last_turn_at: str | None = None
    ended_reason: str | None = None
    ended_at: str | None = None
    detail: str = ""

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> SessionState | None:
        obj = _object(data)
        if obj is None:
            return None
        try:
            return cls(
                name=str(obj["name"]),
                agent=str(obj["agent"]),
                workdir=str(obj["workdir"]),
                state=str(obj["state"]),
                host_pid=int(obj["host_pid"]),
                host_start=_number(obj.get("host_start")),
                started_at=str(obj["started_at"]),
                updated_at=str(obj["updated_at"]),
                agent_pid=_int(obj.get("agent_pid")),
                turns=int(obj.get("turns") or 0),
                usage=_usage(obj.get("usage")),
                job=_str(obj.get("job")),
                session_id=_str(obj.get("session_id")),
                last_turn_at=_str(obj.get("last_turn_at")),
                ended_reason=_str(obj.get("ended_reason")),
                ended_at=_str(obj.get("ended_at")),
                detail=str(obj.get("detail") or "")[:2000],
            )
        except (KeyError, TypeError, ValueError):
            return None


def read_small(
    path: Path | str, limit: int = READ_LIMIT, dir_fd: int | None = None
) -> bytes | None:
    """A small regular file's bytes, never through a link, never blocking; None if
    missing, not a regular file, unreadable or over ``limit``."""
    try:
        fd = os.open(
            path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def read_session(session_dir: Path) -> SessionState | None:
    data = read_small(session_dir / SESSION_FILE)
    return None if data is None else SessionState.from_json(data)


def read_turn_end(run_dir: Path) -> TurnEnd | None:
    data = read_small(run_dir / TURN_FILE)
    return None if data is None else TurnEnd.from_json(data)


def _object(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _usage(value: object) -> dict[str, float | int | None]:
    """A usage object's numeric figures (anything else in it left out)."""
    items = value.items() if isinstance(value, dict) else ()
    return {str(k): v for k, v in items if isinstance(v, int | float) and not isinstance(v, bool)}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
