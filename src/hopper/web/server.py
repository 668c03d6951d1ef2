"""Run the dashboard with uvicorn, in the foreground."""

from __future__ import annotations

import ipaddress
import sys
from types import FrameType

import uvicorn

from hopper.config import Config
from hopper.store.layout import Layout
from hopper.web import token as web_token
from hopper.web.app import create_app
from hopper.web.guard import guarded_protocol


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_for(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def serve(layout: Layout, config: Config, host: str, port: int, *, new_token: bool = False) -> int:
    token = web_token.rotate(layout) if new_token else web_token.load_or_create(layout)
    app = create_app(layout, token, config)
    hub = app.state.hub

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Streams never end by themselves: end them, or uvicorn waits for them and
            # then cancels each with a traceback.
            hub.close_clients()
            super().handle_exit(sig, frame)

    server = Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
            proxy_headers=False,
            # half-sent requests are closed after 10 s, and connections stay below the
            # descriptor limit (guard.py): one client cannot make accept() fail with EMFILE
            http=guarded_protocol(),
        )
    )
    print(f"hopper web: serving {layout.root}", file=sys.stderr)
    if not is_loopback(host):
        print(
            f"hopper web: listening on {host}, not only this machine: plain HTTP carries the "
            "token in the clear; put a TLS reverse proxy in front (docs/web.md)",
            file=sys.stderr,
        )
    print(url_for(host, port, token), flush=True)
    server.run()
    return 0
