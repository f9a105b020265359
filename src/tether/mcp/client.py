"""The gateway as a library: a Python agent that talks MCP directly, governed in-process.

    async with Client(StdioServerParameters(...)) as client:
        async with GovernedSession(
            client.session,
            server_id="fs",
            tools={"read_text_file": {"risk": "read"}, "write_file": {"risk": "write"}},
            policy=policy,
            store=store,
            principal=principal,
        ) as governed:
            await governed.call_tool("write_file", {...})   # judged by the gate

``list_tools`` offers only the named tools; ``call_tool`` passes each call through the same
pipeline as ``tether mcp serve`` (an approval answers with an ``isError`` result naming it,
the same call after the approval runs once). Without ``lock_file`` the tools are pinned as
the session lists them when the wrapper opens (what looks poisoned is not offered), and a
later ``refresh`` that finds one changed blocks it; with ``lock_file`` (a lock written by
``tether mcp pin``) they are held to that lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.budget import Budget
from tether.core.principal import Principal
from tether.extras import missing

try:
    from tether.mcp.caller import Caller
    from tether.mcp.config import GatewayConfig, ServerConfig, tool_configs
    from tether.mcp.gateway import Gateway
    from tether.mcp.pins import Lock, read_lock
except ModuleNotFoundError as e:
    raise missing("mcp", "tether.mcp.client", e) from None
from tether.policy.rules import Policy

if TYPE_CHECKING:
    import mcp
    import mcp_types

    from tether.store.base import Store

__all__ = ["GovernedSession"]


class GovernedSession:
    """An ``mcp.ClientSession`` (or ``mcp.Client``) whose tool calls pass tether's gate."""

    def __init__(
        self,
        session: mcp.ClientSession | mcp.Client,
        *,
        server_id: str,
        tools: Mapping[str, Mapping[str, Any]],
        policy: Policy,
        store: Store,
        principal: Principal,
        lock_file: str | Path | None = None,
        session_id: str | None = None,
        budget: Budget | None = None,
    ) -> None:
        import mcp

        raw = session.session if isinstance(session, mcp.Client) else session
        lock_path = Path(lock_file).resolve() if lock_file is not None else None
        config = GatewayConfig(
            path=lock_path.with_name("in-process.toml") if lock_path else Path("in-process"),
            name="tether-in-process",
            db=None,
            principal=principal,
            policy=policy,
            servers={
                server_id: ServerConfig(
                    id=server_id, command="(attached session)", tools=tool_configs(server_id, tools)
                )
            },
        )
        self.gateway = Gateway(
            config,
            store,
            lock=read_lock(lock_path) if lock_path is not None else Lock({}),
            budget=budget,
            attached={server_id: raw},
            pin_on_open=lock_path is None,
        )
        self.caller = Caller(principal, session_id or uuid.uuid4().hex)
        self._requests = 0

    async def __aenter__(self) -> GovernedSession:
        await self.gateway.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.gateway.__aexit__(*exc)

    @property
    def run_id(self) -> str:
        """The tether run this wrapper's calls belong to."""
        return self.caller.run_id

    async def list_tools(self) -> mcp_types.ListToolsResult:
        import mcp_types

        return mcp_types.ListToolsResult.model_validate({"tools": self.gateway.listing()})

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, request_id: str | None = None
    ) -> mcp_types.CallToolResult:
        """Call a tool through the gate. ``request_id`` names the request for the ledger (a
        retry with the same id gets the recorded result); by default each call is new."""
        if request_id is None:
            self._requests += 1
            request_id = f"local-{self._requests}-{uuid.uuid4().hex[:8]}"
        return await self.gateway.call_tool(self.caller, request_id, name, dict(arguments or {}))

    async def refresh(self) -> None:
        """List the session's tools again and block each one that no longer matches its pin."""
        for upstream in self.gateway.upstreams.values():
            await upstream.refresh()
            self.gateway.check(upstream)
