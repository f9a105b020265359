"""One connection to an upstream MCP server, through the official SDK's client.

The gateway speaks the handshake era (``mode="legacy"``) to upstreams: every published
server understands it, and its ``notifications/tools/list_changed`` arrive unasked, which
is how a server announces a changed tool. The SDK's response cache is off: a listing served
from a cache could hide a drift.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio

from tether.errors import ConfigurationError, UpstreamLost
from tether.mcp.cancel import Watched, cancellable
from tether.mcp.config import ServerConfig
from tether.mcp.relay import CURRENT, InFlight, callbacks, progress_callback, quietly

if TYPE_CHECKING:
    import mcp
    import mcp_types

__all__ = ["Upstream", "UpstreamToolError", "gateway_version", "is_connection_lost"]

T = TypeVar("T")
OnChange = Callable[["Upstream"], Awaitable[None]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class Upstream:
    """A connected upstream server: its identity, its current tools, calls to them."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_change: OnChange | None = None,
        errlog: TextIO | None = None,
        spawn: Spawn | None = None,
    ) -> None:
        self.config = config
        self.on_change = on_change
        self.spawn = spawn
        self.errlog = errlog
        self.session: mcp.ClientSession | None = None
        self.watched = False  # whether its transport notes request ids (tether.mcp.cancel)
        self.server_name: str | None = None
        self.server_version: str | None = None
        self.tools: dict[str, dict[str, Any]] = {}  # upstream name -> wire form of the Tool
        # When the config offers them: prompts by name, resource templates by name, and the
        # resources listed now (wire forms).
        self.prompts: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}
        self.resources: list[dict[str, Any]] = []
        self.lost: str | None = None  # why the connection ended, once it has
        self.gone = anyio.Event()  # set when it ends: the gateway's keeper reconnects
        self.in_flight = InFlight()  # the clients of the calls running now (tether.mcp.relay)
        # Told of the server's ``notifications/resources/updated`` (tether.mcp.reads).
        self.on_updated: Callable[[str], Awaitable[None]] | None = None

    @property
    def id(self) -> str:
        return self.config.id

    async def connect(self, stack: AsyncExitStack) -> None:
        import mcp

        target: Any
        if self.config.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            if self.config.headers:
                import httpx2

                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=dict(self.config.headers), timeout=30)
                )
                target = streamable_http_client(self.config.url, http_client=http)
            else:
                target = streamable_http_client(self.config.url)
        else:
            assert self.config.command is not None
            target = _StdioTransport(
                mcp.StdioServerParameters(
                    command=self.config.command,
                    args=list(self.config.args),
                    env=None if self.config.env is None else dict(self.config.env),
                    cwd=self.config.cwd,
                ),
                self.errlog if self.errlog is not None else sys.stderr,
                # A line longer than its tools' largest cap, with their framing, is cut
                # as it arrives (a server the config lists no tools of: the default cap).
                2 * max((t.max_result_bytes for t in self.config.tools.values()), default=65_536)
                + 4096,
            )
        client = mcp.Client(
            Watched(target),  # a cancelled call names the request the server saw
            mode="legacy",
            cache=None,
            message_handler=self._message,
            **callbacks(self.in_flight),  # the server's requests go to the caller's client
        )
        try:
            await stack.enter_async_context(client)
        except Exception as e:
            raise ConfigurationError(
                f"cannot connect to MCP server '{self.id}' ({self.config.describe()}): {e!r}"
            ) from e
        await self.attach(client.session)
        self.watched = True

    async def attach(self, session: mcp.ClientSession) -> None:
        """Use a session someone else opened (and closes): the in-process wrapper's case.
        Its ``list_changed`` notifications reach its own message handler, not this one;
        ``refresh`` re-lists on demand."""
        self.session = session
        self.watched = False
        self.lost = None
        self.gone = anyio.Event()
        info = session.server_info
        self.server_name = info.name if info is not None else None
        self.server_version = info.version if info is not None else None
        await self.refresh()

    async def refresh(self) -> None:
        """List the server's tools again (every page)."""
        import mcp_types

        session = self._connected()
        tools: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        for _ in range(1000):
            page = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=cursor))
            for tool in page.tools:
                tools[tool.name] = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tools
        await self.refresh_reads()

    async def refresh_reads(self) -> None:
        """List the prompts, resource templates and resources again, where the config
        offers them and the server has them."""
        session = self._connected()
        able = session.server_capabilities
        if self.config.prompts and able is not None and able.prompts is not None:
            found = await _every_page(session.list_prompts, "prompts")
            self.prompts = {str(p["name"]): p for p in found}
        if self.config.resources and able is not None and able.resources is not None:
            found = await _every_page(session.list_resource_templates, "resource_templates")
            self.templates = {str(t["name"]): t for t in found}
            self.resources = await _every_page(session.list_resources, "resources")

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        session = self._connected()
        what = f"resources/read {uri}"
        request = self._cancellable(what, lambda: session.read_resource(uri))
        return await self._lost_is_unknown(what, request)

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None
    ) -> mcp_types.GetPromptResult:
        session = self._connected()
        what = f"prompts/get {name}"
        request = self._cancellable(what, lambda: session.get_prompt(name, arguments))
        return await self._lost_is_unknown(what, request)

    async def subscribe(self, uri: str, on: bool) -> None:
        session = self._connected()
        method = session.subscribe_resource if on else session.unsubscribe_resource
        request = quietly(method, uri)  # handshake-era servers' feature, relayed on purpose
        await self._lost_is_unknown(f"resources/{'' if on else 'un'}subscribe {uri}", request)

    async def complete(self, params: mcp_types.CompleteRequestParams) -> mcp_types.CompleteResult:
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        session = self._connected()
        return await self._lost_is_unknown(
            "completion/complete", session.complete(params.ref, argument, context)
        )

    async def _lost_is_unknown(self, what: str, request: Awaitable[T]) -> T:
        try:
            return await request
        except Exception as e:
            if is_connection_lost(e):
                self.mark_lost(e)
                raise UpstreamLost(f"MCP server '{self.id}' went away during {what} ({e!r})") from e
            raise

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call a tool; a connection that ends mid-call raises ``UpstreamLost``."""
        session = self._connected()
        relay = CURRENT.get()
        if relay is not None:
            self.in_flight.relays.append(relay)
        try:
            return await self._cancellable(
                f"'{name}'",
                lambda: session.call_tool(
                    name, arguments, progress_callback=progress_callback(relay)
                ),
            )
        except Exception as e:
            if is_connection_lost(e):
                self.mark_lost(e)
                raise UpstreamLost(
                    f"MCP server '{self.id}' went away during '{name}' ({e!r}); whether it "
                    "acted is unknown"
                ) from e
            raise
        finally:
            if relay is not None:
                self.in_flight.relays.remove(relay)

    def _cancellable(self, what: str, request: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        """``request()``, passing on the client's cancellation of its call, if it cancels
        (``tether.mcp.cancel``)."""

        def note(line: str) -> None:
            print(f"tether mcp: {self.id}: {line}", file=self.errlog or sys.stderr)

        return cancellable(
            request,
            self._tell_cancelled,
            what=what,
            wait_s=self.config.cancel_wait_s,
            noted=self.watched,
            note=note,
        )

    async def _tell_cancelled(self, request_id: Any) -> None:
        import mcp_types

        if self.session is not None:
            params = mcp_types.CancelledNotificationParams(
                request_id=request_id, reason="the gateway's client cancelled the call"
            )
            await self.session.send_notification(mcp_types.CancelledNotification(params=params))

    async def _relist(self) -> None:
        try:
            await self.refresh()
        except Exception as e:
            if not is_connection_lost(e):
                raise
            self.mark_lost(e)
            return
        if self.on_change is not None:
            await self.on_change(self)

    def _connected(self) -> mcp.ClientSession:
        if self.session is None:
            raise ConfigurationError(f"MCP server '{self.id}' is not connected")
        if self.lost is not None:
            raise ConfigurationError(
                f"MCP server '{self.id}' is not connected ({self.lost}); the gateway is "
                "reconnecting, try again shortly"
            )
        return self.session

    async def _message(self, message: Any) -> None:
        import mcp_types

        if isinstance(
            message,
            mcp_types.ToolListChangedNotification
            | mcp_types.PromptListChangedNotification
            | mcp_types.ResourceListChangedNotification,
        ):
            # Listing again is a request: not from inside the session's receive loop, which
            # would wait for its own answer.
            if self.spawn is not None:
                self.spawn(self._relist)
            else:
                await self._relist()
        elif isinstance(message, mcp_types.ResourceUpdatedNotification):
            if self.on_updated is not None:
                await self.on_updated(str(message.params.uri))
        elif isinstance(message, Exception) and is_connection_lost(message):
            self.mark_lost(message)

    def mark_lost(self, error: BaseException) -> None:
        if self.lost is None:
            self.lost = f"{type(error).__name__}: {error}"
        self.gone.set()


async def _every_page(list_page: Any, field: str) -> list[dict[str, Any]]:
    import mcp_types

    found: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await list_page(params=mcp_types.PaginatedRequestParams(cursor=cursor))
        for item in getattr(page, field):
            found.append(item.model_dump(mode="json", by_alias=True, exclude_none=True))
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


def is_connection_lost(error: BaseException) -> bool:
    """Whether ``error`` says the transport ended (not that the server answered "no")."""
    from mcp.shared.exceptions import MCPError

    if isinstance(error, MCPError):
        from mcp_types import CONNECTION_CLOSED

        return error.code == CONNECTION_CLOSED
    return isinstance(
        error,
        anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream
        | ConnectionError
        | EOFError,
    )


class _StdioTransport:
    """``stdio_client`` with the server's stderr sent where the gateway says (a gateway
    serving over stdio must keep its own stdout clean, and tests keep servers quiet)."""

    def __init__(self, params: Any, errlog: TextIO, cap_bytes: int) -> None:
        self.params = params
        self.errlog = errlog
        self.cap_bytes = cap_bytes
        self._cm: Any = None

    async def __aenter__(self) -> Any:
        from mcp.client.stdio import stdio_client

        from tether.mcp.pipe import stdio_pipe

        if sys.platform == "win32":  # pragma: no cover - the SDK's own there
            self._cm = stdio_client(self.params, errlog=self.errlog)
        else:
            self._cm = stdio_pipe(self.params, self.errlog, self.cap_bytes)
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


class UpstreamToolError(RuntimeError):
    """The upstream answered the call with ``isError``: the gate records a failed effect."""

    def __init__(self, tool: str, text: str) -> None:
        super().__init__(f"{tool} answered with an error: {text[:2000]}")


def gateway_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether-gate")
    except PackageNotFoundError:  # pragma: no cover - a source checkout not installed
        return "0"
