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
    credential gets 401 and never reaches the server; and a protocol session belongs to the
    credential that opened it — presented with another (a call, its cancellation, its event
    stream, its deletion), it is answered as a session that does not exist."""

    def __init__(self, app: ASGIApp, store: Store) -> None:
        self.app = app
        self.store = store
        self.owners: dict[str, str] = {}  # Mcp-Session-Id -> the credential that opened it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            identity = authenticate(self.store, bearer(headers), "principal")
        except (CredentialMissing, CredentialRefused) as e:
            await _answer(
                send,
                401,
                {"error": "unauthorized", "detail": str(e)},
                [(b"www-authenticate", b"Bearer")],
            )
            return
        credential = identity.credential_id or ""
        session = headers.get("mcp-session-id")
        if session is not None and self.owners.get(session, credential) != credential:
            await _answer(send, 404, {"jsonrpc": "2.0", "id": None, "error": _NO_SESSION})
            return

        async def bind(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and session is None:
                for key, value in message.get("headers", []):
                    if key.decode("latin-1").lower() == "mcp-session-id":
                        self.owners.setdefault(value.decode("latin-1"), credential)
            await send(message)

        await self.app(scope, receive, bind)


_NO_SESSION = {"code": -32600, "message": "Session not found"}


async def _answer(
    send: Send, status: int, body: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(extra or [])],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


async def serve_http(gateway: Gateway, host: str, port: int) -> None:
    """Serve the gateway at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    gateway.over_http = True
    server = gateway.server()
    app = server.streamable_http_app(host=host)
    # On SIGTERM uvicorn stops accepting and waits for requests in flight (a judged call
    # runs to its recorded outcome), at most this long.
    config = uvicorn.Config(
        Authenticated(app, gateway.store),
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=30,
    )
    await uvicorn.Server(config).serve()
