"""The gateway's stdio connection to an upstream server: the SDK's stdio transport, with a
line reader that stays linear in a message's size and that caps an oversized result as it
arrives.

The SDK's reader joins each chunk of the server's stdout onto what it has buffered, so a
message of n bytes costs n²/64 KiB of copying: a 40 MB file read took minutes. This reader
keeps the chunks of an unfinished line in a list and joins them once. A line longer than
the server's largest tool cap that answers a request with content is capped here, before it
is validated into models (``capped.precap``): the models, the ledger and the client then
carry the capped result, with the size and digest of the whole in its ``_meta``.

Shutdown follows the specification's order, as the SDK's does: close the server's stdin,
wait, then end its process group.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from tether.mcp.capped import precap

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

__all__ = ["stdio_pipe"]

GRACE_S = 2.0  # for the server to exit once its stdin closes, then for SIGTERM to work


@asynccontextmanager
async def stdio_pipe(params: Any, errlog: TextIO, cap_bytes: int) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``params`` (``mcp.StdioServerParameters``) and yield the SDK's stream pair."""
    import mcp_types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,  # its own group: ending it ends what it started
    )
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    def parse(box: list[bytearray]) -> SessionMessage | Exception:
        # Handed over in a box so that each copy of a large line (bytes, text, objects)
        # is let go as soon as the next exists: at most two of them live at a time.
        try:
            if len(box[0]) <= cap_bytes:
                return SessionMessage(
                    mcp_types.jsonrpc_message_adapter.validate_json(box.pop(), by_name=False)
                )
            text = [box.pop().decode()]
            return SessionMessage(
                mcp_types.jsonrpc_message_adapter.validate_python(precap(text, cap_bytes))
            )
        except ValueError as e:
            return e

    async def read() -> None:
        assert process.stdout is not None
        # The unfinished line, grown in place: a 40 MB message is one buffer, not a list of
        # chunks and then their join.
        pending = bytearray()
        async with to_session:
            with contextlib.suppress(
                anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError
            ):
                async for chunk in process.stdout:
                    rest = chunk
                    while rest:
                        end = rest.find(b"\n")
                        if end < 0:
                            pending += rest
                            break
                        pending += rest[:end]
                        rest = rest[end + 1 :]
                        if pending.strip():
                            box, pending = [pending], bytearray()
                            message = parse(box)
                            await to_session.send(message)
                        else:
                            pending.clear()

    async def write() -> None:
        assert process.stdin is not None
        async with from_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in from_session:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(text.encode() + b"\n")
        await to_session.aclose()  # the server cannot be written to: the session ends

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (from_server, to_server):
                    await stream.aclose()
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _exited(process, GRACE_S):
        if sys.platform != "win32":
            from mcp.os.posix.utilities import terminate_posix_process_tree

            await terminate_posix_process_tree(process, GRACE_S)
        else:  # pragma: no cover - the gateway's upstreams over stdio are POSIX-tested
            process.kill()
        await _exited(process, GRACE_S)
    if process.stdout is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    # Polled, not ``wait()``: a child that inherited the pipes makes ``wait`` hang.
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None
