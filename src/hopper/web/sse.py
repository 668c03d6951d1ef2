"""Server-Sent Events: the wire format and the one generator every stream uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from hopper.web.feeds import Message, Subscriber, size

KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from timing out
RETRY_MS = 2000
FRAME_BYTES = 256 * 1024  # a woken client is sent at most about this much at once


def wants_stream(accept: str | None) -> bool:
    return accept is not None and "text/event-stream" in accept


def encode(message: Message) -> bytes:
    """One frame; a multi-line ``data`` (pretty-printed job.json) becomes several ``data:``
    lines, which the browser joins with newlines again."""
    event, data = message
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {event}\n{lines}\n".encode()


async def frames(
    sub: Subscriber, backlog: list[Message], on_close: Callable[[], None]
) -> AsyncIterator[bytes]:
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        for i in range(0, len(backlog), 8):  # the backlog in frames of at most ~1.5 MiB
            yield b"".join(encode(m) for m in backlog[i : i + 8])
        while True:
            try:
                first = await asyncio.wait_for(sub.queue.get(), KEEPALIVE)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if first is not None:
                sub.queued -= size(first)
            batch = [first]
            weight = 0 if first is None else size(first)
            while not sub.queue.empty() and batch[-1] is not None and weight < FRAME_BYTES:
                batch.append(sub.take())
                weight += size(batch[-1]) if batch[-1] is not None else 0
            yield b"".join(encode(m) for m in batch if m is not None)
            if batch[-1] is None:
                return
    finally:
        on_close()


def response(
    sub: Subscriber, backlog: list[Message], on_close: Callable[[], None]
) -> StreamingResponse:
    return StreamingResponse(
        frames(sub, backlog, on_close),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
