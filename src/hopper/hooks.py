"""Completion hooks: commands and a webhook run after a job is finalized.

``on_success`` / ``on_failure`` / ``on_finish`` are argv templates (never a
shell string) from the config's ``[hooks]`` table or the prompt's front
matter; ``webhook`` receives the final job record as JSON by HTTP POST. Hooks
run on one background thread, in order, each with a timeout, so a slow hook
never holds up the watcher's loop. A hook's outcome is an event
(``hook_ok`` / ``hook_failed``); it never changes the job's state.

Delivery is at most once: a hook queued when the watcher dies is not run
after the restart (the job's state is already final and durable).
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hopper.clock import Clock
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.core.templates import expand_argv, template_values
from hopper.store.jobfile import append_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HookSet:
    on_success: list[str] | None = None
    on_failure: list[str] | None = None
    on_finish: list[str] | None = None
    webhook: str | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class HookCall:
    kind: str  # on_success | on_failure | on_finish | webhook
    argv: list[str] | None
    url: str | None
    record: JobRecord
    run_dir: Path
    timeout: float


def calls_for(record: JobRecord, run_dir: Path, hooks: HookSet) -> list[HookCall]:
    """Which hooks a terminal ``record`` triggers, templates expanded. Pure."""
    values = {
        **template_values(record, Path(record.workspace_path or record.workdir or run_dir)),
        "job.state": record.state.value,
        "job.reason": record.reason.value if record.reason else "",
        "job.run_dir": str(run_dir),
    }
    out: list[HookCall] = []
    pick = hooks.on_success if record.state is JobState.SUCCEEDED else hooks.on_failure
    kind = "on_success" if record.state is JobState.SUCCEEDED else "on_failure"
    for name, argv in ((kind, pick), ("on_finish", hooks.on_finish)):
        if argv:
            out.append(
                HookCall(name, expand_argv(argv, values), None, record, run_dir, hooks.timeout)
            )
    if hooks.webhook:
        out.append(HookCall("webhook", None, hooks.webhook, record, run_dir, hooks.timeout))
    return out


class HookRunner:
    """One thread that runs queued hook calls and records their outcome."""

    def __init__(self, clock: Clock, env: dict[str, str] | None = None) -> None:
        self.clock = clock
        self.env = env if env is not None else dict(os.environ)
        self._queue: queue.Queue[HookCall | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="hopper-hooks", daemon=True)
        self._started = False

    def submit(self, calls: list[HookCall]) -> None:
        if not calls:
            return
        if not self._started:
            self._thread.start()
            self._started = True
        for call in calls:
            self._queue.put(call)

    def pending(self) -> int:
        return self._queue.unfinished_tasks

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the thread.

        ``timeout`` is one hook's limit; every queued hook gets it, so the wait
        is bounded by the queue's length and never cuts a hook short.
        """
        if self._started:
            budget = (self._queue.unfinished_tasks + 1) * timeout + 5.0
            self._queue.put(None)
            self._thread.join(budget)

    def _work(self) -> None:
        while True:
            call = self._queue.get()
            try:
                if call is None:
                    return
                self._run(call)
            finally:
                self._queue.task_done()

    def _run(self, call: HookCall) -> None:
        try:
            detail = self._webhook(call) if call.url else self._command(call)
        except Exception as exc:  # a hook must never take the watcher down
            self._record(call, ok=False, detail=f"{type(exc).__name__}: {exc}")
        else:
            self._record(call, ok=True, detail=detail)

    def _command(self, call: HookCall) -> str:
        assert call.argv is not None
        env = {
            **self.env,
            "HOPPER_JOB_ID": call.record.id,
            "HOPPER_JOB_STATE": call.record.state.value,
            "HOPPER_RUN_DIR": str(call.run_dir),
            "HOPPER_JOB_JSON": str(call.run_dir / "job.json"),
        }
        cwd = call.record.workspace_path or call.record.workdir or str(call.run_dir)
        if not Path(cwd).is_dir():
            cwd = str(call.run_dir)
        with (call.run_dir / "hooks.log").open("ab") as out:
            try:
                proc = subprocess.run(
                    call.argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    timeout=call.timeout,
                    start_new_session=True,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"did not finish within {call.timeout:g}s") from None
        if proc.returncode != 0:
            raise RuntimeError(f"exited {proc.returncode} (output in hooks.log)")
        return "exited 0"

    def _webhook(self, call: HookCall) -> str:
        assert call.url is not None
        if not call.url.startswith(("http://", "https://")):
            raise ValueError(f"webhook {call.url!r} is not an http(s) URL")
        body = call.record.model_dump_json().encode()
        request = urllib.request.Request(  # noqa: S310 - scheme checked above
            call.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=call.timeout) as response:  # noqa: S310
            return f"HTTP {response.status}"

    def _record(self, call: HookCall, *, ok: bool, detail: str) -> None:
        target = call.url if call.url else (call.argv or [""])[0]
        try:
            append_event(
                call.run_dir,
                "hook_ok" if ok else "hook_failed",
                self.clock.now(),
                hook=call.kind,
                target=target,
                detail=detail,
            )
        except OSError as exc:
            log.error(
                "job=%s hook %s: cannot record its outcome: %s", call.record.id, call.kind, exc
            )
        if not ok:
            log.warning("job=%s hook %s failed: %s", call.record.id, call.kind, detail)
