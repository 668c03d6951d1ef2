"""The agent job driver: the process an agent job *is*, under the per-job supervisor.

Run as ``python -I -m hopper.agents.drive RUN_DIR/agent.spec.json`` (standard
library plus hopper's pure stream/outcome modules: no pydantic, starts fast).
Because it is the job itself, everything below keeps going if the watcher is
killed and restarted; the watcher only reads the files it leaves:

* runs the agent CLI with the prompt on stdin (never on a command line),
  its stdout on a pipe, its stderr straight into job.log;
* appends every raw stream line to ``agent.jsonl`` and the rendered,
  human-readable lines to its own stdout, which *is* job.log (O_APPEND), live;
* retries a run that failed with a retryable kind (rate_limit, overloaded,
  network), with exponential backoff, up to ``api_retries`` times;
* aborts a run that prints nothing for ``idle_timeout`` (SIGINT, SIGTERM, SIGKILL);
* records the session (``<root>/sessions/<name>.json``) after a successful turn;
* runs the ``check`` argv in the workdir and, while it fails, resumes the
  session with the check's output as the next message, up to ``max_nudges``;
* writes ``result.md`` (the final message) and ``agent.json`` (the verdict,
  session id, usage, denials …) atomically, and exits 0 only on success.

SIGINT/SIGTERM (the supervisor's stop signals, sent to the whole process
group, so the CLI receives them too) make it stop starting anything new: it
reads the CLI's last lines (Claude prints its result on SIGINT), records, exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopper.agents.stream import StreamState, parse_line, shorten
from hopper.core.agent_outcome import judge, retryable
from hopper.store.atomic import write_atomic

SPEC_FILE = "agent.spec.json"
STREAM_FILE = "agent.jsonl"
SUMMARY_FILE = "agent.json"
RESULT_FILE = "result.md"
EVENTS_FILE = "events.jsonl"
CHECK_OUTPUT_CHARS = 6000


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}+00:00"


def build_argv(spec: dict[str, Any], session_id: str | None, resume: bool) -> list[str]:
    """The CLI's argv for one run. Pure; the prompt is never part of it (it goes on stdin)."""
    kind = spec["kind"]
    binary = str(spec["bin"])
    extra = [str(a) for a in spec.get("args") or []]
    if kind == "claude":
        argv = [binary, "-p", "--output-format", "stream-json", "--verbose"]
        if spec.get("permission_mode"):
            argv += ["--permission-mode", str(spec["permission_mode"])]
        if spec.get("model"):
            argv += ["--model", str(spec["model"])]
        if session_id:
            argv += ["--resume" if resume else "--session-id", session_id]
        return argv + extra
    if kind == "codex":
        argv = [binary, "exec", "--json", "--skip-git-repo-check"]
        sandbox = spec.get("sandbox")
        if sandbox == "bypass":
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        elif sandbox:
            argv += ["-s", str(sandbox)]
        if spec.get("model"):
            argv += ["-m", str(spec["model"])]
        argv += extra
        if resume and session_id:
            argv += ["resume", session_id]
        return [*argv, "-"]
    # a custom agent: its argv template, placeholders filled (whole arguments only)
    values = {
        "prompt_file": str(spec.get("message_file") or spec["prompt_file"]),
        "workdir": str(spec["workdir"]),
        "run_dir": str(spec["run_dir"]),
        "session_id": session_id or "",
        "job_id": str(spec.get("job_id") or ""),
    }
    out: list[str] = []
    for arg in spec["argv"]:
        text = str(arg)
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        out.append(text)
    return out + extra


@dataclass
class RunResult:
    state: StreamState
    exit_code: int | None
    idle: bool
    ok: bool
    kind: str | None
    detail: str
    text_tail: str = ""


