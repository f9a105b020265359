"""Step 8: calling the tool with its operation key, from a synchronous caller or on an
event loop, within the manifest's ``timeout_s`` (a timeout is "unknown", never "failed":
the gate can stop waiting for a tool, not stop the tool)."""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import concurrent.futures

    from tether.tools.registry import Tool

# The operation keys this process is running a tool for right now. A ``dispatched`` effect
# whose key is here is in flight (another resume in this process has it), not of unknown
# outcome; one from another process cannot be told from a sender that died, so it stays
# "unknown" until it is reconciled.
_running: set[str] = set()
_running_lock = threading.Lock()


def start_running(operation_key: str) -> None:
    """Mark ``operation_key`` as in flight in this process: from before its ``dispatched``
    row commits until its outcome is recorded, so no reader sees it dispatched unmarked."""
    with _running_lock:
        _running.add(operation_key)


def stop_running(operation_key: str) -> None:
    with _running_lock:
        _running.discard(operation_key)


def in_flight(operation_key: str) -> bool:
    with _running_lock:
        return operation_key in _running


_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _tool_thread() -> concurrent.futures.ThreadPoolExecutor:
    import concurrent.futures  # only tools with a timeout need a thread

    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="tether-tool")
    return _executor


def _forget_the_parents_threads() -> None:
    """In a child just forked: only the forking thread came along. The inherited executor
    still counts the parent's tool threads, and an idle one among them, so it would queue
    every timed call for a thread that does not exist (each one then "unknown" after its
    timeout); the parent's in-flight keys are run by nobody here; and a lock held by
    another of its threads would never be released."""
    global _executor, _running_lock
    _executor = None
    _running_lock = threading.Lock()
    _running.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forget_the_parents_threads)


def invoke(tool: Tool, arguments: Mapping[str, Any], key: str) -> Any:
    timeout = tool.manifest.timeout_s
    if timeout is None:
        return _run_to_end(tool, arguments, key)
    # A thread lets the gate stop waiting; it cannot stop the tool, which is exactly why a
    # timeout is recorded as "unknown" rather than "failed".
    import concurrent.futures

    future = _tool_thread().submit(_run_to_end, tool, arguments, key)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"no answer within {timeout}s") from None


def _run_to_end(tool: Tool, arguments: Mapping[str, Any], key: str) -> Any:
    """The tool's answer from a synchronous caller: an async tool runs on a loop of its own
    (``Gate.call`` refuses an async tool on a thread whose loop is running)."""
    raw = tool.invoke(arguments, key)
    if inspect.iscoroutine(raw):
        import asyncio

        return asyncio.run(raw)
    return raw


async def ainvoke(tool: Tool, arguments: Mapping[str, Any], key: str) -> Any:
    """The tool's answer on the caller's event loop (see ``Gate.acall``)."""
    import asyncio

    timeout = tool.manifest.timeout_s
    if timeout is not None and not tool.is_async:
        # A synchronous tool with a limit runs in the tool thread, as under ``call``, so
        # the loop can stop waiting for it (and keeps serving others meanwhile).
        running = asyncio.get_running_loop().run_in_executor(
            _tool_thread(), _run_to_end, tool, arguments, key
        )
        try:
            return await asyncio.wait_for(running, timeout)
        except TimeoutError:
            raise TimeoutError(f"no answer within {timeout}s") from None
    raw = tool.invoke(arguments, key)
    if not inspect.isawaitable(raw):
        return raw
    if timeout is None:
        return await raw
    try:
        return await asyncio.wait_for(raw, timeout)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout}s") from None


def loop_running() -> bool:
    """Whether this thread runs an asyncio event loop (no import: without asyncio loaded,
    none can be)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
