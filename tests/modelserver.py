"""A scripted local model server for running the real agent CLIs offline.

Standard library only. It listens on 127.0.0.1 with an ephemeral port and speaks
just enough of two streaming APIs for a headless agent turn:

* Anthropic Messages (Claude Code): ``POST /v1/messages`` (``?beta=true``) with
  SSE events message_start, content_block_start/delta/stop, message_delta (with
  usage) and message_stop; non-streaming requests get one JSON message.
* OpenAI Responses (Codex): ``POST /v1/responses`` with SSE events
  response.created, response.output_item.added, response.output_text.delta,
  response.output_item.done (message or function_call) and response.completed
  (with usage).

``HEAD /`` (Claude Code's connectivity probe) and ``GET /`` answer 200; other
GETs (e.g. ``/v1/models``) answer 404 so clients fall back to their defaults.

Usage::

    from modelserver import ModelServer, text, tool, error

    with ModelServer() as srv:
        srv.script([tool("touch made.txt"), text("done")])
        ...  # run the CLI with srv.url as its base URL
        assert srv.requests[-1].body["messages"] ...

Scripting: each model request (a POST to one of the two endpoints) takes the next
turn from a FIFO queue; when the queue is empty the reply is ``text(default_text)``.
A turn is one of:

* ``text(s, delay=0.0, chunks=3)`` — a plain assistant text reply; ``delay``
  seconds pass between SSE chunks (a slow stream; the text is sent in
  ``chunks`` deltas of equal size: ``"tick0\ntick1\n"`` with ``chunks=2`` is
  one line per delta).
* ``text(..., stall=30.0)`` — (Anthropic) the reply starts (message_start, an
  empty text block) and then nothing comes for ``stall`` seconds before its
  first delta: a model that went quiet mid-reply.
* ``text(..., usage={"input_tokens": 500, "output_tokens": 90})`` — the token
  figures the reply reports (any of input_tokens, output_tokens,
  cache_creation_input_tokens, cache_read_input_tokens; default 10 in, 5 out), to
  cross a budget; ``tool(..., usage=…)`` likewise.
* ``tool(command, delay=0.0)`` — one shell tool call running ``command``. For
  Anthropic it is a ``Bash`` tool_use ``{"command": command}``; for Responses the
  tool name and argument shape are taken from the request's ``tools`` list
  (Codex 0.169: ``exec_command`` with ``{"cmd": command}``; older ``shell_command``
  ``{"command": str}`` and ``shell`` ``{"command": [argv]}`` are also handled).
  Script the final answer as the next turn (the CLI sends the tool result in a
  new request).
* ``error(status, times=1, retry_after=0)`` — an HTTP error (401, 429, 500, …)
  with the API's JSON error body, for ``times`` consecutive requests; a
  ``retry-after`` (seconds) and ``retry-after-ms`` header are sent (0 by default,
  so clients that honour them retry at once).

Inspection:

* ``srv.url`` — ``http://127.0.0.1:PORT`` (append ``/v1`` for Codex's base_url).
* ``srv.requests`` — every request received, in order, as ``Request`` records
  (method, path, headers, body parsed as JSON or None, and ``turn``: the turn
  that answered it, or None for non-model requests).
* ``srv.model_requests()`` — only the POSTs that consumed a turn.
* ``last_user_text(body)`` — the text of the last *user* message of a request
  body (either API). Claude Code puts a ``role: "system"`` message after the user
  message and Codex prepends context as user messages, so ``messages[-1]`` is
  not the prompt; tool results (Claude) and function_call_output items (Codex)
  are skipped.
* ``srv.wait_for_requests(n, timeout)`` — block until ``n`` model requests arrived.

Side requests: Claude Code 2.1.197 in interactive mode asks the model for a session
title (a request with no tools whose ``output_config.format`` is a JSON schema
requiring ``title``) at the same moment as the turn's own request. It is answered
``{"title": "Scripted session"}`` without taking a scripted turn, so its ``turn``
is None and ``model_requests()`` leaves it out (``srv.requests`` keeps it), and its
stream's deltas are not counted in ``deltas_sent``.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "ModelServer",
    "Request",
    "Turn",
    "error",
    "last_user_text",
    "text",
    "tool",
]


# --------------------------------------------------------------------------- turns


@dataclass(frozen=True)
class Turn:
    """One scripted reply. Build with text(), tool() or error()."""

    kind: str  # "text" | "tool" | "error"
    text: str = ""
    command: str = ""
    status: int = 0
    times: int = 1
    delay: float = 0.0
    retry_after: float = 0.0
    chunks: int = 3
    usage: dict[str, int] | None = None  # token figures reported (default 10 in, 5 out)
    stall: float = 0.0  # seconds of silence before the first text delta (Anthropic)


def text(
    s: str,
    delay: float = 0.0,
    chunks: int = 3,
    usage: dict[str, int] | None = None,
    stall: float = 0.0,
) -> Turn:
    """A plain text reply in ``chunks`` deltas; ``delay`` seconds between stream chunks;
    ``usage``: the token figures it reports (Anthropic's names, see :func:`_usage`);
    ``stall``: seconds of silence after the reply started, before its first delta."""
    return Turn("text", text=s, delay=delay, chunks=chunks, usage=usage, stall=stall)


def tool(command: str, delay: float = 0.0, usage: dict[str, int] | None = None) -> Turn:
    """One shell tool call running ``command`` (Bash for Claude, the shell tool for Codex)."""
    return Turn("tool", command=command, delay=delay, usage=usage)


def _usage(turn: Turn) -> dict[str, int]:
    """A turn's token figures, Anthropic's names: input_tokens, output_tokens,
    cache_creation_input_tokens, cache_read_input_tokens (Responses: cached_tokens is
    cache_read_input_tokens, counted inside input_tokens as OpenAI counts it)."""
    figures = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return {**figures, **(turn.usage or {})}


def error(status: int, times: int = 1, retry_after: float = 0.0) -> Turn:
    """An HTTP error ``status`` for ``times`` consecutive model requests."""
    return Turn("error", status=status, times=times, retry_after=retry_after)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    turn: Turn | None = None
    time: float = field(default_factory=time.time)


# --------------------------------------------------------------------------- helpers


def _content_text(content: Any, *, skip_types: tuple[str, ...] = ()) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") in skip_types:
            continue
        t = block.get("text")
        if isinstance(t, str):
            parts.append(t)
    return "\n".join(parts) if parts else None


def last_user_text(body: Any) -> str | None:
    """Text of the last user message (with text) in an Anthropic or Responses body."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list):  # Anthropic Messages
        items = body["messages"]
    elif isinstance(body.get("input"), list):  # OpenAI Responses
        items = body["input"]
    elif isinstance(body.get("input"), str):
        return str(body["input"])
    else:
        return None
    for item in reversed(items):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        if item.get("type") not in (None, "message"):
            continue
        t = _content_text(item.get("content"), skip_types=("tool_result",))
        if t:
            return t
    return None


def _responses_shell_call(tools: Any, command: str) -> dict[str, Any]:
    """The Responses output item that calls the request's shell tool with ``command``."""
    names: dict[str, dict[str, Any]] = {}
    for t in tools if isinstance(tools, list) else []:
        if isinstance(t, dict):
            if t.get("type") == "local_shell":
                names.setdefault("local_shell", t)
            elif isinstance(t.get("name"), str):
                names[t["name"]] = t
    args: dict[str, Any]
    if "exec_command" in names:
        name, args = "exec_command", {"cmd": command}
    elif "shell_command" in names:
        name, args = "shell_command", {"command": command}
    elif "shell" in names:
        name, args = "shell", {"command": ["bash", "-lc", command]}
    elif "local_shell" in names:
        return {
            "type": "local_shell_call",
            "call_id": "call_shell_1",
            "status": "completed",
            "action": {"type": "exec", "command": ["bash", "-lc", command]},
        }
    else:
        raise ValueError(f"no shell tool in request tools: {sorted(names)}")
    return {
        "type": "function_call",
        "name": name,
        "arguments": json.dumps(args),
        "call_id": "call_shell_1",
        "status": "completed",
    }


TITLE_REPLY = '{"title": "Scripted session"}'


def _is_title_request(body: Any) -> bool:
    """Claude Code's session-title request (a side request, not the conversation's)."""
    if not isinstance(body, dict) or body.get("tools"):
        return False
    fmt = (body.get("output_config") or {}).get("format") or {}
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    required = schema.get("required") if isinstance(schema, dict) else None
    return fmt.get("type") == "json_schema" and required == ["title"]


def _chunks(s: str, n: int = 3) -> list[str]:
    if not s:
        return [""]
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)]


