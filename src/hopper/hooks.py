"""Completion hooks: commands and a webhook run after a job is finalized.

``on_success`` / ``on_failure`` / ``on_finish`` are argv templates (never a
shell string) from the config's ``[hooks]`` table or the prompt's front
matter; ``webhook`` receives the job's record, outcome, log tail and result
by a signed HTTP POST (webhook.py), retried on its own schedule
(webhook_queue.py). Hooks run on one background thread, in order, each with a
timeout, so a slow hook never holds up the watcher's loop; the webhook's body
is built there and sent by the webhook's own threads. A command hook's outcome
is an event (``hook_ok`` / ``hook_failed``), each webhook attempt one too
(``webhook_delivered`` / ``webhook_failed``); none changes the job's state.

Delivery is at most once: a hook queued when the watcher dies is not run
after the restart (the job's state is already final and durable).

A command hook runs under the same rules as a job: its own session and
process group, ``HOPPER_HOOK_TOKEN`` in its environment, output through a
pipe into ``runs/<id>/hooks.log`` (opened without following links) capped at
the job's ``output_max`` (``HOOK_OUTPUT_MAX`` if it has none), and when it
times out, passes the cap, or exits leaving processes behind, every process
carrying its token is SIGKILLed until none is left (proc/treekill.py): a
hook's child outlives neither the hook's timeout nor the watcher.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hopper.clock import Clock
from hopper.config import Hooks
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.core.templates import expand_argv, template_values
from hopper.proc import treekill
from hopper.store import ledger
from hopper.store.atomic import open_regular
from hopper.webhook import SecretUnavailable, WebhookOptions, build, public_url
from hopper.webhook_queue import Deliveries

log = logging.getLogger(__name__)

HOOKS_LOG = "hooks.log"
HOOK_OUTPUT_MAX = 10 << 20  # bytes of hooks.log per hook call for a job without output_max
HOOK_GRACE = 1.0  # seconds between SIGTERM to a timed-out hook's group and SIGKILL


@dataclass(frozen=True)
class HookSet:
    on_success: list[str] | None = None
    on_failure: list[str] | None = None
    on_finish: list[str] | None = None
    webhook: str | None = None
    timeout: float = 60.0
    webhook_options: WebhookOptions = field(default_factory=WebhookOptions)


@dataclass(frozen=True)
class HookCall:
    kind: str  # on_success | on_failure | on_finish | webhook
    argv: list[str] | None
    url: str | None
    record: JobRecord
    run_dir: Path
    timeout: float
    webhook_options: WebhookOptions = field(default_factory=WebhookOptions)


def webhook_options(conf: Hooks) -> WebhookOptions:
    """The config's ``[hooks]`` webhook keys as the sender takes them."""
    return WebhookOptions(
        secret=conf.webhook_secret.get_secret_value() if conf.webhook_secret else None,
        secret_file=conf.webhook_secret_file,
        attempts=conf.webhook_attempts,
        backoff=conf.webhook_backoff,
        log_tail=conf.webhook_log_tail,
        result_max=conf.webhook_result_max,
    )


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
        out.append(
            HookCall(
                "webhook",
                None,
                hooks.webhook,
                record,
                run_dir,
                hooks.timeout,
                hooks.webhook_options,
            )
        )
    return out


