"""The gateway: an MCP server whose tools are other MCP servers' tools, each call through
tether's gate.

``tools/list`` offers only the tools the config names and the lock pins, exactly as they were
pinned (the reviewed description, not whatever the server says today). ``tools/call`` is
judged by the gate like any tool call — policy, approvals, budgets, ledger, audit,
redaction, screening — and a tool that drifted from its pin is refused, saying what changed.

Calls and runs. Each MCP session is one tether run (over stdio: the gateway process's one
connection, or the conversation a client names in ``_meta``; over HTTP: the
``Mcp-Session-Id`` with the caller's credential), and each request
is one call whose id comes from the JSON-RPC request id. A client that sends the same request
again after a dropped connection therefore meets the ledger's record of it: the recorded
result if it ran, never a second execution. A call that needs approval answers with a tool
error naming the approval; a later request with the same tool and arguments in the same
session is that call again (it proceeds once approved, exactly once).

One loop. Each call is judged, recorded and dispatched on the server's event loop
(``Gate.acall``): the store's transactions run there (SQLite: well under a millisecond) and
the tool's handler — the one place the gate hands control to the tool — awaits the upstream
on the same loop, so a call crosses no thread. A call, once judged, runs to its recorded
outcome even if the client goes away meanwhile (it is shielded from cancellation, so a retry
finds the result). A client's ``notifications/cancelled`` is passed to the server for the
request the gateway made, and the outcome recorded is the server's answer if it still
gives one within a few seconds, else unknown (``tether.mcp.cancel``). Crash, timeout and
error handling are the gate's: an upstream that answers ``isError`` is a failed effect, one
whose connection dies mid-call an unknown effect (``tether effects``, ``tether recover``).

The module is long because it is one MCP server: listing, pinning, sessions and the call path
share the upstream connections and the pinned lock.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from tether.core.approvals import ApprovalStatus
from tether.core.budget import Budget
from tether.core.digest import sha256_hex
from tether.errors import ConfigurationError, OutcomeUnknown, PinError, TetherError
from tether.gate.answer import Ran, Waiting, answer_async
from tether.gate.pipeline import Gate, ToolCall
from tether.mcp.arguments import argument_digest, credential_arguments, undeclared_arguments
from tether.mcp.caller import (
    CALL_META,
    Caller,
    caller_from_headers,
    named_session,
    stdio_caller,
)
from tether.mcp.cancel import Cancels
from tether.mcp.config import GatewayConfig, ToolConfig, effective_risk
from tether.mcp.liveness import Liveness, folder_for
from tether.mcp.offered import AskedCalls, Offered
from tether.mcp.pins import Lock, PinnedTool, changes, read_lock, snapshot, tool_digest
from tether.mcp.reads import Reads, Shape
from tether.mcp.relay import CURRENT, relay_of
from tether.mcp.tracing import WhenTraced
from tether.mcp.unsettled import Unsettled, key_of
from tether.mcp.upstream import Upstream, UpstreamToolError, gateway_version
from tether.mcp.wire import approval_wait, envelope, error_result, result_of, text_of
from tether.tools.registry import Manifest, Registry

if TYPE_CHECKING:
    import mcp
    import mcp_types
    from mcp.server import Server

    from tether.core.principal import Identity
    from tether.store.base import Store

__all__ = ["Caller", "Gateway", "Offered"]

RECONNECT_DELAY_S = 0.5
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class Gateway:
    """Connect the upstreams, check the pins, and judge each ``tools/call``. Use as
    ``async with Gateway(config, store) as gw``; ``gw.server()`` is the MCP server."""

    def __init__(
        self,
        config: GatewayConfig,
        store: Store,
        *,
        lock: Lock | None = None,
        errlog: TextIO | None = None,
        budget: Budget | None = None,
        attached: Mapping[str, mcp.ClientSession] | None = None,
        pin_on_open: bool = False,
        identity: Identity | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.lock = lock if lock is not None else read_lock(config.lock_path)
        self.errlog = errlog if errlog is not None else sys.stderr
        self.budget = budget if budget is not None else config.budget
        # Sessions opened by the caller (tether.mcp.client), by server id; and whether to
        # pin what they list at open (the in-process wrapper without a lock file).
        self.attached = dict(attached or {})
        self.pin_on_open = pin_on_open
        # Over stdio: an authenticated principal credential ($TETHER_PRINCIPAL_TOKEN), else
        # the config's [principal].
        self.identity = identity
        self.upstreams: dict[str, Upstream] = {}
        self.offered: dict[str, Offered] = {}
        self.unpinned: list[str] = []
        self.gate: Gate | None = None
        self._stack: AsyncExitStack | None = None
        self._sessions: dict[str, AskedCalls] = {}  # by run id
        self._runs: set[str] = set()
        self._lock = threading.Lock()
        self._stdio_caller: Caller | None = None
        self.unsettled = Unsettled()
        self.in_flight = 0  # calls being judged or run now
        self.cancels = Cancels()  # those of them a client may cancel (tether.mcp.cancel)
        self.liveness = Liveness(folder_for(store))
        self.reads = Reads(self)  # resources and prompts, where the config offers them

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            stack.callback(self.liveness.close)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs first on close: stop re-listings
            for sid, server in self.config.servers.items():
                upstream = Upstream(
                    server, on_change=self._changed, errlog=self.errlog, spawn=tg.start_soon
                )
                if sid in self.attached:
                    await upstream.attach(self.attached[sid])
                else:
                    await tg.start(self._keep_connected, upstream)
                self.upstreams[sid] = upstream
            if self.pin_on_open:
                self.lock = self._pin_current()
            self._build()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def _keep_connected(
        self, upstream: Upstream, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        """Own one upstream connection for the gateway's life: connect (a failure at start
        is the gateway's), and when it is lost — a crash mid-call — connect again, checking
        the pins anew (a restarted server may not be the one that was pinned)."""
        started = False
        while True:
            try:
                async with AsyncExitStack() as stack:
                    await upstream.connect(stack)
                    if started:
                        self.check(upstream)
                        print(f"tether mcp: reconnected to '{upstream.id}'", file=self.errlog)
                    else:
                        task_status.started()
                        started = True
                    await upstream.gone.wait()
            except Exception as e:
                if not started:
                    raise  # the gateway cannot start without it: the operator is told
                # A connection that died can fail to close, or the server can fail to
                # start again: either way the keeper carries on trying.
                upstream.mark_lost(e)
            print(f"tether mcp: lost '{upstream.id}' ({upstream.lost})", file=self.errlog)
            await anyio.sleep(RECONNECT_DELAY_S)

    def _pin_current(self) -> Lock:
        """A lock of what the upstreams list now, refusing what looks poisoned."""
        from tether.mcp.pins import poisoning_findings

        tools = dict(self.lock.tools)
        for tool in self.config.tools():
            current = self.upstreams[tool.server].tools.get(tool.upstream_name)
            if current is None or tool.key in tools:
                continue
            snap = self.current_snapshot(self.upstreams[tool.server], current)
            findings = poisoning_findings(snap)
            if findings:
                print(
                    f"tether mcp: {tool.key} is not offered: {'; '.join(findings)}",
                    file=self.errlog,
                )
                continue
            tools[tool.key] = PinnedTool(
                key=tool.key, digest=tool_digest(snap), snapshot=snap, pinned_at=time.time()
            )
        return Lock(tools)

    def _build(self) -> None:
        registry = Registry()
        for tool in self.config.tools():
            pinned = self.lock.get(tool.key)
            if pinned is None:
                self.unpinned.append(tool.key)
                continue
            snap = pinned.snapshot
            schema = snap.get("inputSchema") or {"type": "object"}
            try:
                manifest = Manifest(
                    name=tool.name,
                    parameters=schema,
                    version=str(snap.get("version") or "1"),
                    server_id=tool.server,
                    description=str(snap.get("description") or ""),
                    risk=effective_risk(tool.risk, snap.get("annotations")),
                    required_scope=tool.required_scope,
                    allowed_tenants=tool.allowed_tenants,
                    max_result_bytes=tool.max_result_bytes,
                    sensitive_fields=tool.sensitive_fields,
                    timeout_s=tool.timeout_s,
                    cost=tool.cost,
                    tenant_path=tool.tenant_path,
                    tenant_scoped=tool.tenant_scoped,
                )
            except ConfigurationError as e:
                raise ConfigurationError(
                    f"gateway config {self.config.path}: servers.{tool.server}.tools."
                    f"{tool.upstream_name}: {e}"
                ) from e
            registry.add(manifest, self._handler(tool))
            self.offered[tool.name] = Offered(tool, pinned, manifest)
        self.reads.build(registry)
        registry.pin()
        for key in self.unpinned:
            print(
                f"tether mcp: {key} is configured but not pinned, so it is not offered; "
                "review it with `tether mcp inspect` and pin it with `tether mcp pin`",
                file=self.errlog,
            )
        self.gate = Gate(registry, self.config.policy, self.store)
        for upstream in self.upstreams.values():
            self.check(upstream)
        self.unsettled.load(
            self.gate, lambda run_id: run_id.startswith("mcp-"), self.liveness.open()
        )

    def check(self, upstream: Upstream) -> None:
        """Block each of ``upstream``'s offered tools that no longer matches its pin."""
        for offered in self.offered.values():
            if offered.config.server != upstream.id:
                continue
            current = upstream.tools.get(offered.config.upstream_name)
            if current is None:
                offered.blocked = (
                    f"MCP server '{upstream.id}' no longer offers '{offered.config.upstream_name}'"
                )
                continue
            snap = self.current_snapshot(upstream, current)
            if tool_digest(snap) == offered.pinned.digest:
                offered.blocked = None
                continue
            what = ", ".join(changes(offered.pinned.snapshot, snap))
            offered.blocked = (
                f"'{offered.config.name}' changed on MCP server '{upstream.id}' since it was "
                f"pinned ({what}); it is refused until an operator reviews it (tether mcp "
                f"inspect --config {self.config.path}) and pins it again (tether mcp pin)"
            )
        self.reads.check(upstream)

    @staticmethod
    def current_snapshot(upstream: Upstream, tool: Mapping[str, Any]) -> dict[str, Any]:
        return snapshot(
            tool,
            server_id=upstream.id,
            server_name=upstream.server_name,
            version=upstream.server_version,
        )

    async def _changed(self, upstream: Upstream) -> None:
        self.check(upstream)
        await self.reads.announce()  # clients whose prompt or resource listing changed

    # -- what the client sees ----------------------------------------------------------------
    def listing(self) -> list[dict[str, Any]]:
        return [self.offered[n].listing() for n in sorted(self.offered)]

    def server(self) -> Server[Any]:
        """The MCP server (the SDK's low-level ``Server``) offering the gateway's tools."""
        import mcp_types
        from mcp.server import Server

        async def list_tools(
            ctx: Any, params: mcp_types.PaginatedRequestParams | None
        ) -> mcp_types.ListToolsResult:
            return mcp_types.ListToolsResult.model_validate({"tools": self.listing()})

        async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> dict[str, Any]:
            meta = params.meta if isinstance(params.meta, dict) else {}
            caller = self.caller_for(ctx, meta)
            # The result's wire form: the SDK validates and shapes it for the protocol
            # version anyway, so a model built here would be validated and dumped twice.
            relayed = CURRENT.set(relay_of(ctx))  # progress, sampling... go to this client
            try:
                with self.cancels.watching(ctx):  # its cancellation goes to the server
                    return await self._call_wire(
                        caller, ctx.request_id, params.name, dict(params.arguments or {}), meta
                    )
            finally:
                CURRENT.reset(relayed)

        server: Server[Any] = Server(
            self.config.name,
            version=gateway_version(),
            instructions="Tools offered through tether: each call is judged by policy, some "
            "need a human's approval before they run.",
            on_list_tools=list_tools,
        )
        # Registered as a plain request handler, which may answer with a dict (the typed
        # ``on_call_tool`` wants a model).
        server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
        cancelled = mcp_types.CancelledNotificationParams
        server.add_notification_handler("notifications/cancelled", cancelled, self.cancels.heard)
        self.reads.register(server)
        server.middleware = [WhenTraced(m) for m in server.middleware]  # tether.mcp.tracing
        return server

    # Over stdio the gateway serves one client for its whole life: one session.
    stdio_session: str = ""
    over_http: bool = False  # set by ``http.serve_http``

    def caller_for(self, ctx: Any, meta: Mapping[str, Any] | None = None) -> Caller:
        """Who sends this request: the config's principal over stdio; over HTTP the
        principal of the bearer credential (checked by ``http.authenticated``)."""
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        if headers is not None or self.over_http:
            # Over HTTP a request without headers is refused, never taken for the config's
            # principal.
            return caller_from_headers(self.store, headers or {}, meta)
        if not self.stdio_session:
            self.stdio_session = uuid.uuid4().hex
        named = named_session(meta)
        cached = self._stdio_caller
        if not named and cached is not None and cached.session == self.stdio_session:
            return cached  # one session, one caller: its run id is hashed once
        caller = stdio_caller(
            self.identity, self.config.principal, self.stdio_session, named, self.config.path
        )
        if not named:
            self._stdio_caller = caller
        return caller

    # -- a call ------------------------------------------------------------------------------
    async def call_tool(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any] | None = None,
    ) -> mcp_types.CallToolResult:
        """Judge and, if allowed, run one ``tools/call``; every answer is a tool result
        (refusals and approvals are ``isError`` results the model can read)."""
        import mcp_types

        wire = await self._call_wire(caller, request_id, name, arguments, meta)
        return mcp_types.CallToolResult.model_validate(wire)

    async def govern_read(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any],
        shape: Shape,
    ) -> dict[str, Any]:
        """A resource read or prompt get through the gate (``tether.mcp.reads``)."""
        return await self._call_wire(caller, request_id, name, arguments, meta, shape)

    async def _call_wire(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any] | None = None,
        shape: Shape | None = None,
    ) -> dict[str, Any]:
        """``call_tool``'s result in its wire form (what the MCP server returns)."""
        # Judged, dispatched and recorded on this loop; once the gate has recorded the call
        # as dispatched it runs to its recorded outcome, whoever stops waiting for it (a
        # client's cancellation reaches the upstream request, not this: tether.mcp.cancel).
        self.in_flight += 1
        try:
            with anyio.CancelScope(shield=True):
                result = await self._govern(caller, request_id, name, arguments, meta or {}, shape)
        finally:
            self.in_flight -= 1
        return result

    async def drained(self) -> None:
        """Return once no call is in flight (SIGTERM waits on this, bounded, before the
        gateway exits, so a call it judged runs to its recorded outcome)."""
        while self.in_flight:
            await anyio.sleep(0.05)

    async def _govern(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any],
        shape: Shape | None = None,
    ) -> dict[str, Any]:
        gate = self._gate()
        if shape is None and name in self.reads.names:
            return error_result(f"tether: there is no tool '{name}'")  # a read, not a tool
        run_id = self._ensure_run(caller)
        offered = self.offered.get(name)
        manifest = offered.manifest if offered is not None else None
        undeclared = undeclared_arguments(manifest, arguments)
        if undeclared:
            return error_result(
                f"tether: '{name}' was pinned without argument(s) {', '.join(undeclared)}; "
                "the gateway forwards only the arguments the pinned schema declares (re-pin "
                "the tool if its server added them)"
            )
        leaked = credential_arguments(manifest, arguments)
        if leaked:
            return error_result(
                f"tether: argument(s) {', '.join(leaked)} of '{name}' hold what looks like a "
                "credential; the gateway does not forward credentials to an MCP server unless "
                "the tool declares the argument secret (sensitive_fields in its config)"
            )
        call_id, same = self._call_id(caller, run_id, request_id, name, arguments, meta)
        if offered is not None and offered.blocked is not None:
            with self.store.read() as tx:
                recorded = tx.effect_for_call(run_id, call_id) is not None
            if not recorded:  # a call the ledger holds is only replayed: the tool never runs
                self._audit_blocked(caller, run_id, name, offered.blocked)
                return error_result(str(PinError(offered.blocked)))
        session = self._session(run_id)
        key = key_of(caller.principal, name, same[1])
        open_elsewhere = (
            self.unsettled.blocking(gate, key, run_id) if self.unsettled.calls else None
        )
        if open_elsewhere is not None:
            with self.store.read() as tx:
                known = tx.effect_for_call(run_id, call_id) or tx.find_approval(run_id, call_id)
            if known is None:
                return error_result(
                    f"tether: an identical '{name}' call ({open_elsewhere}, from an earlier "
                    "session or gateway process) has an unknown outcome: it may have run. It is "
                    "not sent again until someone settles it (`tether effects resolve "
                    f"{open_elsewhere} --committed|--absent`, or `tether recover`)"
                )
        call = ToolCall(call_id=call_id, tool=name, arguments=arguments)
        try:
            got = await answer_async(lambda: gate.acall(run_id, call))
        except TetherError as e:  # stops the call; over MCP the agent is told as a tool error
            return error_result(f"tether: {e}")
        if isinstance(got, Waiting):
            session.asked[same] = call_id
            return approval_wait(got.signal, call_id)
        if isinstance(got, Ran):
            if session.asked.get(same) == call_id:
                del session.asked[same]  # it ran: the same arguments again are a new call
            if shape is not None:
                return shape(got.outcome)
            manifest = offered.manifest if offered is not None else None
            return result_of(got.outcome, manifest.sensitive_fields if manifest else frozenset())
        if isinstance(got.error, OutcomeUnknown):
            self.unsettled.add(key, run_id, got.error.operation_key)
        return error_result(f"tether: {got.error}")

    def _gate(self) -> Gate:
        if self.gate is None:
            raise ConfigurationError("the gateway is not started: use `async with Gateway(...)`")
        return self.gate

    def _ensure_run(self, caller: Caller) -> str:
        run_id = caller.run_id
        if run_id in self._runs:
            return run_id
        with self._lock:
            if run_id not in self._runs:
                with self.store.read() as tx:
                    exists = tx.get_run(run_id) is not None
                if not exists:
                    self._gate().start_run(caller.principal, budget=self.budget, run_id=run_id)
                self._runs.add(run_id)
        return run_id

    def _call_id(
        self,
        caller: Caller,
        run_id: str,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[str, tuple[str, str]]:
        """The call a request is — its own, or, for a new request repeating a call that
        asked for approval, that call — and the (tool, argument digest) pair that names "the
        same call" in this session.

        Its own id: the client's ``_meta`` ``io.tether/call_id`` if it gives one (two
        intended calls with the same arguments stay two only if they differ there or in
        their request ids); else, in a protocol session, the JSON-RPC request id (unique
        within the session, so a resend is the same call); else (stateless: request ids
        restart with every client process) the request id together with the arguments'
        digest — a resend is the same call, a new process's request 1 with other arguments
        is not."""
        same = (name, argument_digest(self._gate().registry, caller.principal, name, arguments))
        given = (meta or {}).get(CALL_META)
        raw = str(given) if isinstance(given, str | int) and given != "" else str(request_id)
        if given in (None, "") and caller.stateless:
            raw = f"{raw}-{same[1].removeprefix('sha256:')[:16]}"
        own = "mcp-" + (raw if _SAFE_ID.match(raw) else sha256_hex(raw)[:32])
        session = self._session(run_id)
        alias = session.aliases.get(own)
        if alias is not None:
            return alias, same
        asked = session.asked.get(same)
        if asked is None or asked == own:
            return own, same
        # A request the ledger already knows under its own id (a retry of it) stays itself.
        with self.store.read() as tx:
            if tx.effect_for_call(run_id, own) or tx.find_approval(run_id, own):
                return own, same
        session.aliases[own] = asked
        return asked, same

    def _session(self, run_id: str) -> AskedCalls:
        """The session's calls waiting on approvals: read from the store the first time
        this process sees the session (it may have asked before a restart), kept after."""
        session = self._sessions.get(run_id)
        if session is None:
            session = AskedCalls()
            latest: dict[tuple[str, str], Any] = {}
            for a in self.store.list_approvals(run_id=run_id):
                key = (a.tool, a.argument_digest)
                if key not in latest or a.created_at > latest[key].created_at:
                    latest[key] = a
            for key, a in latest.items():
                if a.status not in (ApprovalStatus.USED, ApprovalStatus.EDITED):
                    session.asked[key] = a.call_id
            session = self._sessions.setdefault(run_id, session)
        return session

    def _audit_blocked(self, caller: Caller, run_id: str, name: str, why: str) -> None:
        with self.store.transaction() as tx:
            tx.append_audit(
                "mcp_tool_blocked",
                at=time.time(),
                run_id=run_id,
                actor=caller.principal.subject,
                data={"tool": name, "reason": why},
            )

    def _handler(self, tool: ToolConfig) -> Any:
        """The registry's handler for an upstream tool: ``Gate.acall`` awaits it on the
        gateway's loop once it has recorded the call as dispatched."""

        async def handler(**arguments: Any) -> Any:
            return await self._upstream_call(tool, arguments)

        handler.__name__ = tool.name
        return handler

    async def _upstream_call(self, tool: ToolConfig, arguments: dict[str, Any]) -> Any:
        result = await self.upstreams[tool.server].call(tool.upstream_name, arguments)
        if result.is_error:
            raise UpstreamToolError(tool.key, text_of(result))
        # The result as the server gave it (content blocks, structured content): the ledger
        # records it so, and the client gets it back so, replayed or not.
        return envelope(result, tool.max_result_bytes)
