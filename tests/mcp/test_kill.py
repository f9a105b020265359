"""A `tether mcp serve` process killed with SIGKILL mid-call, and started again on the same
store: the effect it left ``dispatched`` is marked unknown as the new process starts, the
client resending the same request (same call identity) is told its outcome is unknown and
nothing runs a second time, and a new session's identical call is refused naming it — both
when the upstream had acted before the kill and when it had not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.mcp.helpers import (
    approve,
    effect_of,
    pin_tools,
    the_effect,
    upstream_config,
    witness,
    write_config,
)
from tests.mcp.test_serve import INIT, exchange
from tether.mcp.config import GatewayConfig
from tether.store import SQLiteStore

META = {"io.tether/session": "conversation-7", "io.tether/call_id": "write-1"}


def start(config: GatewayConfig, db: str) -> subprocess.Popen[bytes]:
    """The gateway in a process group of its own, so the kill takes its upstream too (as a
    container's or a machine's end would)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_DB"] = db
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "mcp", "serve", "--config", str(config.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    exchange(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    exchange(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def call(tool: str, request_id: int, meta: dict[str, str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": {"key": "k", "seconds": 60}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.mark.parametrize("acted", [True, False], ids=["it-acted", "it-had-not"])
def test_a_gateway_killed_mid_call_and_restarted_never_runs_the_call_twice(
    tmp_path: Path, acted: bool
) -> None:
    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state))
    anyio.run(pin_tools, config)
    db = f"sqlite:///{tmp_path}/gateway.db"
    tool = "save_then_wait" if acted else "slow_save"
    first = start(config, db)
    try:
        asked = exchange(first, call(tool, 2, META))
        assert asked is not None and asked["result"]["isError"], asked
        store = SQLiteStore(db)
        approve(store, asked["result"]["_meta"]["io.tether/approval"]["approval_id"])
        store.close()
        assert first.stdin is not None
        first.stdin.write(json.dumps(call(tool, 3, META)).encode() + b"\n")
        first.stdin.flush()
        deadline = time.monotonic() + 20
        while True:  # the call is durable as dispatched (and, if it acted, has acted)
            effect = effect_of(db, tool)
            dispatched = effect is not None and effect.status.value == "dispatched"
            if dispatched and (not acted or witness(state)):
                break
            assert time.monotonic() < deadline, "the call never reached the upstream"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=10)
    ran = witness(state)
    assert ran == ([f"{tool} k"] if acted else [])
    assert the_effect(db, tool).status.value == "dispatched"  # what the dead process left

    second = start(config, db)
    try:
        # Settled at start, before any request: unknown, not left dispatched.
        assert the_effect(db, tool).status.value == "unknown"
        resent = exchange(second, call(tool, 3, META))
        assert resent is not None, resent
        result = resent["result"]
        assert result["isError"] and "unknown" in result["content"][0]["text"], result
        assert "io.tether/approval" not in (result.get("_meta") or {})  # not asked again
        # A client that lost its conversation sends the identical call in a new session:
        # refused, naming the unsettled call, and no approval is asked for.
        fresh = exchange(second, call(tool, 4))
        assert fresh is not None
        text = fresh["result"]["content"][0]["text"]
        assert fresh["result"]["isError"] and "may have run" in text, text
        assert the_effect(db, tool).operation_key in text
        listed = exchange(second, {"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
        assert listed is not None and tool in {t["name"] for t in listed["result"]["tools"]}
        time.sleep(0.3)
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.communicate(timeout=20)
    assert witness(state) == ran  # nothing ran a second time
    store = SQLiteStore(db)
    try:
        effects = [e for e in store.list_effects() if e.tool_name == tool]
        assert [e.status.value for e in effects] == ["unknown"]
        assert "effect_unknown" in {e.kind for e in store.audit_entries()}
    finally:
        store.close()


def test_over_http_the_stateless_sdk_client_resending_after_a_kill_is_told_unknown(
    tmp_path: Path,
) -> None:
    """The official Python SDK client in its default mode (the 2026-07-28 protocol: every
    request its own, request ids restarting with each client process), over HTTP."""
    import threading

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.mcp.test_serve import free_port, listening
    from tether.identity import add_identity

    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state))
    anyio.run(pin_tools, config)
    db = f"sqlite:///{tmp_path}/gateway.db"
    store = SQLiteStore(db)
    _, token = add_identity(store, "agent-h", "principal", now=time.time(), tenants=["acme"])
    store.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    arguments = {"key": "h", "seconds": 60}

    def start_http() -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env["TETHER_DB"] = db
        argv = ["mcp", "serve", "--config", str(config.path), "--http", "--port", str(port)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        listening(proc, url)
        return proc

    def one_client_process() -> Any:
        async def go() -> Any:
            http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=90)
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await client.call_tool("save_then_wait", arguments)

        return anyio.run(go)

    first = start_http()
    try:
        asked = one_client_process()
        store = SQLiteStore(db)
        approve(store, (asked.meta or {})["io.tether/approval"]["approval_id"])
        store.close()
        lost: list[BaseException] = []

        def in_flight() -> None:
            try:
                one_client_process()
            except BaseException as e:  # the gateway dies under it
                lost.append(e)

        caller = threading.Thread(target=in_flight, daemon=True)
        caller.start()
        deadline = time.monotonic() + 20
        while not witness(state) or effect_of(db, "save_then_wait") is None:
            assert time.monotonic() < deadline, "the call never reached the upstream"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        caller.join(timeout=30)
        assert lost, "the client should have lost its call"
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert the_effect(db, "save_then_wait").status.value == "dispatched"

    second = start_http()
    try:
        assert the_effect(db, "save_then_wait").status.value == "unknown"  # settled at start
        resent = one_client_process()  # a new client process sends the same call again
        assert resent.is_error and "unknown" in resent.content[0].text, resent
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=30)
    assert witness(state) == ["save_then_wait h"]  # once
