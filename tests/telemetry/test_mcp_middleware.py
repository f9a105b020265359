"""The MCP SDK's per-request span runs only when something records it (tether.mcp.tracing):
with no provider the gateway's requests skip it, with one they still get it."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import Server
from mcp.server._otel import OpenTelemetryMiddleware

from tests.telemetry.conftest import Recorded
from tether.mcp.tracing import WhenTraced


class Counting:
    """A middleware that counts the requests it wrapped."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        self.seen.append(ctx)
        return await call_next(ctx)


async def _answer(ctx: Any) -> dict[str, Any]:
    return {"answered": ctx}


def through(middleware: WhenTraced, ctx: Any) -> Any:
    """One request (``ctx``) through ``middleware`` to ``_answer``."""

    async def go() -> Any:
        return await middleware(ctx, _answer)

    return anyio.run(go)


def test_without_a_provider_the_sdk_span_is_skipped_and_the_request_still_answered() -> None:
    inner = Counting()
    result = through(WhenTraced(inner), "req-1")
    assert result == {"answered": "req-1"}
    assert inner.seen == []


def test_with_a_provider_the_sdk_middleware_runs(otel: Recorded) -> None:
    inner = Counting()
    result = through(WhenTraced(inner), "req-2")
    assert result == {"answered": "req-2"}
    assert inner.seen == ["req-2"]


def test_the_sdk_still_puts_its_own_span_middleware_on_every_server() -> None:
    # What the gateway wraps: if the SDK stops adding it (or renames it), this says so.
    assert any(isinstance(m, OpenTelemetryMiddleware) for m in Server("probe").middleware)
