"""A client's cancellation of a call in flight, passed on to the upstream server.

When a client sends ``notifications/cancelled`` for a ``tools/call`` (or a governed
``resources/read`` or ``prompts/get``) the gateway is running, the SDK cancels the
request's handler and sends the client no answer for it (the specification: the receiver
of a cancellation does not respond). The call itself is shielded — the gate has recorded
it as dispatched and must record its outcome — so the cancellation reaches it here
instead (``Cancels``): the gateway sends ``notifications/cancelled`` to the server naming the
request *it* made for that call (the server's request id, not the client's, noted as the
request is written: ``Watched``), then waits at most the server's ``cancel_wait_seconds``
for an answer.

- The server answers anyway (it lost the race, or it ignores cancellations): that answer
  is the call's outcome, recorded like any other — it ran, and the ledger says so; a resend
  replays it.
- It sends nothing (a server that honours the cancellation does not answer): the effect is
  ``unknown`` (``CancelUnanswered``), since it may have acted before it stopped, and a
  resend is refused until someone settles it (``tether effects resolve``, ``tether
  recover``). Giving up, the SDK's client sends the server a second cancellation for the
  same request; a server ignores one for a request it no longer has.
- It answers with a protocol error rather than a result: unknown as well. After a
  cancellation such an error is the server saying it stopped (older SDKs answer "Request
  cancelled"), not that it had done nothing.
- The client cancelled before the request was written: the server never saw it, the one
  case known not to have happened (``CancelledUnsent``: the effect is failed).

The wait, 5 seconds unless the server's table says otherwise. A server that lost the race
had its answer written or on the way when the cancellation reached it, so the answer comes
within about one round trip: milliseconds over stdio, one HTTP exchange otherwise, and 5
seconds covers a slow one under load. Every cancellation a server honours costs the whole
wait before the effect is settled, and meanwhile the call is in flight (a resend is told so;
SIGTERM's drain, 30 seconds, waits for it), so the wait stays short. A server that keeps
working and answers later than that is recorded unknown, which is true: it may yet act.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from tether.errors import CancelledUnsent, CancelUnanswered

__all__ = ["CANCEL", "Cancels", "Watched", "cancellable"]

T = TypeVar("T")

# Set by the gateway around a call: set when the client cancels it.
CANCEL: contextvars.ContextVar[anyio.Event | None] = contextvars.ContextVar(
    "tether_mcp_cancel", default=None
)


class Cancels:
    """The gateway's calls in flight that their client may cancel, by connection and the
    client's request id. The SDK's low-level server tells a handler of a cancellation only
    by cancelling it, which the gateway's shielded calls do not feel (nor can that be told
    from the connection closing, which a call outlives); so the gateway hears
    ``notifications/cancelled`` itself (``heard``, its handler for it) and sets the call's
    event. A connection is the server's lifespan state (entered once per connection over
    stdio and in process) with, over HTTP, the ``Mcp-Session-Id`` (its credential checked by
    ``tether.mcp.http``); a stateless HTTP request has no session to be cancelled in."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, Any], tuple[object, anyio.Event]] = {}

    @contextmanager
    def watching(self, ctx: Any) -> Iterator[None]:
        """Within this block, upstream requests pass on a cancellation of ``ctx``'s request
        (an SDK request context)."""
        key = _key(ctx, getattr(ctx, "request_id", None))
        event = None if key is None else anyio.Event()
        if key is not None and event is not None:
            self._open[key] = (getattr(ctx, "lifespan_context", None), event)
        token = CANCEL.set(event)
        try:
            yield
        finally:
            CANCEL.reset(token)
            if key is not None and self._open.get(key, (None, None))[1] is event:
                del self._open[key]

    async def heard(self, ctx: Any, params: Any) -> None:
        """The gateway's handler for ``notifications/cancelled``."""
        key = _key(ctx, getattr(params, "request_id", None))
        found = None if key is None else self._open.get(key)
        if found is not None and found[0] is getattr(ctx, "lifespan_context", None):
            found[1].set()


def _key(ctx: Any, request_id: Any) -> tuple[str, Any] | None:
    from mcp.shared.dispatcher import coerce_request_id

    if request_id is None:
        return None
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    session = "" if headers is None else headers.get("mcp-session-id")
    if session is None:
        return None
    return session, coerce_request_id(request_id)


@dataclass
class _Sent:
    request_id: Any = None  # the id the upstream request went out under, once written


# Set around one upstream request: the transport notes its id there as it is written (the
# write runs in the task that sends the request, so the context is the request's own).
_SENT: contextvars.ContextVar[_Sent | None] = contextvars.ContextVar(
    "tether_mcp_sent", default=None
)


async def cancellable(
    request: Callable[[], Awaitable[T]],
    tell: Callable[[Any], Awaitable[None]],
    *,
    what: str,
    wait_s: float,
    noted: bool,
    note: Callable[[str], None],
) -> T:
    """``request()``, the client's cancellation passed on as the module says. ``tell``
    sends the server ``notifications/cancelled`` for a request id; ``noted``: whether the
    connection's transport notes request ids (``Watched``) — without it, an unwritten
    request cannot be told from a written one, and the outcome is unknown either way."""
    cancelled = CANCEL.get()
    if cancelled is None:
        return await request()
    if cancelled.is_set():
        raise CancelledUnsent(f"the client cancelled {what} before it was sent to the server")
    sent = _Sent()
    token = _SENT.set(sent)
    got: list[T] = []
    failed: list[Exception] = []
    told = gave_up = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal told, gave_up
                await cancelled.wait()
                if sent.request_id is not None:
                    told = True
                    await tell(sent.request_id)
                    await anyio.sleep(wait_s)
                gave_up = True
                tg.cancel_scope.cancel()  # stops the request: the SDK stops waiting for it

            tg.start_soon(watch)
            try:
                got.append(await request())
            except Exception as e:  # judged below, once the watcher is stopped
                failed.append(e)
            tg.cancel_scope.cancel()
    finally:
        _SENT.reset(token)
    if got:
        if told:
            note(f"the client cancelled {what}; the server answered anyway: recorded as it ran")
        return got[0]
    if failed:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        error = failed[0]
        if told and isinstance(error, MCPError) and error.code != CONNECTION_CLOSED:
            note(f"the client cancelled {what}; the server answered {error}: recorded unknown")
            raise CancelUnanswered(
                f"the client cancelled {what} and the server answered with an error "
                f"({error}): whether it acted before it stopped is unknown"
            ) from error
        raise error
    assert gave_up
    if sent.request_id is None and noted:
        raise CancelledUnsent(f"the client cancelled {what} before it was sent to the server")
    note(f"the client cancelled {what}; no answer within {wait_s:g}s: recorded unknown")
    raise CancelUnanswered(
        f"the client cancelled {what}; the server, told so, did not answer within "
        f"{wait_s:g}s: it may have acted before it stopped"
    )


class Watched:
    """A client transport whose writes note the id of each request as it goes out, for the
    request being sent (``_SENT``): the SDK mints request ids itself and tells no one, and a
    cancellation must name the one the server saw."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self.transport.__aenter__()
        return read, _NotingWrites(write)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.transport.__aexit__(*exc)


class _NotingWrites:
    """The SDK's write stream, noting the first request a ``cancellable`` request writes
    (a later one in the same request, such as a listing to check a result, is not it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def send(self, item: Any) -> None:
        sent = _SENT.get()
        if sent is not None and sent.request_id is None:
            from mcp_types import JSONRPCRequest

            message = getattr(item, "message", None)
            if isinstance(message, JSONRPCRequest):
                sent.request_id = message.id
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _NotingWrites:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)
