"""Responses gzip-compressed for browsers that accept it, except the live streams.

Starlette's :class:`~starlette.middleware.gzip.GZipMiddleware` does the
compressing (a page of the list is ~75 KB of job.json text, ~8 KB on the
wire). What it must never touch is decided here from the request, whatever
the installed Starlette's own defaults are: a Server-Sent-Events request
(``Accept: text/event-stream``), whose frames must reach the browser as they
are written, not when a compressor's buffer fills; and the static files,
which ``app.py`` serves already gzipped; and a ``Range`` request for part of
job.log, whose ``Content-Range`` counts the file's own bytes.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from hopper.web.sse import wants_stream

MINIMUM_SIZE = 1024  # smaller answers go as they are: compressing them saves nothing
LEVEL = 6  # zlib's default: most of level 9's gain for a fraction of its CPU


class Compress:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=MINIMUM_SIZE, compresslevel=LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _passes_through(scope):
            await self.app(scope, receive, send)
            return
        await self.gzip(scope, receive, send)


def _passes_through(scope: Scope) -> bool:
    if "/static/" in scope.get("path", ""):
        return True
    for key, value in scope.get("headers", ()):
        if key == b"accept" and wants_stream(value.decode("latin-1")):
            return True
        if key == b"range":  # a byte range of job.log: its offsets are the file's, as sent
            return True
    return False