class HookRunner:
    """One thread that runs queued hook calls and records their outcome."""

    def __init__(self, clock: Clock, env: dict[str, str] | None = None) -> None:
        self.clock = clock
        self.env = env if env is not None else dict(os.environ)
        self._queue: queue.Queue[HookCall | Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="hopper-hooks", daemon=True)
        self._started = False
        self._current: str | None = None  # the token of the hook command running now
        self.webhooks = Deliveries(clock)

    def submit(self, calls: Sequence[HookCall | Callable[[], None]]) -> None:
        """Queue hook calls, or a chore of a job's end that may be slow (git worktree
        remove): run in order on this thread, never on the watcher's loop."""
        if not calls:
            return
        if not self._started:
            self._thread.start()
            self._started = True
        for call in calls:
            self._queue.put(call)

    def pending(self) -> int:
        """Hook calls queued or running, and webhook deliveries not yet done."""
        return self._queue.unfinished_tasks + self.webhooks.pending()

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the thread.

        ``timeout`` is one hook's limit; every queued hook gets it, so the wait
        is bounded by the queue's length and never cuts a hook short.
        """
        if self._started:
            budget = (self._queue.unfinished_tasks + 1) * timeout + 5.0
            self._queue.put(None)
            self._thread.join(budget)
            token = self._current
            if self._thread.is_alive() and token is not None:
                # Never leave a hook's processes behind the watcher.
                treekill.kill_until_gone(treekill.Marks(treekill.HOOK_TOKEN_ENV, token))
        # Webhook retries due within one hook's timeout are still made; the rest recorded.
        self.webhooks.close(timeout)

    def _work(self) -> None:
        while True:
            call = self._queue.get()
            try:
                if call is None:
                    return
                if isinstance(call, HookCall):
                    self._run(call)
                else:
                    _chore(call)
            finally:
                self._queue.task_done()

    def _run(self, call: HookCall) -> None:
        if call.url:
            self._webhook(call)
            return
        try:
            detail = self._command(call)
        except Exception as exc:  # a hook must never take the watcher down
            self._record(call, ok=False, detail=f"{type(exc).__name__}: {exc}")
        else:
            self._record(call, ok=True, detail=detail)

    def _command(self, call: HookCall) -> str:
        assert call.argv is not None
        token = f"{call.record.id}:{call.kind}:{secrets.token_hex(6)}"
        env = {
            **self.env,
            "HOPPER_JOB_ID": call.record.id,
            "HOPPER_JOB_STATE": call.record.state.value,
            "HOPPER_RUN_DIR": str(call.run_dir),
            "HOPPER_JOB_JSON": str(call.run_dir / "job.json"),
            treekill.HOOK_TOKEN_ENV: token,
        }
        cwd = call.record.workspace_path or call.record.workdir or str(call.run_dir)
        if not Path(cwd).is_dir():
            cwd = str(call.run_dir)
        cap = call.record.output_max_bytes
        cap = HOOK_OUTPUT_MAX if cap is None else cap
        log_fd = _open_hooks_log(call.run_dir)
        try:
            proc = subprocess.Popen(
                call.argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self._current = token
            assert proc.stdout is not None
            try:
                output = _Output(proc.stdout.fileno(), log_fd, cap)
                verdict = output.copy(proc, time.monotonic() + call.timeout)
                _end_tree(proc, token, grace=HOOK_GRACE if verdict == "timeout" else 0.0)
                output.drain()
            finally:
                self._current = None
                proc.stdout.close()
        finally:
            os.close(log_fd)
        if verdict == "timeout":
            raise TimeoutError(f"did not finish within {call.timeout:g}s")
        if verdict == "output":
            raise RuntimeError(
                f"wrote more than {cap} bytes (the job's output_max); stopped, hooks.log cut"
            )
        if proc.returncode != 0:
            raise RuntimeError(f"exited {proc.returncode} (output in hooks.log)")
        return "exited 0"

    def _webhook(self, call: HookCall) -> None:
        """Build the delivery here (bounded reads of the run's files); send it on its own."""
        assert call.url is not None
        try:
            delivery = build(
                call.record, call.run_dir, call.url, call.timeout, call.webhook_options
            )
        except SecretUnavailable as exc:  # never sent unsigned when a secret is configured
            self._note_webhook(call, detail=str(exc))
            return
        except Exception as exc:  # a hook must never take the watcher down
            self._note_webhook(call, detail=f"{type(exc).__name__}: {exc}")
            return
        self.webhooks.send(delivery)

    def _note_webhook(self, call: HookCall, *, detail: str) -> None:
        assert call.url is not None
        try:
            ledger.note(
                call.run_dir,
                "webhook_failed",
                self.clock.now(),
                url=public_url(call.url),
                attempt=1,
                status=None,
                detail=detail,
                final=True,
            )
        except OSError as exc:
            log.error("job=%s webhook: cannot record its outcome: %s", call.record.id, exc)
        log.error("job=%s webhook not sent: %s", call.record.id, detail)

    def _record(self, call: HookCall, *, ok: bool, detail: str) -> None:
        target = call.url if call.url else (call.argv or [""])[0]
        try:
            ledger.note(
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


def _open_hooks_log(run_dir: Path) -> int:
    """hooks.log for appending: in the run directory itself, never through a link."""
    dir_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return open_regular(HOOKS_LOG, dir_fd, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    finally:
        os.close(dir_fd)


class _Output:
    """A hook's output, from its pipe into hooks.log, cut at ``cap`` bytes."""

    def __init__(self, pipe_fd: int, log_fd: int, cap: int) -> None:
        self.pipe_fd, self.log_fd, self.cap = pipe_fd, log_fd, cap
        self.written = 0
        self.cut = False

    def take(self, chunk: bytes) -> bool:
        """Append what fits under the cap; True once the hook has passed it."""
        if self.cut:
            return True
        keep = chunk[: max(0, self.cap - self.written)]
        if keep:
            os.write(self.log_fd, keep)
        self.written += len(chunk)
        if self.written > self.cap:
            self.cut = True
            os.write(self.log_fd, f"\n[hopper] hook output cut at {self.cap} bytes\n".encode())
        return self.cut

    def copy(self, proc: subprocess.Popen[bytes], deadline: float) -> str:
        """Copy until the hook exits: ``"exited"``, ``"timeout"`` (``deadline``,
        monotonic, passed first) or ``"output"`` (it passed the cap)."""
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.pipe_fd], [], [], max(0.0, min(left, 0.1)))
            if ready:
                chunk = os.read(self.pipe_fd, 65536)
                if chunk:
                    if self.take(chunk):
                        return "output"
                    continue
                try:  # EOF: every writer closed its end; the hook may still run
                    proc.wait(max(0.0, left))
                except subprocess.TimeoutExpired:
                    return "timeout"
                return "exited"
            if proc.poll() is not None:
                return "exited"  # a leftover may still hold the pipe: ended next
            if left <= 0:
                return "timeout"

    def drain(self) -> None:
        """What the pipe still holds once every writer is gone (no waiting)."""
        while select.select([self.pipe_fd], [], [], 0)[0]:
            chunk = os.read(self.pipe_fd, 65536)
            if not chunk:
                return
            self.take(chunk)


def _chore(chore: Callable[[], None]) -> None:
    try:
        chore()
    except Exception:  # a chore must never take the thread down
        log.exception("a chore of a job's end failed")


def _end_tree(proc: subprocess.Popen[bytes], token: str, *, grace: float) -> None:
    """End the hook and everything carrying its token (leftovers of a clean exit too)."""
    if proc.poll() is None and grace > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    roots = frozenset([proc.pid]) if proc.poll() is None else frozenset[int]()
    treekill.kill_until_gone(treekill.Marks(treekill.HOOK_TOKEN_ENV, token, roots=roots))
    proc.wait()
