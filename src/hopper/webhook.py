"""The completion webhook: what is POSTed, how it is signed, and how it is retried.

The body is one JSON object (:class:`Payload`): the final job record, its
outcome, the end of job.log and the start of the result text, each bounded
and read through :mod:`hopper.store.runtext` (no links, no FIFOs, no
ballooning). The same body bytes go out on every attempt of one delivery.

With a secret configured (``webhook_secret`` or ``webhook_secret_file``),
each attempt carries::

    X-Hopper-Timestamp: <unix seconds of this attempt>
    X-Hopper-Signature: sha256=<hex HMAC-SHA256(secret, b"<timestamp>." + body)>

so a receiver can check the body is ours and unchanged, and refuse an old
timestamp (a replay). ``X-Hopper-Delivery`` names the delivery (the same on
every attempt: a receiver dedupes on it); ``X-Hopper-Attempt`` counts from 1.
The secret is read when a delivery is built (a rotated file is picked up), and
is never logged or recorded.

Delivery runs off the hooks thread (hooks.py) on :class:`Deliveries`: a few
sender threads share one schedule, each delivery with its own next-attempt
time, so a receiver that is down delays none of the command hooks and a
delivery waiting for its retry holds no thread. An attempt fails on a refused
connection, a timeout or an HTTP 5xx and is tried again after ``backoff``,
doubling (at most ``BACKOFF_MAX``), up to ``attempts`` times; a 3xx or 4xx is
the receiver's final answer. Every attempt is an event in the job's
events.jsonl: ``webhook_delivered`` or ``webhook_failed`` (``attempt``,
``status``; ``retry_in`` or ``final``).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hopper.core.record import JobRecord
from hopper.store.jobfile import LOG_FILE
from hopper.store.runtext import read_end, read_start
from hopper.store.saferead import UnreadableFile, read_text

log = logging.getLogger(__name__)

RESULT_FILE = "result.md"
SECRET_LIMIT = 4096  # bytes of a webhook_secret_file
BACKOFF_MAX = 300.0  # seconds: the longest wait between two attempts
SIGNATURE_HEADER = "X-Hopper-Signature"
TIMESTAMP_HEADER = "X-Hopper-Timestamp"
DELIVERY_HEADER = "X-Hopper-Delivery"
ATTEMPT_HEADER = "X-Hopper-Attempt"


@dataclass(frozen=True)
class WebhookOptions:
    """``[hooks]``'s webhook keys (config.py), as the sender needs them."""

    secret: str | None = None
    secret_file: str | None = None
    attempts: int = 5
    backoff: float = 2.0
    log_tail: int = 64 << 10
    result_max: int = 64 << 10


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    state: str
    reason: str | None
    exit_code: int | None
    signal: int | None
    detail: str | None


class Excerpt(BaseModel):
    """Part of a run's text file: ``text`` (UTF-8, bad bytes replaced), or why there is none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    text: str | None
    size: int | None = None
    truncated: bool = False
    error: str | None = None


class Payload(BaseModel):
    """The webhook's JSON body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: str = "job_finished"
    delivery: str
    job: JobRecord
    outcome: Outcome
    log: Excerpt | None
    result: Excerpt | None


class SecretUnavailable(Exception):
    """``webhook_secret_file`` cannot be read: nothing is sent unsigned."""


@dataclass(frozen=True)
class Delivery:
    """One job's webhook: the body sent on every attempt, and where it goes."""

    id: str
    job_id: str
    url: str
    run_dir: Path
    body: bytes
    secret: bytes | None
    timeout: float
    options: WebhookOptions


def build(
    record: JobRecord, run_dir: Path, url: str, timeout: float, options: WebhookOptions
) -> Delivery:
    """The delivery for a finalized job. Raises :class:`SecretUnavailable`."""
    delivery_id = f"{record.id}.{secrets.token_hex(4)}"
    payload = Payload(
        delivery=delivery_id,
        job=record,
        outcome=Outcome(
            state=record.state.value,
            reason=record.reason.value if record.reason else None,
            exit_code=record.exit_code,
            signal=record.signal,
            detail=record.detail,
        ),
        log=_log_tail(run_dir, options.log_tail),
        result=_result(record, run_dir, options.result_max),
    )
    return Delivery(
        id=delivery_id,
        job_id=record.id,
        url=url,
        run_dir=run_dir,
        body=payload.model_dump_json().encode(),
        secret=load_secret(options),
        timeout=timeout,
        options=options,
    )


