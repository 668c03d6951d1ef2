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
from hopper.web.listen import bind, may_print_token


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


def how_to_get_url(layout: Layout, host: str, port: int) -> str:
    where = [f"--root {layout.root}"]
    if host != "127.0.0.1":
        where.append(f"--host {host}")
    if port != 8642:
        where.append(f"--port {port}")
    return (
        "hopper web: the sign-in URL is not printed here (not a terminal, or the journal): "
        f"get it with 'hopper web --print-url {' '.join(where)}' "
        f"(the token is in {web_token.token_path(layout)})"
    )


def serve(layout: Layout, config: Config, host: str, port: int, *, new_token: bool = False) -> int:
    # bound first: a taken port is one line (PortInUse), before a token is made or printed
    sock = bind(host, port)
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
    if may_print_token(sys.stdout, sys.stderr):
        print(url_for(host, port, token), flush=True)
    else:
        print(how_to_get_url(layout, host, port), file=sys.stderr, flush=True)
    server.run(sockets=[sock])
    return 0