class Driver:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.kind = str(spec["kind"])
        self.run_dir = Path(spec["run_dir"])
        self.workdir = str(spec["workdir"])
        self.dialect = self.kind if self.kind in ("claude", "codex") else str(spec.get("format"))
        self.dialect = self.dialect.removesuffix("-jsonl")
        self.structured = self.dialect in ("claude", "codex")
        self.stopping = False
        self.proc: subprocess.Popen[bytes] | None = None
        self.totals: dict[str, Any] = {"usage": {}, "cost_usd": None, "turns": 0}
        self.denials: list[str] = []
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGTERM, self._on_stop)

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    # -- files ------------------------------------------------------------------
    def event(self, name: str, **fields: Any) -> None:
        line = json.dumps({"ts": _iso(time.time()), "event": name, **fields}) + "\n"
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
    def session_file(self) -> Path | None:
        name = self.spec.get("session")
        if not name or not self.spec.get("sessions_dir"):
            return None
        return Path(self.spec["sessions_dir"]) / f"{name}.json"

    def known_session(self) -> str | None:
        path = self.session_file()
        if path is None:
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if data.get("agent") != self.spec.get("agent_name"):
            return None
        sid = data.get("session_id")
        return sid if isinstance(sid, str) and sid else None

    def remember_session(self, session_id: str) -> None:
        path = self.session_file()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "name": self.spec["session"],
            "agent": self.spec.get("agent_name"),
            "session_id": session_id,
            "workdir": self.workdir,
            "job_id": self.spec.get("job_id"),
            "updated_at": _iso(time.time()),
        }
        write_atomic(path, json.dumps(data, indent=2).encode() + b"\n")

    # -- one CLI run --------------------------------------------------------------
    def run_agent(self, message: Path, session_id: str | None, resume: bool) -> RunResult:
        argv = build_argv({**self.spec, "message_file": str(message)}, session_id, resume)
        state = StreamState(self.dialect)
        self.event("agent_started", argv0=argv[0], resume=resume, session_id=session_id)
        self.say(f"[hopper] {'resuming' if resume else 'starting'} {self.spec.get('agent_name')}")
        stdin_path = message if self.spec.get("stdin", True) else Path(os.devnull)
        with open(stdin_path, "rb") as stdin:
            try:
                proc = subprocess.Popen(
                    argv, cwd=self.workdir, stdin=stdin, stdout=subprocess.PIPE, stderr=None
                )
            except OSError as exc:
                self.say(f"[error] cannot start {argv[0]}: {exc}")
                return RunResult(state, None, False, False, "unknown", f"cannot start: {exc}")
        self.proc = proc
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        idle_timeout = self.spec.get("idle_timeout")
        buf = b""
        tail = b""
        last = time.monotonic()
        idle = False
        stream = open(self.run_dir / STREAM_FILE, "ab")  # noqa: SIM115
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    quiet = time.monotonic() - last
                    if idle_timeout is not None and not idle and quiet >= idle_timeout:
                        idle = True
                        self.event("idle_timeout", idle_timeout_seconds=idle_timeout)
                        self.say(f"[hopper] no output for {idle_timeout:g}s: stopping the agent")
                        self._stop_child(proc)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                last = time.monotonic()
                if not self.structured:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    tail = (tail + chunk)[-20000:]
                    continue
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self._line(line, state, stream)
            if buf.strip():
                self._line(buf, state, stream)
        finally:
            stream.close()
            proc.stdout.close()
        code = self._wait(proc)
        self.proc = None
        self.event("agent_exited", exit_code=code)
        if not self.structured:
            ok = code == 0
            return RunResult(
                state,
                code,
                idle,
                ok,
                None if ok else "unknown",
                "the agent exited 0" if ok else f"the agent exited {code}",
                tail.decode("utf-8", "replace"),
            )
        verdict = judge(state.summary(), code)
        if idle:
            return RunResult(state, code, True, False, None, "no output for idle_timeout")
        return RunResult(state, code, False, verdict.ok, verdict.kind, verdict.detail)

    def _line(self, line: bytes, state: StreamState, stream: Any) -> None:
        if not line.strip():
            return
        stream.write(line + b"\n")
        stream.flush()
        obj = parse_line(line)
        if obj is None:
            self.say(line.decode("utf-8", "replace"))
            return
        for text in state.feed(obj):
            self.say(text)

    def _stop_child(self, proc: subprocess.Popen[bytes]) -> None:
        grace = float(self.spec.get("grace", 5.0))
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue
        proc.kill()

    @staticmethod
    def _wait(proc: subprocess.Popen[bytes]) -> int | None:
        rc = proc.wait()
        return rc if rc >= 0 else None

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

    # -- the check ----------------------------------------------------------------
    def run_check(self, argv: list[str]) -> tuple[bool, int | None, str]:
        self.say(f"[check] {' '.join(argv)}")
        try:
            done = subprocess.run(
                argv,
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
        """One message to the agent, with retries of retryable failures."""
        retries = int(self.spec.get("api_retries") or 0)
        backoff = float(self.spec.get("retry_backoff") or 0.0)
        attempt = 0
        while True:
            sid = session_id
            if self.kind == "claude" and not resume:
                sid = str(uuid.uuid4())  # a fresh conversation id for every new-session run
            res = self.run_agent(message, sid, resume)
            self._account(res)
            if self.stopping or res.ok or res.idle or not retryable(res.kind) or attempt >= retries:
                return res
            attempt += 1
            delay = backoff * (2 ** (attempt - 1))
            self.event("agent_retry", attempt=attempt, kind=res.kind, delay_seconds=delay)
            self.say(f"[hopper] {res.kind}: retry {attempt}/{retries} in {delay:g}s")
            self.sleep(delay)
            if self.stopping:
                return res

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
            res = self.turn(message, session_id, resume)
            sid = res.state.session_id or session_id
            if res.ok and sid:
                if self.spec.get("session") and sid != self.known_session():
                    self.event("session_recorded", session=self.spec["session"], session_id=sid)
                self.remember_session(sid)
            if self.stopping:
                outcome, detail, kind = "stopped", "stopped by hopper", None
                break
            if res.idle:
                quiet = float(self.spec.get("idle_timeout") or 0)
                if self.spec.get("on_idle") == "nudge" and sid and nudges < max_nudges:
                    nudges += 1
                    message = self.run_dir / f"nudge-{nudges}.md"
                    text = (
                        f"You have printed nothing for {quiet:g} seconds. Carry on with the "
                        "task; if you are stuck or waiting on something, say what and stop.\n"
                    )
                    write_atomic(message, text.encode(), durable=False)
                    self.event("nudge", nudge=nudges, max_nudges=max_nudges, why="idle")
                    self.say(f"[hopper] nudge {nudges}/{max_nudges}: idle for {quiet:g}s; resuming")
                    session_id, resume = sid, True
                    continue
                outcome = "idle_timeout"
                detail = f"the agent printed nothing for {quiet:g}s and was stopped"
                break
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
            message = self.run_dir / f"nudge-{nudges}.md"
            text = (
                f"The check `{' '.join(check)}` failed with exit code {check_code}. "
                "Fix the problem so that it passes. Its output:\n\n```\n"
                f"{shorten(output, CHECK_OUTPUT_CHARS)}\n```\n"
            )
            write_atomic(message, text.encode(), durable=False)
            self.event("nudge", nudge=nudges, max_nudges=max_nudges, check_exit_code=check_code)
            self.say(f"[hopper] nudge {nudges}/{max_nudges}: the check failed; resuming")
            session_id, resume = sid, True
        self.finish(res, outcome, detail, kind, nudges, check_code)
        return 0 if outcome == "succeeded" else 1

    def finish(
        self,
        res: RunResult,
        outcome: str,
        detail: str,
        kind: str | None,
        nudges: int,
        check_code: int | None,
    ) -> None:
        summary = res.state.summary()
        result_text = summary.get("result") if self.structured else res.text_tail
        result_path = None
        if result_text:
            write_atomic(self.run_dir / RESULT_FILE, (result_text.rstrip() + "\n").encode())
            result_path = RESULT_FILE
        record = {
            "outcome": outcome,
            "detail": detail,
            "error_kind": kind,
            "session_id": summary.get("session_id") or self.known_session(),
            "turns": self.totals["turns"] or None,
            "usage": {**self.totals["usage"], "cost_usd": self.totals["cost_usd"]},
            "permission_denials": self.denials,
            "nudges": nudges,
            "check_exit_code": check_code,
            "result_path": result_path,
        }
        write_atomic(self.run_dir / SUMMARY_FILE, json.dumps(record, indent=2).encode() + b"\n")
        self.event("agent_outcome", outcome=outcome, error_kind=kind, nudges=nudges)
        self.say(f"[hopper] {outcome}: {detail}")


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    return Driver(spec).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
