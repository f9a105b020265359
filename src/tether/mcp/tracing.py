"""The MCP SDK's own span per request, made only when something would record it.

The SDK's low-level server wraps every inbound message in ``OpenTelemetryMiddleware``: a
span started and made current through four nested context managers, whether or not any
tracer provider is configured. With none (OpenTelemetry's no-op tracer) that is pure cost
on every ``tools/call``, about a tenth of an in-process read's time when profiled. The
gateway keeps the SDK's middleware and asks, per message, whether tracing is on
(``tether.telemetry.otel.active``: the same global providers the SDK's tracer reads), so a
provider configured after the server was built is honoured from its next message on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.telemetry.otel import active as telemetry_active

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext

__all__ = ["WhenTraced"]


class WhenTraced:
    """``middleware`` when a tracer or meter provider is configured; straight through
    otherwise."""

    def __init__(self, middleware: ServerMiddleware[Any]) -> None:
        self.middleware = middleware

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if telemetry_active():
            return await self.middleware(ctx, call_next)
        return await call_next(ctx)
