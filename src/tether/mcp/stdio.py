"""The gateway over this process's stdin and stdout (``tether mcp serve`` without ``--http``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from tether.mcp.wire import protocol_error

if TYPE_CHECKING:
    from tether.mcp.gateway import Gateway


async def serve_stdio(gateway: Gateway) -> None:
    """Serve the gateway over this process's stdin and stdout until the client leaves."""
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    server = gateway.server()
    async with stdio_server() as (read, write):
        # The SDK drops a line it cannot decode without a word; JSON-RPC wants an error
        # answer (id null), so the client knows the gateway is alive and what it sent wrong.
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            async with send:
                async for item in read:
                    if isinstance(item, Exception):
                        await write.send(SessionMessage(protocol_error(item)))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            # Prompts and resources listings can change (a drifted prompt withdrawn): say so.
            changes = NotificationOptions(prompts_changed=True, resources_changed=True)
            await server.run(receive, write, server.create_initialization_options(changes))
            tg.cancel_scope.cancel()
