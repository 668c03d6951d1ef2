"""Who may ask what: the token, its cookie, and CSRF, as ASGI middleware.

Every request needs a credential, pages and static files included; without
it the answer is 401 and carries no job data. Three ways to present one:

* ``Authorization: Bearer <token>`` (scripts, the API), anywhere;
* ``?token=<token>`` on a GET: answered with a redirect into the dashboard
  (``/ui/``) without it, setting the session cookie, so the token leaves the
  address bar and the browser history;
* that cookie, under ``/ui/`` only.

The cookie never holds the token. Browsers send a cookie for 127.0.0.1 to
every port on it, so any local listener may see it: it holds the *session
value*, an HMAC of a fixed purpose keyed by the token (:func:`session_value`),
which is not a bearer token, cannot be turned back into one, is sent only
under ``/ui/`` (``Path=/ui/; HttpOnly; SameSite=Strict``) and dies with the
token (``hopper web --new-token``).

State changes are POST only (the routes allow nothing else). A POST that
relies on the cookie must also carry ``X-Hopper-CSRF: 1`` (a header another
site cannot make a browser send without a CORS preflight, which this server
never grants) and, if the browser sends an ``Origin``, one whose host is
this server's ``Host``. A POST with the Bearer header is not exposed to CSRF
(no browser adds that header by itself).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

CSRF_HEADER = "x-hopper-csrf"
DASHBOARD = "/ui/"  # the page, its static files and its API calls; the cookie's Path
SESSION_PURPOSE = b"hopper web: the dashboard's session cookie, v1"
SAFE_METHODS = frozenset({"GET", "HEAD"})
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        b"base-uri 'none'; form-action 'self'",
    ),
]
UNAUTHORIZED = (
    "missing or wrong token: open the URL `hopper web` printed (it ends in ?token=...), "
    "or send 'Authorization: Bearer <the token in <root>/.hopper/web-token>'"
)


def cookie_name(token: str) -> str:
    """Per token, so two dashboards on one host (cookies ignore ports) keep their own."""
    return "hopper-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def session_value(token: str) -> str:
    """What the sign-in cookie holds: HMAC-SHA256(key=token, SESSION_PURPOSE).

    One-way (the token cannot be recovered from it), never equal to the token,
    and a new token makes every old session value worthless.
    """
    mac = hmac.new(token.encode(), SESSION_PURPOSE, hashlib.sha256).digest()
    return "s1." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _same(presented: str | None, expected: bytes) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), expected)


class TokenGate:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()
        self.session = session_value(token).encode()
        self.cookie = cookie_name(token)

    def _valid(self, presented: str | None) -> bool:
        return _same(presented, self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        method = scope["method"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [v for k, v in query if k == "token"]
        if offered:
            if method in SAFE_METHODS and len(offered) == 1 and self._valid(offered[0]):
                await self._sign_in(scope, headers, query, send)
            else:
                await _refuse(scope, send, 401, UNAUTHORIZED)
            return
        if method in SAFE_METHODS and scope["path"] in ("/", DASHBOARD.rstrip("/")):
            await _redirect(send, DASHBOARD.encode())  # where the page lives; no data
            return
        auth = headers.get("authorization")
        if auth is not None:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer" and self._valid(value.strip()):
                await self.app(scope, receive, _secured(send))
            else:
                await _refuse(scope, send, 401, UNAUTHORIZED)
            return
        in_dashboard = scope["path"].startswith(DASHBOARD)
        if not (
            in_dashboard and any(_same(v, self.session) for v in _cookies(headers, self.cookie))
        ):
            await _refuse(scope, send, 401, UNAUTHORIZED)
            return
        if method not in SAFE_METHODS:
            problem = csrf_problem(headers)
            if problem:
                await _refuse(scope, send, 403, problem)
                return
        await self.app(scope, receive, _secured(send))

    async def _sign_in(
        self, scope: Scope, headers: Headers, query: list[tuple[str, str]], send: Send
    ) -> None:
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        path = scope["path"]
        if not path.startswith(DASHBOARD):  # "/" and the bare API: the dashboard's copy
            path = DASHBOARD if path in ("/", DASHBOARD.rstrip("/")) else DASHBOARD[:-1] + path
        location = scope.get("root_path", "") + path + (f"?{rest}" if rest else "")
        secure = scope.get("scheme") == "https" or headers.get("x-forwarded-proto") == "https"
        cookie = (
            f"{self.cookie}={self.session.decode()}; Path={DASHBOARD}; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else "")
        )
        # an older hopper's cookie held the token itself, for every path: forget it
        legacy = f"{self.cookie}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
        await _redirect(send, location.encode("latin-1", "replace"), cookie.encode(), legacy)


async def _redirect(send: Send, location: bytes, *cookies: bytes | str) -> None:
    headers = [
        (b"location", location),
        (b"cache-control", b"no-store"),
        (b"content-length", b"0"),
        *SECURITY_HEADERS,
    ]
    headers.extend((b"set-cookie", c.encode() if isinstance(c, str) else c) for c in cookies)
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def csrf_problem(headers: Headers) -> str:
    """Why a cookie-authenticated POST is refused, or "" if it may go on."""
    if headers.get(CSRF_HEADER) != "1":
        return f"a state change needs the header '{CSRF_HEADER}: 1' (the dashboard sends it)"
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != headers.get("host", ""):
        return (
            f"Origin {origin!r} is not this server ({headers.get('host', '')!r}); "
            "behind a proxy, pass the Host header through"
        )
    return ""


def _cookies(headers: Headers, name: str) -> list[str]:
    """Every value the browser sent for ``name``: one per Path it holds (an older hopper's
    ``Path=/`` cookie may come along with ours), so none may hide another."""
    out: list[str] = []
    for raw in headers.getlist("cookie"):
        for pair in raw.split(";"):
            key, eq, value = pair.strip().partition("=")
            if eq and key == name:
                out.append(value.strip().strip('"'))
    return out


def _secured(send: Send) -> Send:
    async def wrapped(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))  # type: ignore[call-overload]
            headers.extend(SECURITY_HEADERS)
            message = {**message, "headers": headers}
        await send(message)

    return wrapped  # type: ignore[return-value]


async def _refuse(scope: Scope, send: Send, status: int, reason: str) -> None:
    """A refusal with a reason and nothing else: no job data, ever."""
    is_api = scope["path"].startswith(("/api/", DASHBOARD + "api/"))
    if is_api:
        body = json.dumps({"error": reason}).encode()
        kind = b"application/json"
    else:
        body = (
            "<!doctype html><meta charset=utf-8><title>hopper</title>"
            f"<p>hopper: {reason.replace('<', '&lt;')}</p>"
        ).encode()
        kind = b"text/html; charset=utf-8"
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *SECURITY_HEADERS,
    ]
    if status == 401 and is_api:
        headers.append((b"www-authenticate", b'Bearer realm="hopper"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
