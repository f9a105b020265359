"""Which hosts the inbox answers to, and which origins may post its forms.

DNS rebinding: a page on evil.example whose name the attacker re-points at 127.0.0.1 is, to the
browser, the same origin as the inbox, so neither the same-origin policy nor SameSite cookies
stand in its way; only the ``Host`` header still says ``evil.example``. Every request whose
Host is not one the inbox was told it is called (the bound address, the localhost names, the
public ``--base-url`` and each ``--allowed-host``) is refused before it reaches a route.

A form post (any unsafe method outside ``/api/``, which takes no cookie) must also come from
the inbox's own origin when the browser says where it comes from: ``Sec-Fetch-Site`` other
than ``same-origin``, an ``Origin: null`` or an ``Origin`` naming another host and port is
refused. The session's CSRF token remains the main defence; this refuses a cross-origin post
even before the token is looked at, and stops a sibling site on another localhost port, which
SameSite treats as the same site.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``),
    lower-cased, or None if it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    elif value.count(":") == 1:
        name, port = value.split(":")
    elif ":" in value:
        return None  # an unbracketed IPv6 literal is not a valid Host
    else:
        name, port = value, ""
    if port and not port.isdigit():
        return None
    name = name.rstrip(".")
    return name or None


def allowed_hosts(bound: str, base_url: str | None, extra: Iterable[str]) -> tuple[str, ...]:
    """What ``tether serve`` answers to by default: the localhost names, the address it is
    bound to (unless a wildcard), the public base URL's host, and each ``--allowed-host``."""
    names = list(LOCAL_NAMES)
    if bound.strip("[]") not in WILDCARD_BINDS:
        names.append(bound.strip("[]").lower())
    if base_url:
        host = urlsplit(base_url).hostname
        if host:
            names.append(host.lower())
    names += [h.strip().lower().strip("[]") for h in extra if h.strip()]
    return tuple(dict.fromkeys(names))


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` as a browser sends it in ``Origin`` (lower-case,
    no default port), or None if it has none."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


class HostGuard:
    """Refuses requests for other hosts, and cross-origin form posts (see the module).
    ``origins`` are accepted besides the request's own Host: the public ``--base-url``,
    for a reverse proxy that does not pass the browser's Host on."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str], origins: Iterable[str] = ()) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.any_host = "*" in self.hosts
        self.origins = frozenset(o for o in map(origin_of, origins) if o)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan; the inbox has no websockets
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not self.any_host and host_name(host) not in self.hosts:
            # The Host is the attacker's text: it is not echoed.
            await refuse(
                scope,
                send,
                400,
                "host_not_allowed",
                "This inbox does not answer to that host name. If it is the inbox's real "
                "address, start tether serve with --allowed-host NAME.",
            )
            return
        path: str = scope.get("path", "")
        if (
            scope.get("method", "GET") not in SAFE_METHODS
            and not path.startswith("/api/")
            and not same_origin(headers, host, self.origins)
        ):
            await refuse(
                scope, send, 403, "cross_origin", "A form post from another site is refused."
            )
            return
        await self.app(scope, receive, send)


def same_origin(headers: dict[str, str], host: str, origins: frozenset[str] = frozenset()) -> bool:
    """Whether what the browser says about a request's origin (if anything) is this host
    (or one of ``origins``)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    origin = headers.get("origin")
    if origin is None:
        return True  # not a browser, or an old one: the CSRF token decides
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https"):
        return False  # "null" among others
    return parts.netloc.lower() == host.strip().lower() or origin_of(origin) in origins


async def refuse(scope: Scope, send: Send, status: int, code: str, message: str) -> None:
    """Answer before any route runs: the API's JSON error shape under ``/api/``, else text."""
    import json

    if str(scope.get("path", "")).startswith("/api/"):
        body = json.dumps({"code": code, "message": message}).encode()
        kind = b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
