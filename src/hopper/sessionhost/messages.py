"""A live session's messages: the next request taken, typed, its turn watched to its end.

The host takes the first request in job-id order once the agent is ready,
types it (the paste, then its Enter once the screen has taken it), and
watches the turn: the session log read every :data:`LOG_SCAN` seconds
(job.log's text, the usage, the agent's live state, the job's spending
limits), then the verdict (core/sessions.py): the Stop hook's marker, the log
showing the agent waiting, an API error (policies.py), else the timeout or
idleness. The turn's end itself is the host's (``Host._end_turn``).
Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopper.core import sessions as verdicts
from hopper.errors import HopperError
from hopper.sessionhost import contract as c
from hopper.sessionhost import policies
from hopper.sessionhost.timing import (
    ENTER_MAX,
    ENTER_QUIET,
    LOG_SCAN,
    MARKER_GRACE,
    READY_FALLBACK,
    READY_QUIET,
    READY_SETTLED,
    REQUEST_SCAN,
)
from hopper.sessionhost.turn import Turn, log_model, over_budget, usage_delta

if TYPE_CHECKING:
    from hopper.sessionhost.host import Host


def pending(host: Host) -> c.TurnRequest | None:
    try:
        names = sorted(os.listdir(host.session_dir / c.REQUESTS_DIR))
    except OSError:
        return None
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        data = c.read_small(host.session_dir / c.REQUESTS_DIR / name)
        req = c.TurnRequest.from_json(data) if data is not None else None
        if req is None or req.job_id in host.done_jobs:
            continue
        if c.read_turn_end(Path(req.run_dir)) is not None:
            drop_request(host, req.job_id)  # ended before a restart of ours
            continue
        return req
    return None


def drop_request(host: Host, job_id: str) -> None:
    try:
        os.unlink(host.session_dir / c.REQUESTS_DIR / f"{job_id}.json")
    except OSError:
        pass


def turns(host: Host, now: float) -> None:
    if host.turn is not None:
        watch(host, now)
        return
    if now < host.next_requests:
        return
    host.next_requests = now + REQUEST_SCAN
    if host.owed and not owed_answered(host, now):
        return
    if not host.ready and host.agent.ready(bytes(host.screen)):
        host.ready = True  # ready after a quiet spell: no new output to look at
        if host.state.state == c.STARTING:
            host.save(state=c.IDLE)
    settled = host.last_output > host.unready_at and now - host.last_output >= READY_SETTLED
    if not host.ready and host.state.state != c.STARTING and settled:
        host.ready = True
    if not host.ready and now - host.unready_at >= READY_FALLBACK:
        host.note(f"the agent never looked ready in {READY_FALLBACK:.0f} s: typing anyway")
        host.ready = True
    if not host.ready or now - host.last_output < READY_QUIET:
        return
    req = pending(host)
    if req is None:
        return
    begin(host, req, now)


def owed_answered(host: Host, now: float) -> bool:
    """Whether the nudges the last turn left queued have had their turns (a new Stop
    marker each), or :data:`READY_FALLBACK` has passed: a message typed sooner would
    be queued behind them, and their Stop taken for its own."""
    seen = markers(host) - host.owed_markers
    host.owed_markers |= seen
    host.owed = max(0, host.owed - len(seen))
    if host.owed and now - host.owed_since < READY_FALLBACK:
        return False
    if host.owed:
        host.note(f"{host.owed} queued nudge(s) not answered in {READY_FALLBACK:.0f} s: going on")
    host.owed = 0
    host.ready = True  # the Stop hook ran: the agent is back at its prompt
    return True


def markers(host: Host) -> frozenset[str]:
    return frozenset(str(p) for p in host.agent.markers(host.session_dir))


def read_log(host: Host) -> tuple[list[str], list[Any]]:
    """job.log's lines for the log's new entries, and the entries."""
    try:
        view = host.agent.read_log(host.log.session_id, host.log.offset)
    except (OSError, ValueError, HopperError) as exc:
        host.note(f"cannot read the agent's session log: {exc}")
        return [], []
    lines, _ = host.log.feed(view)
    entries = getattr(view, "entries", None) or []
    return lines, [e for e in entries if isinstance(e, Mapping)]


def begin(host: Host, req: c.TurnRequest, now: float) -> None:
    assert host.pty is not None
    read_log(host)  # up to now: the turn's usage starts here
    number = host.state.turns + 1
    try:
        turn = Turn.begin(
            req, number, markers(host), host.log.usage, (host.pty.rows, host.pty.cols), now
        )
    except OSError as exc:
        host.note(f"job={req.job_id} run directory unusable: {exc}; request dropped")
        host.done_jobs.add(req.job_id)
        drop_request(host, req.job_id)
        return
    host.turn = turn
    host.log.waiting = False
    turn.log(f"[hopper] turn {number} of session {host.spec.name} (agent pid {host.pty.pid})\n")
    turn.cast.output(bytes(host.screen[-4096:]), now)
    host._unready(now)
    keys = host.agent.type_prompt(req.text)
    if keys.endswith(b"\r"):  # the paste first, its Enter once the screen has taken it
        keys, turn.enter = keys[:-1], b"\r"
    host._type(keys)
    host.save(state=c.BUSY, job=req.job_id, turns=number)
    host.note(f"job={req.job_id} turn={number} typed")


def watch(host: Host, now: float) -> None:
    turn = host.turn
    assert turn is not None
    if turn.retry_at is not None:
        if not policies.retry_due(host, turn, now):
            return
        turn.markers = markers(host)
    if turn.retype and not policies.retype(host, turn, now):
        return
    if turn.enter:
        shown = host.last_output > turn.typed_at
        quiet = shown and now - host.last_output >= ENTER_QUIET
        if quiet or now - turn.typed_at >= ENTER_MAX:
            host._type(turn.enter)
            turn.enter, turn.typed_at = b"", now
    new_markers = markers(host) - turn.markers
    if now >= host.next_log or (new_markers and turn.marker_at is None):
        host.next_log = now + LOG_SCAN
        lines, entries = read_log(host)
        if lines:
            turn.log("".join(lines))
        if entries:
            turn.entries.extend(entries)
            turn.last_change = now
            turn.live.last_activity = time.time()
        turn.live.set(verdicts.turn_state(turn.entries, now, turn.last_change, host.spec.settle))
        if entries:
            usage = usage_delta(turn.usage_before, host.log.usage)
            over = over_budget(turn.request, usage, log_model(turn.entries), host.spec.agent_name)
            if over is not None:  # stopped as `hopper interrupt` stops it; the session lives on
                host._unready(now)
                host._type(host.agent.interrupt_keys())
                host._end_turn(c.BUDGET, over, now)
                return
    verdict = verdicts.turn_verdict(
        markers=len(new_markers),
        entries=turn.entries,
        now=now,
        last_change=turn.last_change,
        deadline=None,  # the timeout is the host's: it interrupts the turn too
        settle=host.spec.settle,
    )
    kind = verdicts.api_error_kind(turn.entries) if verdict is not None else None
    if verdict is not None and kind is not None:
        policies.api_error(host, turn, kind, verdict.how, now)
    elif verdict is not None and verdict.how == c.STOP_HOOK:
        # The hook may fire before the log has the answer: a moment for it to land.
        if turn.marker_at is None:
            turn.marker_at = now
            host.next_log = now
        answered = verdicts.agent_state(turn.entries, now, now, 0.0) == "waiting_for_input"
        if answered or now - turn.marker_at >= MARKER_GRACE:
            # The Stop hook says the agent finished and is back at its prompt. Its last
            # frames may have redrawn only what changed (not the input box's footer the
            # screen check looks for), so the screen alone could miss it until the
            # READY_FALLBACK; the next message still waits for a quiet screen.
            host.ready = True
            host._end_turn(c.STOP_HOOK, "", now)
    elif verdict is not None:
        detail = f"the session log says {verdict.state} (quiet {host.spec.settle:g} s)"
        host.ready = host.ready or verdict.state == "waiting_for_input"
        host._end_turn(c.SESSION_LOG, detail, now)
    elif turn.deadline is not None and now >= turn.deadline:
        host._unready(now)
        host._type(host.agent.interrupt_keys())
        host._end_turn(c.TIMEOUT, f"no end of turn within {turn.request.timeout:g} s", now)
    else:
        policies.idle(host, turn, now)
