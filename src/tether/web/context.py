"""What the inbox's API and pages share: the configuration, the site they serve (store,
rules, sessions, limiter, templates), the security headers, and JSON errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.web.auth import Limiter, ProxyAuth, Sessions, limiter_key
from tether.web.hosts import LOCAL_NAMES
from tether.web.service import Inbox, WebError
from tether.web.triage import isolate, one_line

if TYPE_CHECKING:
    from tether.store import Store

HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not "no-referrer": under it a browser sends "Origin: null" with the inbox's own form
    # posts, and the origin check (``hosts``) could not tell them from a forged one.
    (b"referrer-policy", b"same-origin"),
    # No other site may load a response (not even as an image or a script) or hold a
    # window handle on the inbox.
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
MAX_REASON = 2000


@dataclass
class WebConfig:
    store: Store
    app_ref: str | None = None
    proxy: ProxyAuth | None = None
    # The Host names the inbox answers to ("*": any; see ``hosts``).
    allowed_hosts: tuple[str, ...] = LOCAL_NAMES
    # The inbox's public address (--base-url): its origin may post forms, whatever Host a
    # reverse proxy passes on.
    base_url: str | None = None
    secure_cookies: bool = False  # also set when the request came over https
    session_ttl_s: float = 8 * 3600.0
    session_idle_s: float = 1800.0
    session_rotate_s: float = 900.0
    session_grace_s: float = 60.0  # a replaced session id still answers this long
    signin_limit: int = 5
    signin_window_s: float = 60.0
    live_poll_s: float = 1.0
    verify_max_age_s: float = 60.0  # re-verify the audit log at least this often
    max_body_bytes: int = 1024 * 1024
    # Whether this process drives decided runs on (serve --resume-runs): only then does a
    # decision's notice say the run continues.
    resumes_runs: bool = False
    # Slack interactivity (tether.web.slack): the app's signing secret, and which Slack
    # user is which registered approver (Slack user id -> approver name).
    slack_signing_secret: bytes | None = None
    slack_users: dict[str, str] = field(default_factory=dict)
    slack_reply_hosts: tuple[str, ...] = ("hooks.slack.com",)  # where response_urls may go
    clock: Callable[[], float] = time.time


@dataclass
class Site:
    """One running inbox: its configuration and the state its requests share."""

    config: WebConfig
    inbox: Inbox = field(init=False)
    sessions: Sessions = field(init=False)
    limiter: Limiter = field(init=False)
    templates: jinja2.Environment = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.inbox = Inbox(
            c.store, app_ref=c.app_ref, clock=c.clock, verify_max_age_s=c.verify_max_age_s
        )
        self.sessions = Sessions(
            ttl_s=c.session_ttl_s,
            idle_s=c.session_idle_s,
            rotate_s=c.session_rotate_s,
            grace_s=c.session_grace_s,
            clock=c.clock,
        )
        self.limiter = Limiter(limit=c.signin_limit, window_s=c.signin_window_s, clock=c.clock)
        self.templates = make_templates()

    @property
    def store(self) -> Store:
        return self.config.store


def https_site(config: WebConfig) -> bool:
    """Whether the inbox's public address is https (behind a TLS-terminating proxy the
    request itself arrives as http): cookies are then Secure and HSTS is sent."""
    return bool(config.base_url and config.base_url.lower().startswith("https://"))


def peer_of(request: Request) -> str | None:
    """The address at the other end of the connection (a proxy's, if there is one)."""
    return request.client.host if request.client else None


def client_key(site: Site, request: Request) -> str:
    """Whom failed sign-ins are counted against: the client, as far as a trusted proxy
    says (``ProxyAuth.client_address``), else the peer."""
    peer = peer_of(request)
    proxy = site.config.proxy
    if proxy is not None:
        # Every X-Forwarded-For line, in order: a proxy may add its own line after the
        # client's instead of appending to it.
        forwarded = ", ".join(request.headers.getlist("x-forwarded-for")) or None
        peer = proxy.client_address(peer, forwarded)
    return limiter_key(peer or "unknown")


def error_json(e: WebError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else {}
    if e.code == "rate_limited":
        headers["Retry-After"] = "60"
    return JSONResponse({"code": e.code, "message": e.message}, e.status, headers)


class SecurityHeaders:
    """Adds the security headers to every response (pages, API, static files, errors)."""

    def __init__(self, app: ASGIApp, hsts: bool = False) -> None:
        self.app = app
        self.extra = [(b"strict-transport-security", b"max-age=31536000")] if hsts else []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        api = str(scope.get("path", "")).startswith("/api/")
        extra = self.extra

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + SECURITY_HEADERS + extra
                if api and not any(k.lower() == b"cache-control" for k, _ in headers):
                    # Approvals are per-credential and change by the second: kept nowhere.
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyLimit:
    """Refuses a request body larger than ``limit`` bytes before anything reads it (the
    API reads its JSON before it looks at the credential, and uvicorn sets no limit): 413
    for a declared length too large, 411 for a body of undeclared length."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            refusal = None
            if length is not None:
                if not length.isdigit() or int(length) > self.limit:
                    message = f"A request body may hold at most {self.limit} bytes."
                    refusal = (413, "body_too_large", message)
            elif b"transfer-encoding" in headers:
                refusal = (411, "length_required", "Send the body with a Content-Length.")
            if refusal is not None:
                from tether.web.hosts import refuse

                await refuse(scope, send, *refusal)
                return
        await self.app(scope, receive, send)


def when(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def make_templates() -> jinja2.Environment:
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template is HTML; arguments must arrive as text
        undefined=jinja2.StrictUndefined,
    )
    templates.filters["when"] = when
    templates.filters["iso"] = isolate
    templates.filters["short"] = lambda v, n=120: one_line(v, n)  # the whole is shown below
    templates.filters["pathq"] = lambda v: quote(str(v), safe="")
    return templates