_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- server


class ModelServer:
    """Scripted Anthropic-Messages / OpenAI-Responses server on 127.0.0.1:<ephemeral>."""

    def __init__(self, default_text: str = "OK", model: str = "scripted-model") -> None:
        self.default_text = default_text
        self.model = model
        self.requests: list[Request] = []
        self._queue: collections.deque[Turn] = collections.deque()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self.deltas_sent = 0  # streamed text/tool deltas written to clients so far
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()  # set by stop: a scripted delay ends at once

    # -- lifecycle
    def start(self) -> ModelServer:
        server = self

        class Handler(_Handler):
            srv = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting
    def script(self, turns: Iterable[Turn]) -> None:
        """Append turns to the reply queue (consumed one per model request)."""
        with self._lock:
            self._queue.extend(turns)

    def clear(self) -> None:
        """Drop the replies not served yet (what an interrupted turn never asked for)."""
        with self._lock:
            self._queue.clear()

    def pending(self) -> int:
        with self._lock:
            return sum(t.times if t.kind == "error" else 1 for t in self._queue)

    def model_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.turn is not None]

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(1 for r in self.requests if r.turn is not None) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def wait_for_deltas(self, n: int, timeout: float = 10.0) -> bool:
        """Block until ``n`` stream deltas have been written to clients."""
        with self._cond:
            return self._cond.wait_for(lambda: self.deltas_sent >= n, timeout)

    def _delta_sent(self) -> None:
        with self._cond:
            self.deltas_sent += 1
            self._cond.notify_all()

    def _next_turn(self) -> Turn:
        if not self._queue:
            return text(self.default_text)
        turn = self._queue[0]
        if turn.kind == "error" and turn.times > 1:
            self._queue[0] = Turn(
                "error", status=turn.status, times=turn.times - 1, retry_after=turn.retry_after
            )
            return turn
        return self._queue.popleft()

    def _record(self, req: Request, consume: bool) -> Turn | None:
        with self._cond:
            if consume:
                req.turn = self._next_turn()
            self.requests.append(req)
            self._cond.notify_all()
            return req.turn

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"


