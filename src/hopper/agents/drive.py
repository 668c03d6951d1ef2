"""The agent job driver: the process an agent job *is*, under the per-job supervisor.

Run as ``python -I -m hopper.agents.drive RUN_DIR/agent.spec.json`` (standard
library plus hopper's pure stream/outcome modules: no pydantic, starts fast).
Because it is the job itself, everything below keeps going if the watcher is
killed and restarted; the watcher only reads the files it leaves:

* runs the agent CLI once per message (agents/clirun.py): in its own process
  group, the prompt on stdin (never on a command line), every raw stream line
  appended to ``agent.jsonl`` and rendered into its own stdout, which *is*
  job.log (O_APPEND), live (partial assistant text too, line by line);
  ``agent.state.json`` (the live agent state) kept current;
* judges each error the CLI reports *as it arrives* (``live_action``): a
  fatal kind (auth, permission, billing) stops the CLI's whole group at once
  and fails the job; a kind hopper retries (rate_limit, quota, overloaded,
  network) stops it too, and ``on_error`` decides: ``retry`` reruns after
  hopper's own backoff (at least the CLI's announced delay, which carries
  retry-after), up to ``api_retries``; ``fail`` fails; ``pause`` fails and
  holds the session's later prompts (``<root>/sessions/<name>.paused``);
* stops a run that prints nothing for ``idle_timeout`` (SIGINT, SIGTERM,
  SIGKILL to the CLI's group): ``on_idle`` aborts or nudges;
* resumes a CLI that died without a result when ``on_dead = "resume"``;
* records the session (``<root>/sessions/<name>.json``) after a successful turn;
* runs the ``check`` argv in the workdir (in the job's container for a
  container job, as each CLI turn) and, while it fails, resumes the session
  with the check's output as the next message;
* writes ``result.md`` and ``agent.json`` atomically; exits 0 only on success.

Nudges of every kind (check, idle, dead) share ``max_nudges``.

The job's ``max_cost_usd`` and ``max_tokens`` (agents/budget.py) count every run
of the job together: a run that reaches one is stopped (``budget_exceeded``),
and once one is reached no retry, nudge or check resume starts another run.
Claude is also given its own guard, ``--max-budget-usd``, set to what is left.

SIGINT/SIGTERM (the supervisor's stop signals) are forwarded to the CLI's
group and make the driver stop starting anything new: it reads the CLI's last
lines (Claude prints its result on SIGINT), records, exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hopper.agents import sessionmap
from hopper.agents.argv import check_argv, cli_for
from hopper.agents.budget import JobBudget
from hopper.agents.clirun import BUDGET_EXCEEDED, CliRun, RunResult
from hopper.agents.livestate import LiveState, iso
from hopper.agents.policy import (
    CONTINUE_TEXT,
    check_nudge_text,
    final_state,
    idle_nudge_text,
    pauses_on,
    retries_error,
    retry_delay,
)
from hopper.agents.stream import DIALECTS
from hopper.agents.streamtext import shorten
from hopper.core.prices import TOKEN_KEYS
from hopper.store.atomic import write_atomic

__all__ = ["RESULT_FILE", "SPEC_FILE", "SUMMARY_FILE"]

SPEC_FILE = "agent.spec.json"
SUMMARY_FILE = "agent.json"
RESULT_FILE = "result.md"
EVENTS_FILE = "events.jsonl"


class Driver:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.cli = cli_for(spec)
        self.run_dir = Path(spec["run_dir"])
        self.workdir = str(spec["workdir"])
        dialect = self.cli.dialect(spec)
        self.structured = dialect in DIALECTS
        self.stopping = False
        self.signals: list[int] = []  # stop signals received, to forward to the CLI's group
        before = spec.get("spent_before") or {}  # an earlier attempt's usage: counted on
        self.totals: dict[str, Any] = {
            "usage": {k: v for k, v in before.items() if k in TOKEN_KEYS and isinstance(v, int)},
            "cost_usd": before.get("cost_usd"),
            "turns": 0,
        }
        self.denials: list[str] = []
        self.live = LiveState(self.run_dir)
        self.budget = JobBudget(spec)
        self.cli_run = CliRun(
            spec,
            dialect,
            self.live,
            note=self.event,
            say=self.say,
            signals=self.signals,
            stopping=lambda: self.stopping,
            budget=self.budget,
        )
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGTERM, self._on_stop)

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stopping = True
        self.signals.append(signum)

    # -- files ------------------------------------------------------------------
    def event(self, name: str, **fields: Any) -> None:
        line = json.dumps({"ts": iso(time.time()), "event": name, **fields}) + "\n"
        fd = os.open(
            self.run_dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def say(self, text: str) -> None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()

    # -- sessions ---------------------------------------------------------------
    def sessions_dir(self) -> Path | None:
        if not self.spec.get("session") or not self.spec.get("sessions_dir"):
            return None
        return Path(self.spec["sessions_dir"])

    def known_session(self) -> str | None:
        where = self.sessions_dir()
        entry = sessionmap.read_entry(where, self.spec["session"]) if where else None
        if entry is None or entry.agent != self.spec.get("agent_name"):
            return None
        return entry.session_id

    def remember_session(self, session_id: str) -> None:
        where = self.sessions_dir()
        if where is not None:
            sessionmap.write_entry(
                where,
                self.spec["session"],
                str(self.spec.get("agent_name")),
                session_id,
                self.workdir,
                self.spec.get("job_id"),
            )

    # -- one CLI run --------------------------------------------------------------
    def run_agent(self, message: Path, session_id: str | None, resume: bool) -> RunResult:
        left = self.budget.cost_left()
        if left is not None:  # the CLI's own guard (Claude: --max-budget-usd), what is left
            self.spec["max_budget_usd"] = f"{left:.6f}"
        return self.cli_run.run(message, session_id, resume)

    def _account(self, res: RunResult) -> None:
        s = res.state.summary()
        usage = self.totals["usage"]
        for key, value in (s.get("usage") or {}).items():
            if isinstance(value, int):
                usage[key] = usage.get(key, 0) + value
        if s.get("cost_usd") is not None:
            self.totals["cost_usd"] = (self.totals["cost_usd"] or 0.0) + s["cost_usd"]
        self.totals["turns"] += int(s.get("num_turns") or 0)
        self.denials += s.get("permission_denials") or []
        self.budget.add(res.state)

    # -- the check ----------------------------------------------------------------
    def run_check(self, argv: list[str]) -> tuple[bool, int | None, str]:
        where = " (in the container)" if self.spec.get("container") else ""
        self.say(f"[check] {' '.join(argv)}{where}")
        try:
            done = subprocess.run(
                check_argv(self.spec, argv),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                check=False,
            )
        except OSError as exc:
            return False, None, f"cannot run the check: {exc}"
        output = done.stdout.decode("utf-8", "replace")
        self.say("\n".join("  " + ln for ln in shorten(output, 2000).splitlines()))
        self.say(f"[check] exit {done.returncode}")
        return done.returncode == 0, done.returncode, output

    # -- the whole job ------------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.05, end - time.monotonic()))

    def turn(self, message: Path, session_id: str | None, resume: bool) -> RunResult:
        """One message to the agent, with hopper's retries of retryable failures."""
        retries = int(self.spec.get("api_retries") or 0)
        on_error = self.spec.get("on_error")
        backoff = float(self.spec.get("retry_backoff") or 0.0)
        attempt = 0
        while True:
            res = self.run_agent(message, self.cli.session_for_turn(session_id, resume), resume)
            self._account(res)
            if self.stopping or res.ok or res.idle:
                return res
            if not retries_error(on_error, res.kind, attempt, retries):
                return res
            if self.budget.reached():  # no rerun past the job's limit
                return res
            attempt += 1
            delay = retry_delay(backoff, attempt, res.delay)
            self.event("agent_retry", attempt=attempt, kind=res.kind, delay_seconds=delay)
            self.say(f"[hopper] {res.kind}: retry {attempt}/{retries} in {delay:g}s")
            self.live.set("retrying", res.kind, f"retry {attempt}/{retries} in {delay:g}s")
            self.sleep(delay)
            if self.stopping:
                return res

    def nudge(self, nudges: int, text: str, why: str, **fields: Any) -> Path:
        message = self.run_dir / f"nudge-{nudges}.md"
        write_atomic(message, text.encode(), durable=False)
        max_nudges = int(self.spec.get("max_nudges") or 0)
        self.event("nudge", nudge=nudges, max_nudges=max_nudges, why=why, **fields)
        self.say(f"[hopper] nudge {nudges}/{max_nudges}: {why}; resuming")
        return message

    def main(self) -> int:
        for stale in (SUMMARY_FILE, RESULT_FILE):  # from an earlier attempt of this job
            (self.run_dir / stale).unlink(missing_ok=True)
        check = [str(a) for a in self.spec.get("check") or []]
        max_nudges = int(self.spec.get("max_nudges") or 0)
        session_id = self.known_session()
        resume = session_id is not None
        if resume:
            self.event("session_resumed", session=self.spec.get("session"), session_id=session_id)
        message = Path(self.spec["prompt_file"])
        nudges = 0
        outcome, detail, kind = "agent_error", "", None
        res: RunResult | None = None
        check_code: int | None = None
        while True:
            over = self.budget.reached() if nudges else None
            if over is not None:  # a nudge would be another run: none past the limit
                outcome, detail, kind = BUDGET_EXCEEDED, over, None
                break
            res = self.turn(message, session_id, resume)
            sid = res.state.session_id or session_id
            if res.ok and sid:
                if self.spec.get("session") and sid != self.known_session():
                    self.event("session_recorded", session=self.spec["session"], session_id=sid)
                self.remember_session(sid)
            if self.stopping:
                outcome, detail, kind = "stopped", "stopped by hopper", None
                break
            if res.kind == BUDGET_EXCEEDED:
                outcome, detail, kind = BUDGET_EXCEEDED, res.detail, None
                break
            if res.idle:
                quiet = float(self.spec.get("idle_timeout") or 0)
                if self.spec.get("on_idle") == "nudge" and sid and nudges < max_nudges:
                    nudges += 1
                    message = self.nudge(nudges, idle_nudge_text(quiet), "idle")
                    session_id, resume = sid, True
                    continue
                outcome = "idle_timeout"
                detail = f"the agent printed nothing for {quiet:g}s and was stopped"
                break
            if res.dead and self.spec.get("on_dead") == "resume" and sid and nudges < max_nudges:
                nudges += 1
                message = self.nudge(nudges, CONTINUE_TEXT, "dead", exit_code=res.exit_code)
                session_id, resume = sid, True
                continue
            if not res.ok:
                outcome, detail, kind = "agent_error", res.detail, res.kind
                break
            if not check:
                outcome, detail = "succeeded", res.detail
                break
            passed, check_code, output = self.run_check(check)
            if self.stopping:
                outcome, detail = "stopped", "stopped by hopper"
                break
            if passed:
                self.event("check_passed", nudges=nudges)
                outcome = "succeeded"
                detail = f"the agent reported success and the check passed after {nudges} nudges"
                break
            self.event("check_failed", exit_code=check_code, nudges=nudges)
            if nudges >= max_nudges or not sid:
                outcome = "check_failed"
                detail = (
                    f"the check {' '.join(check)!r} still failed (exit {check_code}) "
                    f"after {nudges} nudges"
                )
                break
            nudges += 1
            text = check_nudge_text(check, check_code, output)
            message = self.nudge(nudges, text, "the check failed", check_exit_code=check_code)
            session_id, resume = sid, True
        paused = self.pause_session(outcome, kind, detail)
        assert res is not None  # the first message always runs
        self.finish(res, outcome, detail, kind, nudges, check_code, paused)
        return 0 if outcome == "succeeded" else 1

    def usage(self) -> dict[str, Any]:
        """agent.json's usage: the token figures of every run, and the job's spend."""
        figures = {**self.totals["usage"], "cost_usd": self.totals["cost_usd"]}
        if not self.structured:
            return figures  # a text agent reports nothing to count
        return {**figures, **self.budget.usage_fields()}

    def pause_session(self, outcome: str, kind: str | None, detail: str) -> str | None:
        """``on_error = "pause"``: an API error holds the session's later prompts."""
        where = self.sessions_dir()
        if outcome != "agent_error" or where is None:
            return None
        if not pauses_on(self.spec.get("on_error"), kind):
            return None
        why = f"failed agent_error/{kind} (on_error = pause): {detail[:200]}"
        path = sessionmap.write_pause(where, self.spec["session"], self.spec.get("job_id"), why)
        self.event("session_paused", session=self.spec["session"], error_kind=kind)
        self.say(f"[hopper] session {self.spec['session']} paused: remove {path} to go on")
        return str(self.spec["session"])

    def finish(
        self,
        res: RunResult,
        outcome: str,
        detail: str,
        kind: str | None,
        nudges: int,
        check_code: int | None,
        paused: str | None = None,
    ) -> None:
        summary = res.state.summary()
        result_text = summary.get("result") if self.structured else res.text_tail
        result_path = None
        if result_text:
            write_atomic(self.run_dir / RESULT_FILE, (result_text.rstrip() + "\n").encode())
            result_path = RESULT_FILE
        agent_state, state_detail = final_state(outcome, kind, self.denials, result_text)
        self.live.set(agent_state, kind if agent_state == "api_error" else None, state_detail)
        record = {
            "outcome": outcome,
            "detail": detail,
            "error_kind": kind,
            "session_id": summary.get("session_id") or self.known_session(),
            "turns": self.totals["turns"] or None,
            "usage": self.usage(),
            "permission_denials": self.denials,
            "nudges": nudges,
            "check_exit_code": check_code,
            "result_path": result_path,
            "agent_state": agent_state,
            "session_paused": paused,
        }
        write_atomic(self.run_dir / SUMMARY_FILE, json.dumps(record, indent=2).encode() + b"\n")
        self.event("agent_outcome", outcome=outcome, error_kind=kind, nudges=nudges)
        self.say(f"[hopper] {outcome}: {detail}")


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    return Driver(spec).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
