"""The completion webhook: payload, signature, retries, bounded and link-safe reads.

A real HTTP server on 127.0.0.1, started by each test, answers with a script
of status codes and keeps what it was sent.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import bash, drop, wait_for
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import read_events
from hopper.store.layout import Layout

SECRET = "s3cret-for-tests-only"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTP server answering POSTs with ``script`` (then 204), keeping what came."""

    port: int = 0
    script: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?token=abc"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append(Received(dict(self.headers.items()), body))
                status = receiver.script.pop(0) if receiver.script else 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    yield rec
    rec.stop()


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, as docs/scheduling.md shows it (standard library only)."""
    stamp = headers["X-Hopper-Timestamp"]
    mac = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest("sha256=" + mac.hexdigest(), headers["X-Hopper-Signature"])


def webhook_events(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir) if e["event"].startswith("webhook_")]


# -- through the watcher --------------------------------------------------------


def test_payload_carries_outcome_log_tail_and_result_signed(
    layout: Layout, config_file: Path, hopper, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.start()
    secret_file = tmp_path / "webhook.secret"
    secret_file.write_text(SECRET + "\n")
    config_file.write_text(
        config_file.read_text()
        + f'[hooks]\nwebhook = "{receiver.url}"\nwebhook_secret_file = "{secret_file}"\n'
        'webhook_log_tail = "1K"\ntimeout = "10s"\n'
    )
    script = (
        'for i in $(seq 1 200); do echo "line $i"; done\n'
        "printf 'bad \\377 byte\\n'\n"
        'printf "# Done\\nall é well\\n" > "$HOPPER_RUN_DIR/result.md"\n'
        "echo last words; exit 3"
    )
    drop(layout, "tailed", bash(script))
    result = hopper("run", "--until-idle")
    assert result.returncode == 0, result.stderr
    (got,) = receiver.got
    payload = json.loads(got.body)
    assert payload["event"] == "job_finished"
    assert payload["job"]["name"] == "tailed"
    assert payload["outcome"] == {
        "state": "failed",
        "reason": "exit_nonzero",
        "exit_code": 3,
        "signal": None,
        "detail": payload["job"]["detail"],
    }
    log = payload["log"]
    assert log["truncated"] is True and log["size"] > 1024
    assert len(log["text"].replace("\ufffd", "?").encode()) <= 1024  # the bytes read
    assert log["text"].endswith("bad \ufffd byte\nlast words\n")
    assert "line 1\n" not in log["text"]
    assert payload["result"]["text"] == "# Done\nall é well\n"
    assert payload["delivery"] == got.headers["X-Hopper-Delivery"]
    assert got.headers["X-Hopper-Attempt"] == "1"
    assert verify(SECRET, got.headers, got.body)
    assert not verify("another secret", got.headers, got.body)
    assert not verify(SECRET, got.headers, got.body.replace(b"tailed", b"tailer"))
    (run_dir,) = list(layout.runs.iterdir())
    (event,) = webhook_events(run_dir)
    assert event["event"] == "webhook_delivered"
    assert (event["attempt"], event["status"]) == (1, 204)
    assert "token" not in event["url"]  # the query may carry a credential: not recorded
    assert SECRET not in result.stderr
    assert SECRET not in (run_dir / "events.jsonl").read_text()


def test_a_linked_job_log_is_not_followed(
    layout: Layout, config_file: Path, hopper, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.start()
    outside = tmp_path / "outside.txt"
    outside.write_text("PRIVATE OUTSIDE TEXT\n")
    config_file.write_text(config_file.read_text() + f'[hooks]\nwebhook = "{receiver.url}"\n')
    drop(
        layout,
        "linker",
        bash(
            f'rm "$HOPPER_RUN_DIR/job.log"; ln -s {outside} "$HOPPER_RUN_DIR/job.log"\n'
            f'ln -s {outside} "$HOPPER_RUN_DIR/result.md"'
        ),
    )
    assert hopper("run", "--until-idle").returncode == 0
    (got,) = receiver.got
    assert b"PRIVATE OUTSIDE TEXT" not in got.body
    payload = json.loads(got.body)
    assert payload["log"]["text"] is None
    assert "symbolic link" in payload["log"]["error"]
    assert payload["result"]["text"] is None
    assert "X-Hopper-Signature" not in got.headers  # no secret configured: unsigned


def test_both_secrets_is_a_config_error(config_file: Path, hopper, tmp_path: Path) -> None:
    config_file.write_text(
        config_file.read_text() + '[hooks]\nwebhook = "http://127.0.0.1:1/"\nwebhook_secret = "a"\n'
        f'webhook_secret_file = "{tmp_path}/s"\n'
    )
    result = hopper("config", "check")
    assert result.returncode != 0
    assert "set webhook_secret or webhook_secret_file, not both" in result.stdout + result.stderr


# -- the sender, in process -------------------------------------------------------


def record() -> JobRecord:
    return JobRecord(
        id="20261126-070000-000-w-abcd",
        name="w",
        state=JobState.SUCCEEDED,
        reason=Reason.COMPLETED,
        exit_code=0,
        agent="bash",
        host="h",
        inbox_path="inbox/w.prompt.md",
        created_at=datetime(2026, 11, 26, tzinfo=UTC),
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    (path / "job.log").write_text("hello\n")
    return path


def send(run_dir: Path, url: str, **options: Any) -> Any:
    from hopper.clock import SystemClock
    from hopper.hooks import HookRunner, HookSet, calls_for
    from hopper.webhook import WebhookOptions

    runner = HookRunner(SystemClock())
    opts = WebhookOptions(**{"backoff": 0.1, "attempts": 4, **options})
    runner.submit(
        calls_for(record(), run_dir, HookSet(webhook=url, timeout=5.0, webhook_options=opts))
    )
    return runner


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_is_retried(run_dir: Path, receiver: Receiver) -> None:
    receiver.port = free_port()  # nobody listens yet: the first attempt is refused
    runner = send(run_dir, receiver.url, backoff=1.0)
    try:
        wait_for(lambda: webhook_events(run_dir), what="the first, refused attempt")
        receiver.start()
        wait_for(
            lambda: webhook_events(run_dir)[-1]["event"] == "webhook_delivered", what="the retry"
        )
    finally:
        runner.close(5.0)
    first, *_, last = events = webhook_events(run_dir)  # a loaded machine may refuse twice
    assert (first["event"], first["attempt"], first["status"]) == ("webhook_failed", 1, None)
    assert "refused" in first["detail"].lower() and first["retry_in"] == 1.0
    assert (last["attempt"], last["status"]) == (len(events), 204)
    assert len(receiver.got) == 1


def test_a_503_is_retried_with_the_same_body(run_dir: Path, receiver: Receiver) -> None:
    receiver.script = [503, 503]
    receiver.start()
    runner = send(run_dir, receiver.url)
    try:
        wait_for(lambda: len(webhook_events(run_dir)) == 3, what="two 503s and a success")
    finally:
        runner.close(5.0)
    events = webhook_events(run_dir)
    assert [(e["event"], e["attempt"], e["status"]) for e in events] == [
        ("webhook_failed", 1, 503),
        ("webhook_failed", 2, 503),
        ("webhook_delivered", 3, 204),
    ]
    assert [e["retry_in"] for e in events[:2]] == [0.1, 0.2]  # doubling
    bodies = {r.body for r in receiver.got}
    assert len(bodies) == 1 and len({r.headers["X-Hopper-Delivery"] for r in receiver.got}) == 1
    assert [r.headers["X-Hopper-Attempt"] for r in receiver.got] == ["1", "2", "3"]


def test_a_400_is_not_retried(run_dir: Path, receiver: Receiver) -> None:
    receiver.script = [400]
    receiver.start()
    runner = send(run_dir, receiver.url)
    try:
        wait_for(lambda: webhook_events(run_dir), what="the refused delivery")
        assert runner.pending() == 0
    finally:
        runner.close(5.0)
    (event,) = webhook_events(run_dir)
    assert (event["event"], event["status"], event["final"]) == ("webhook_failed", 400, True)
    assert len(receiver.got) == 1


def test_attempts_are_bounded(run_dir: Path, receiver: Receiver) -> None:
    receiver.script = [503] * 10
    receiver.start()
    runner = send(run_dir, receiver.url, attempts=2)
    try:
        wait_for(lambda: len(webhook_events(run_dir)) == 2, what="two attempts")
        wait_for(lambda: runner.pending() == 0, what="nothing left to send")
    finally:
        runner.close(5.0)
    assert [e.get("final") for e in webhook_events(run_dir)] == [None, True]
    assert len(receiver.got) == 2


def test_a_missing_secret_file_sends_nothing(
    run_dir: Path, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.start()
    runner = send(run_dir, receiver.url, secret_file=str(tmp_path / "absent"))
    try:
        wait_for(lambda: webhook_events(run_dir), what="the failure")
    finally:
        runner.close(5.0)
    (event,) = webhook_events(run_dir)
    assert event["event"] == "webhook_failed" and event["final"] is True
    assert f"webhook_secret_file {tmp_path / 'absent'}: no such file" in event["detail"]
    assert receiver.got == []  # never sent unsigned


def test_a_retry_waiting_at_stop_is_recorded_not_replayed(
    run_dir: Path, receiver: Receiver
) -> None:
    receiver.script = [503]
    receiver.start()
    runner = send(run_dir, receiver.url, backoff=60.0)
    wait_for(lambda: webhook_events(run_dir), what="the first attempt")
    runner.close(1.0)  # the retry is due in 60 s: past the budget
    first, given_up = webhook_events(run_dir)
    assert (first["status"], first["retry_in"]) == (503, 60.0)
    assert (given_up["attempt"], given_up["final"]) == (2, True)
    assert "watcher stopped" in given_up["detail"]


def test_a_retrying_receiver_does_not_hold_up_command_hooks(
    run_dir: Path, receiver: Receiver, tmp_path: Path
) -> None:
    """A webhook waiting for its retry leaves the hooks thread free for the next job."""
    from hopper.clock import SystemClock
    from hopper.hooks import HookRunner, HookSet, calls_for
    from hopper.webhook import WebhookOptions

    receiver.script = [503]
    receiver.start()
    marker = tmp_path / "ran"
    runner = HookRunner(SystemClock())
    slow = HookSet(webhook=receiver.url, webhook_options=WebhookOptions(backoff=60.0))
    runner.submit(calls_for(record(), run_dir, slow))
    wait_for(lambda: webhook_events(run_dir), what="the first attempt")
    other = tmp_path / "other"
    other.mkdir()
    runner.submit(calls_for(record(), other, HookSet(on_finish=["touch", str(marker)])))
    try:
        wait_for(marker.exists, what="the next job's hook, not behind the retry")
    finally:
        runner.close(0.5)


def test_pending_deliveries_are_bounded(run_dir: Path, tmp_path: Path) -> None:
    from hopper.clock import SystemClock
    from hopper.webhook import Attempt, Delivery, WebhookOptions
    from hopper.webhook_queue import Deliveries

    gate = threading.Event()

    def stuck(delivery: Delivery, attempt: int) -> Attempt:
        gate.wait(10)
        return Attempt(204, ok=True, retry=False, detail="HTTP 204")

    queue = Deliveries(SystemClock(), senders=1, max_pending=2, poster=stuck)
    runs = []
    for n in range(3):
        rd = tmp_path / f"r{n}"
        rd.mkdir()
        runs.append(rd)
        queue.send(
            Delivery(f"d{n}", "j", "http://127.0.0.1:1/", rd, b"{}", None, 1.0, WebhookOptions())
        )
    (dropped,) = webhook_events(runs[2])
    assert "2 deliveries already waiting" in dropped["detail"] and dropped["final"] is True
    gate.set()
    queue.close(5.0)
    assert [e["event"] for r in runs[:2] for e in webhook_events(r)] == ["webhook_delivered"] * 2


def test_text_cut_mid_character_is_valid_utf8() -> None:
    from hopper.webhook import _text

    data = "é€😀".encode()
    assert _text(data[1:], cut_start=True, cut_end=False) == "€😀"
    assert _text(data[:-1], cut_start=False, cut_end=True) == "é€"
    assert _text(b"a\xffb", cut_start=False, cut_end=False) == "a\ufffdb"


def test_a_relative_secret_file_is_a_config_error(config_file: Path, hopper) -> None:
    config_file.write_text(config_file.read_text() + '[hooks]\nwebhook_secret_file = "rel/s"\n')
    result = hopper("config", "check")
    assert result.returncode != 0
    assert "'rel/s' must be an absolute path" in result.stdout + result.stderr


def test_a_huge_log_and_a_fifo_result_are_read_bounded(run_dir: Path, receiver: Receiver) -> None:
    """A 4 GiB sparse job.log costs 64 KiB; a FIFO result.md is refused, never opened."""
    import os

    receiver.start()
    with open(run_dir / "job.log", "ab") as fh:
        fh.truncate(4 << 30)
        fh.write(b"the end\n")
    os.mkfifo(run_dir / "result.md")
    runner = send(run_dir, receiver.url)
    try:
        wait_for(lambda: webhook_events(run_dir), what="the delivery")
    finally:
        runner.close(5.0)
    (got,) = receiver.got
    payload = json.loads(got.body)
    assert payload["log"]["size"] == (4 << 30) + 8 and payload["log"]["truncated"] is True
    assert payload["log"]["text"].endswith("the end\n")
    assert len(got.body) < 6 * (64 << 10) + 4096  # 64 KiB read; a NUL is 6 bytes in JSON
    assert payload["result"]["text"] is None and "FIFO" in payload["result"]["error"]