class _Handler(BaseHTTPRequestHandler):
    srv: ModelServer
    protocol_version = "HTTP/1.1"
    side_request = False  # a title request: its deltas are not counted

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing
    def _read_body(self) -> Any:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()

    def _event(self, name: str, data: dict[str, Any], delay: float = 0.0) -> None:
        if delay and self.srv.stopping.wait(delay):
            return  # the server is stopping: the client is not waiting for this any more
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        if name.endswith("delta") and name != "message_delta" and not self.side_request:
            self.srv._delta_sent()
        self.wfile.flush()

    def _record(self, body: Any, consume: bool) -> Turn | None:
        req = Request(self.command, self.path, dict(self.headers.items()), body)
        return self.srv._record(req, consume)

    # -- verbs
    def do_HEAD(self) -> None:
        self._record(None, False)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record(None, False)
        if self.path in ("/", ""):
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, {"error": {"type": "not_found_error", "message": "not found"}})

    def do_POST(self) -> None:
        body = self._read_body()
        path = self.path.split("?", 1)[0]
        if path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/responses"):
            api = "responses"
        else:
            self._record(body, False)
            self._send_json(404, {"error": {"type": "not_found_error", "message": path}})
            return
        if api == "anthropic" and _is_title_request(body):
            self._record(body, False)
            self.side_request = True
            self._anthropic(body, text(TITLE_REPLY))
            return
        turn = self._record(body, True)
        assert turn is not None
        try:
            if turn.kind == "error":
                self._error(api, turn)
            elif api == "anthropic":
                self._anthropic(body, turn)
            else:
                self._responses(body, turn)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream (e.g. it was interrupted)

    # -- errors
    def _error(self, api: str, turn: Turn) -> None:
        msg = f"scripted error {turn.status}"
        headers = {
            "retry-after": str(int(turn.retry_after)),
            "retry-after-ms": str(int(turn.retry_after * 1000)),
        }
        if api == "anthropic":
            etype = _ANTHROPIC_ERRORS.get(turn.status, "api_error")
            obj: dict[str, Any] = {"type": "error", "error": {"type": etype, "message": msg}}
            headers["request-id"] = self.srv.next_id("req")
        else:
            code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(turn.status)
            obj = {"error": {"message": msg, "type": "scripted_error", "code": code}}
        self._send_json(turn.status, obj, headers)

    # -- Anthropic Messages
    def _anthropic(self, body: Any, turn: Turn) -> None:
        body = body if isinstance(body, dict) else {}
        msg_id = self.srv.next_id("msg")
        model = body.get("model") or self.srv.model
        if turn.kind == "tool":
            block = {
                "type": "tool_use",
                "id": self.srv.next_id("toolu"),
                "name": "Bash",
                "input": {"command": turn.command, "description": "Run scripted command"},
            }
            stop_reason = "tool_use"
        else:
            block = {"type": "text", "text": turn.text}
            stop_reason = "end_turn"
        usage = _usage(turn)
        if not body.get("stream"):
            self._send_json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [block],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        d = turn.delay
        self._start_sse()
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        if block["type"] == "text":
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            for i, piece in enumerate(_chunks(turn.text, turn.chunks)):
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                    d + (turn.stall if i == 0 else 0.0),
                )
        else:
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {**block, "input": {}},
                },
            )
            for piece in _chunks(json.dumps(block["input"])):
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                    d,
                )
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0}, d)
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})

    # -- OpenAI Responses
    def _responses(self, body: Any, turn: Turn) -> None:
        body = body if isinstance(body, dict) else {}
        resp_id = self.srv.next_id("resp")
        model = body.get("model") or self.srv.model
        d = turn.delay
        seq = itertools.count()
        base: dict[str, Any] = {
            "id": resp_id,
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "output": [],
        }

        def ev(name: str, data: dict[str, Any], delay: float = 0.0) -> None:
            self._event(name, {"type": name, "sequence_number": next(seq), **data}, delay)

        if turn.kind == "tool":
            item = {
                "id": self.srv.next_id("fc"),
                **_responses_shell_call(body.get("tools"), turn.command),
            }
        else:
            item = {
                "id": self.srv.next_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        self._start_sse()
        ev("response.created", {"response": {**base, "status": "in_progress"}})
        if item["type"] == "message":
            ev(
                "response.output_item.added",
                {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
            )
            ev(
                "response.content_part.added",
                {
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                },
            )
            for piece in _chunks(turn.text, turn.chunks):
                ev(
                    "response.output_text.delta",
                    {"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": piece},
                    d,
                )
            ev(
                "response.output_text.done",
                {"item_id": item["id"], "output_index": 0, "content_index": 0, "text": turn.text},
                d,
            )
        else:
            ev("response.output_item.added", {"output_index": 0, "item": item}, d)
        ev("response.output_item.done", {"output_index": 0, "item": item}, d)
        figures = _usage(turn)
        cached = figures["cache_read_input_tokens"]
        usage = {
            "input_tokens": figures["input_tokens"] + cached,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": figures["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": figures["input_tokens"] + cached + figures["output_tokens"],
        }
        ev(
            "response.completed",
            {"response": {**base, "status": "completed", "output": [item], "usage": usage}},
        )
