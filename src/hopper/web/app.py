"""The dashboard as an ASGI app: the API routes, the page, its static files.

:func:`create_app` wires a :class:`~hopper.web.catalog.Catalog` and a
:class:`~hopper.web.hub.Hub` into a Starlette app behind the
:class:`~hopper.web.gate.TokenGate`. The page is one HTML file with plain
JavaScript and CSS and the vendored xterm.js: all loaded into memory at start
(a few hundred KB) and served from there, so no path a client sends ever
reaches the file system.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hopper.config import Config
from hopper.store.layout import Layout
from hopper.web import api, budgets, gate
from hopper.web.actions import Refused
from hopper.web.catalog import Catalog
from hopper.web.compress import Compress
from hopper.web.gate import TokenGate
from hopper.web.hub import Hub

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str
    gzipped: bytes  # sent to browsers that accept gzip: xterm.js is 490 KB, 120 KB gzipped


def load_assets() -> dict[str, Asset]:
    """Every file under ``hopper/web/static`` by its URL path (``/static/...``)."""
    out: dict[str, Asset] = {}
    top = resources.files("hopper.web") / "static"

    def walk(node: resources.abc.Traversable, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
                continue
            suffix = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ".txt"
            body = child.read_bytes()
            out[f"/static/{prefix}{child.name}"] = Asset(
                body,
                TYPES.get(suffix, "application/octet-stream"),
                hashlib.sha256(body).hexdigest()[:16],
                gzip.compress(body, mtime=0),
            )

    walk(top, "")
    return out


def create_app(
    layout: Layout, token: str, config: Config | None = None, *, fallback: float = 10.0
) -> Starlette:
    catalog = Catalog(layout)
    hub = Hub(layout, catalog, fallback=fallback)
    assets = load_assets()

    async def page(request: Request) -> Response:
        return _asset(request, assets["/static/index.html"])

    async def static(request: Request) -> Response:
        asset = assets.get("/static/" + request.path_params["path"])
        if asset is None:
            return Response("not found", status_code=404, media_type="text/plain")
        return _asset(request, asset)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.stop()
            catalog.close()

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return api.error(exc.reason, exc.status)

    # Everything the page uses lives under /ui/, the session cookie's Path (gate.py);
    # scripts use the same API at /api/ with the Bearer header.
    routes = [Route(gate.DASHBOARD, page)]
    for prefix in ("", gate.DASHBOARD.rstrip("/")):
        routes.append(Route(prefix + "/static/{path:path}", static))
        routes.extend(_api_routes(prefix))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={Refused: refused},
        middleware=[Middleware(TokenGate, token=token), Middleware(Compress)],
    )
    app.state.layout = layout
    app.state.config = config or Config()
    app.state.catalog = catalog
    app.state.hub = hub
    return app


def _api_routes(prefix: str) -> list[Route]:
    return [
        Route(prefix + path, endpoint, methods=methods)
        for path, endpoint, methods in [
            ("/api/jobs", api.list_jobs, None),
            ("/api/page", api.page_, None),
            ("/api/overview", api.overview_, None),
            ("/api/usage", api.usage, None),
            ("/api/budgets", budgets.budgets, None),
            ("/api/jobs/{id}", api.get_job, None),
            ("/api/jobs/{id}/log", api.get_log, None),
            ("/api/jobs/{id}/events", api.get_events, None),
            ("/api/jobs/{id}/cast", api.get_cast, None),
            ("/api/jobs/{id}/result", api.get_result, None),
            ("/api/jobs/{id}/abort", api.abort, ["POST"]),
            ("/api/jobs/{id}/retry", api.retry, ["POST"]),
            ("/api/submit", api.submit, ["POST"]),
            ("/api/pause", api.pause, ["POST"]),
            ("/api/resume", api.resume, ["POST"]),
        ]
    ]


def _asset(request: Request, asset: Asset) -> Response:
    headers = {"etag": f'"{asset.etag}"', "cache-control": "no-cache", "vary": "accept-encoding"}
    if request.headers.get("if-none-match") == f'"{asset.etag}"':
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["content-encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)