def load_secret(options: WebhookOptions) -> bytes | None:
    """The signing key: ``secret``, else the text of ``secret_file`` (ends stripped)."""
    if options.secret is not None:
        return options.secret.encode()
    if options.secret_file is None:
        return None
    path = Path(options.secret_file).expanduser()
    try:
        # The operator's file (a systemd credential, a Kubernetes secret): links are fine.
        text = read_text(path.resolve(), SECRET_LIMIT).strip()
    except FileNotFoundError:
        raise SecretUnavailable(
            f"webhook_secret_file {path}: no such file; create it (one line, the secret) "
            "or fix [hooks] webhook_secret_file"
        ) from None
    except (UnreadableFile, OSError) as exc:
        why = exc.message if isinstance(exc, UnreadableFile) else (exc.strerror or str(exc))
        raise SecretUnavailable(
            f"webhook_secret_file {path}: {why}; make it a small text file readable by "
            "the user hopper runs as"
        ) from None
    if not text:
        raise SecretUnavailable(f"webhook_secret_file {path} is empty; write the secret in it")
    return text.encode()


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``b"<timestamp>." + body`` with ``secret``."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _text(data: bytes, *, cut_start: bool, cut_end: bool) -> str:
    """UTF-8 text of bytes cut out of a file: a character split by a cut is left out,
    other bad bytes become U+FFFD."""
    if cut_start:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    if cut_end:
        for back in range(1, min(4, len(data)) + 1):
            lead = data[-back]
            if lead & 0xC0 == 0x80:
                continue
            need = (
                2
                if lead & 0xE0 == 0xC0
                else 3
                if lead & 0xF0 == 0xE0
                else 4
                if lead & 0xF8 == 0xF0
                else 1
            )
            if need > back:
                data = data[:-back]
            break
    return data.decode("utf-8", errors="replace")


def _unreadable(name: str, exc: UnreadableFile | OSError) -> Excerpt:
    why = exc.message if isinstance(exc, UnreadableFile) else (exc.strerror or str(exc))
    return Excerpt(file=name, text=None, error=f"{name} {why}")


def _log_tail(run_dir: Path, limit: int) -> Excerpt | None:
    if limit <= 0:
        return None
    try:
        data, size = read_end(run_dir, LOG_FILE, limit)
    except FileNotFoundError:
        return None
    except (UnreadableFile, OSError) as exc:
        return _unreadable(LOG_FILE, exc)
    cut = size > len(data)
    return Excerpt(
        file=LOG_FILE, text=_text(data, cut_start=cut, cut_end=False), size=size, truncated=cut
    )


def _result(record: JobRecord, run_dir: Path, limit: int) -> Excerpt | None:
    name = record.result_path or RESULT_FILE
    if limit <= 0 or "/" in name or name.startswith("."):
        return None
    try:
        data, more = read_start(run_dir, name, limit)
    except FileNotFoundError:
        return None
    except (UnreadableFile, OSError) as exc:
        return _unreadable(name, exc)
    return Excerpt(file=name, text=_text(data, cut_start=False, cut_end=more), truncated=more)


def public_url(url: str) -> str:
    """``url`` without its user, password, query and fragment: safe to log and record."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


@dataclass(frozen=True)
class Attempt:
    """How one POST went: ``status`` (None if no HTTP answer), ``ok``, ``retry``, ``detail``."""

    status: int | None
    ok: bool
    retry: bool
    detail: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a 3xx is the receiver's answer: the body is never re-sent elsewhere


_OPENER = urllib.request.build_opener(_NoRedirect())


def post(delivery: Delivery, attempt: int, now: float | None = None) -> Attempt:
    """POST the delivery's body once; never raises."""
    stamp = int(time.time() if now is None else now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "hopper-webhook",
        DELIVERY_HEADER: delivery.id,
        ATTEMPT_HEADER: str(attempt),
        TIMESTAMP_HEADER: str(stamp),
    }
    if delivery.secret is not None:
        headers[SIGNATURE_HEADER] = signature(delivery.secret, stamp, delivery.body)
    request = urllib.request.Request(  # noqa: S310 - the config allows http(s) only
        delivery.url, data=delivery.body, method="POST", headers=headers
    )
    try:
        with _OPENER.open(request, timeout=delivery.timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
        exc.close()
    except urllib.error.URLError as exc:
        reason = exc.reason
        why = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return Attempt(None, ok=False, retry=True, detail=f"{type(reason).__name__}: {why}")
    except TimeoutError:
        return Attempt(None, ok=False, retry=True, detail=f"no answer within {delivery.timeout:g}s")
    except (OSError, http.client.HTTPException) as exc:
        return Attempt(None, ok=False, retry=True, detail=f"{type(exc).__name__}: {exc}")
    if 200 <= status < 300:
        return Attempt(status, ok=True, retry=False, detail=f"HTTP {status}")
    if status >= 500:
        return Attempt(status, ok=False, retry=True, detail=f"HTTP {status}")
    return Attempt(status, ok=False, retry=False, detail=f"HTTP {status}: the receiver refused it")


def backoff(options: WebhookOptions, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based): doubling, capped."""
    return float(min(BACKOFF_MAX, options.backoff * 2 ** (attempt - 1)))
