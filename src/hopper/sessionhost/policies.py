"""A live session's turn policies: ``on_error``, ``on_dead``, ``on_idle``.

Each is a step of the host's loop for the turn in progress (``host.turn``),
as for a headless job's driver (agents/drive.py, agents/policy.py): an API
error that ended the reply is retried (typed again after hopper's backoff)
or fails the job, and ``pause`` holds the session; an agent that died is
resumed once in a new process on ``--resume`` and the message typed again; a
turn working yet silent in its session log for ``idle_timeout`` is nudged or
ended. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hopper.agents import policy, sessionmap
from hopper.core import sessions as verdicts
from hopper.errors import HopperError
from hopper.sessionhost import contract as c
from hopper.sessionhost.terminal import Pty, SpawnError
from hopper.sessionhost.timing import READY_FALLBACK, READY_QUIET
from hopper.sessionhost.turn import Turn

if TYPE_CHECKING:
    from hopper.sessionhost.host import Host


def api_error(host: Host, turn: Turn, kind: str, how: str, now: float) -> None:
    """An API error ended the agent's reply (it is back at its prompt). ``on_error``,
    as for a headless job: ``retry`` types the message again after hopper's backoff
    (up to ``api_retries``, the kinds hopper retries); else the job fails
    ``agent_error/<kind>``, and ``pause`` holds the session's later messages."""
    req = turn.request
    host.ready = True
    text = (verdicts.turn_result(turn.entries) or "")[:300]
    if policy.retries_error(req.on_error, kind, turn.retries, req.api_retries):
        turn.retries += 1
        delay = policy.retry_delay(req.retry_backoff, turn.retries, None)
        turn.retry_at = now + delay
        turn.event("agent_retry", attempt=turn.retries, kind=kind, delay_seconds=delay)
        line = f"{kind}: retry {turn.retries}/{req.api_retries} in {delay:g}s"
        turn.log(f"[hopper] {line}\n")
        turn.live.set("retrying", kind, line)
        host.note(f"job={req.job_id} turn={turn.number} {line}")
        return
    paused = None
    if policy.pauses_on(req.on_error, kind) and req.session and req.sessions_dir:
        why = f"failed agent_error/{kind} (on_error = pause): {text[:200]}"
        try:
            path = sessionmap.write_pause(Path(req.sessions_dir), req.session, req.job_id, why)
        except OSError as exc:
            host.note(f"job={req.job_id} cannot pause session {req.session}: {exc}")
        else:
            paused = req.session
            turn.event("session_paused", session=req.session, error_kind=kind)
            turn.log(f"[hopper] session {req.session} paused: remove {path} to go on\n")
    detail = f"the agent reported an error ({kind}): {text}"
    host._end_turn(how, detail, now, error=kind, paused=paused)


def retry_due(host: Host, turn: Turn, now: float) -> bool:
    """Waiting out the backoff before an ``on_error`` retry: True once the message is
    to be typed again (the job's timeout still ends the turn meanwhile); the caller
    then takes the Stop hook's markers so far as the turn's own."""
    assert turn.retry_at is not None
    if turn.deadline is not None and now >= turn.deadline:
        host._end_turn(c.TIMEOUT, f"no end of turn within {turn.request.timeout:g} s", now)
        return False
    if now < turn.retry_at:
        return False
    turn.retry_at, turn.marker_at, turn.retype = None, None, True
    turn.entries.clear()  # the error is behind: the turn is judged from here on
    turn.last_change = now
    turn.live.set("working")
    return True


def retype(host: Host, turn: Turn, now: float) -> bool:
    """After an ``on_dead`` resume: the message typed again once the new agent is ready."""
    if not host.ready and host.agent.ready(bytes(host.screen)):
        host.ready = True
    if not host.ready and now - host.unready_at >= READY_FALLBACK:
        host.ready = True
    if not host.ready or now - host.last_output < READY_QUIET:
        return False
    keys = host.agent.type_prompt(turn.request.text)
    if keys.endswith(b"\r"):
        keys, turn.enter = keys[:-1], b"\r"
    host._unready(now)
    turn.retype, turn.typed_at = False, now
    host._type(keys)
    host.note(f"job={turn.request.job_id} turn={turn.number} typed again")
    return True


def resume(host: Host, turn: Turn, detail: str, now: float) -> bool:
    """``on_dead = "resume"``: a new agent on ``--resume <session id>`` for the turn
    (once); False when it does not apply or cannot start."""
    sid = host.log.session_id
    if turn.request.on_dead != "resume" or turn.resumed or not sid or host.ladder.stopping:
        return False
    turn.resumed = True
    spec = host.spec
    try:
        argv = host.agent.argv(sid)
        pty = Pty.spawn(argv, host.agent.env(spec.env), spec.workdir, (spec.rows, spec.cols))
    except (SpawnError, OSError, ValueError, HopperError) as exc:
        host.note(f"job={turn.request.job_id} the agent cannot be resumed: {exc}")
        return False
    if host.pty is not None:
        host.pty.close()
    host.pty = pty
    host.reaper.pid, host.reaper.status = pty.pid, None
    host._unready(now)
    turn.retype = True
    turn.event("nudge", nudge=1, max_nudges=1, why="dead", detail=detail, agent_pid=pty.pid)
    turn.log(f"[hopper] {detail}: resuming session {sid} (agent pid {pty.pid})\n")
    host.note(f"job={turn.request.job_id} {detail}: resumed {sid} as pid {pty.pid}")
    host.save(agent_pid=pty.pid)
    return True


def idle(host: Host, turn: Turn, now: float) -> None:
    """``idle_timeout``: working, yet nothing new in the session log since the last
    typing: a nudge typed into the session (``on_idle = "nudge"``, up to
    ``max_nudges``), else the turn ends ``idle_timeout``. Not the terminal: Claude's
    TUI redraws its spinner (elapsed seconds) all the while it waits on the model."""
    req = turn.request
    if req.idle_timeout is None or turn.enter or turn.live.state != "working":
        return
    quiet = now - max(turn.last_change, turn.typed_at)
    if quiet < req.idle_timeout:
        return
    if req.on_idle == "nudge" and turn.nudges < req.max_nudges:
        turn.nudges += 1
        turn.event("nudge", nudge=turn.nudges, max_nudges=req.max_nudges, why="idle")
        turn.log(f"[hopper] nudge {turn.nudges}/{req.max_nudges}: idle for {quiet:.0f} s\n")
        host.note(f"job={req.job_id} turn={turn.number} nudge {turn.nudges}: idle")
        text = policy.idle_nudge_text(req.idle_timeout).rstrip("\n")
        turn.typed.append(text)
        keys = host.agent.type_prompt(text)
        if keys.endswith(b"\r"):
            keys, turn.enter = keys[:-1], b"\r"
        turn.typed_at = now
        host._type(keys)
        return
    spent = f" ({turn.nudges} nudges spent)" if req.on_idle == "nudge" else ""
    host._unready(now)
    host._type(host.agent.interrupt_keys())
    detail = f"no output for idle_timeout ({req.idle_timeout:g} s){spent}"
    host._end_turn(c.IDLE_TIMEOUT, detail, now)
