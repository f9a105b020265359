"""What an upstream server sends back during a call, relayed to the client that made it.

While a ``tools/call`` runs upstream, the server may report progress, log, or ask the client for
something: a model's completion (``sampling/createMessage``), the user's input
(``elicitation/create``), the client's roots (``roots/list``). The gateway has no model,
user or roots of its own, so it passes each to the client whose call is in flight: progress
as ``notifications/progress`` on the client's own progress token (only when the client gave
one), log messages as the client's session allows them (the 2026-07-28 protocol: at the
level the request opted in to), the requests as the same requests to that client,
related to its call, and the client's answer (or refusal) back to the server. A request
the server sends when no call of its is in flight, or that the client cannot answer, is
answered with an error.

The gate is not in these paths: they are the client's own conversation with the server,
within a call the gate admitted (and the call's outcome is still recorded as the gate's).
Over the stateless 2026-07-28 HTTP protocol the SDK has no way to send the client a request
mid-call; those requests are refused there, as by the SDK itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from dataclasses import dataclass
from typing import Any

__all__ = ["CURRENT", "InFlight", "Relay", "callbacks", "progress_callback", "quietly", "relay_of"]


@dataclass(frozen=True)
class Relay:
    """The client-side end of a call in flight: its server session and request."""

    session: Any  # the gateway's ``ServerSession`` with that client
    request_id: Any
    progress_token: str | int | None


# Set by the gateway around a call (its task runs the gate, the handler and the upstream call).
CURRENT: contextvars.ContextVar[Relay | None] = contextvars.ContextVar(
    "tether_mcp_relay", default=None
)


def relay_of(ctx: Any) -> Relay | None:
    session = getattr(ctx, "session", None)
    if session is None:
        return None
    meta = getattr(ctx, "meta", None)
    token = None
    if isinstance(meta, dict):
        token = meta.get("progress_token", meta.get("progressToken"))
    return Relay(session, getattr(ctx, "request_id", None), token)


def progress_callback(relay: Relay | None) -> Any:
    """The upstream call's progress callback: forwards to the client's token, if any."""
    if relay is None or relay.progress_token is None:
        return None
    token = relay.progress_token

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await relay.session.send_progress_notification(
            token,
            progress,
            total,
            message,
            related_request_id=None if relay.request_id is None else str(relay.request_id),
        )

    return forward


class InFlight:
    """The relays of an upstream's calls in flight, newest last: a server's request goes to
    the client of the newest (over stdio there is only one client)."""

    def __init__(self) -> None:
        self.relays: list[Relay] = []

    def newest(self) -> Relay | None:
        return self.relays[-1] if self.relays else None


def callbacks(in_flight: InFlight) -> dict[str, Any]:
    """The upstream ``mcp.Client``'s sampling, elicitation and roots callbacks."""
    import mcp_types

    def refused(what: str) -> Any:
        return mcp_types.ErrorData(
            code=mcp_types.INVALID_REQUEST,
            message=f"tether: no client call is in flight to relay {what} to",
        )

    async def sampling(context: Any, params: Any) -> Any:
        relay = in_flight.newest()
        if relay is None:
            return refused("sampling")
        try:
            return await quietly(
                relay.session.create_message,
                messages=params.messages,
                max_tokens=params.max_tokens,
                system_prompt=params.system_prompt,
                include_context=params.include_context,
                temperature=params.temperature,
                stop_sequences=params.stop_sequences,
                metadata=params.metadata,
                model_preferences=params.model_preferences,
                related_request_id=relay.request_id,
            )
        except Exception as e:  # the client refused or cannot: the server is told so
            return _error(e)

    async def elicitation(context: Any, params: Any) -> Any:
        relay = in_flight.newest()
        if relay is None:
            return refused("elicitation")
        try:
            if getattr(params, "mode", "form") == "url":
                return await quietly(
                    relay.session.elicit_url,
                    params.message,
                    params.url,
                    params.elicitation_id,
                    relay.request_id,
                )
            return await quietly(
                relay.session.elicit_form,
                params.message,
                params.requested_schema,
                relay.request_id,
            )
        except Exception as e:
            return _error(e)

    async def roots(context: Any) -> Any:
        relay = in_flight.newest()
        if relay is None:
            return refused("roots/list")
        try:
            return await quietly(relay.session.list_roots)
        except Exception as e:
            return _error(e)

    async def logging(params: Any) -> None:
        relay = in_flight.newest()
        if relay is None:
            return  # a log line outside any call has no client to go to
        with contextlib.suppress(Exception):  # a client gone or not listening: dropped
            await quietly(
                relay.session.send_log_message,
                params.level,
                params.data,
                params.logger,
                related_request_id=relay.request_id,
            )

    return {
        "logging_callback": logging,
        "sampling_callback": sampling,
        "elicitation_callback": elicitation,
        "list_roots_callback": roots,
    }


def quietly(method: Any, *args: Any, **kwargs: Any) -> Any:
    """Start ``method``'s request without the SDK's deprecation warning (sampling and roots
    are deprecated by the 2026-07-28 protocol; servers of the handshake era still use them,
    and relaying them is this module's purpose). The warning is raised on the call, before
    the coroutine runs, so the filter spans no await."""
    from mcp.shared.exceptions import MCPDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return method(*args, **kwargs)


def _error(e: Exception) -> Any:
    import mcp_types
    from mcp.shared.exceptions import MCPError

    if isinstance(e, MCPError):
        return e.error
    return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=f"tether: {e}")
