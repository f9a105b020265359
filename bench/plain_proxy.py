"""A plain MCP proxy: the floor a gateway is compared with in ``bench_mcp.py``.

    python bench/plain_proxy.py COMMAND [ARGS...]

Serves over stdio whatever the stdio server ``COMMAND ARGS`` lists, and forwards every
``tools/call`` to it unchanged — one more process and JSON-RPC hop, and nothing else (no
policy, no ledger, no audit): what a pass-through proxy costs, measured in the same run.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def main(command: str, args: list[str]) -> None:
    upstream = StdioServerParameters(command=command, args=args)
    async with Client(upstream, mode="legacy") as client:

        async def list_tools(
            ctx: Any, params: mcp_types.PaginatedRequestParams | None
        ) -> mcp_types.ListToolsResult:
            return await client.list_tools()

        async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> dict[str, Any]:
            result = await client.call_tool(params.name, dict(params.arguments or {}))
            return result.model_dump(by_alias=True, exclude_none=True)

        server: Server[Any] = Server("plain-proxy", on_list_tools=list_tools)
        server.add_request_handler("tools/call", mcp_types.CallToolRequestParams, call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2:])
