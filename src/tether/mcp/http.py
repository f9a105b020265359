"""The gateway over streamable HTTP (bound to 127.0.0.1 unless told otherwise).

Over HTTP the caller is whoever presents a principal credential (``tether principals add``)
as ``Authorization: Bearer tth_...``: its principal, tenant and scopes are the run's, never
anything the client says about itself. A request without a valid credential is answered
401 before it reaches the MCP server. The session is the SDK's ``Mcp-Session-Id``, so a
client that reconnects to the same session and sends a request again gets the recorded
result.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from tether.errors import CredentialMissing, CredentialRefused
from tether.identity import authenticate
from tether.mcp.caller import bearer

if TYPE_CHECKING:
    from tether.mcp.gateway import Gateway
    from tether.store.base import Store

__all__ = ["Authenticated", "serve_http"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Authenticated:
    """ASGI middleware: a request to the MCP endpoint without a valid principal
    credential gets 401 and never reaches the server."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            try:
                authenticate(self.store, bearer(headers), "principal")
            except (CredentialMissing, CredentialRefused) as e:
                body = json.dumps({"error": "unauthorized", "detail": str(e)}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_http(gateway: Gateway, host: str, port: int) -> None:
    """Serve the gateway at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    gateway.over_http = True
    server = gateway.server()
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(
        Authenticated(app, gateway.store), host=host, port=port, log_level="warning"
    )
    await uvicorn.Server(config).serve()
