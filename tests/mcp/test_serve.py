"""`tether mcp serve` as a client meets it: a subprocess over stdio fed raw JSON-RPC
(malformed lines and unknown methods get protocol errors, and it keeps serving), and over
streamable HTTP with a principal credential (none: 401), where a request sent again after
the client dropped its connection gets the recorded result instead of a second execution."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import httpx
import pytest

from tests.mcp.helpers import (
    approval_id,
    approve,
    connected,
    pin_tools,
    text,
    upstream_config,
    witness,
    write_config,
)
from tether.identity import add_identity
from tether.mcp.config import GatewayConfig
from tether.store import SQLiteStore

INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"},
}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[GatewayConfig, Path, str]:
    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state))
    anyio.run(pin_tools, config)
    return config, state, f"sqlite:///{tmp_path}/gateway.db"


def serve(
    config: GatewayConfig, db: str, *extra: str, token: str | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_DB"] = db
    if token is not None:
        env["TETHER_PRINCIPAL_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "mcp", "serve", "--config", str(config.path), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def exchange(proc: subprocess.Popen[bytes], line: str | dict[str, Any]) -> dict[str, Any] | None:
    assert proc.stdin is not None and proc.stdout is not None
    raw = line if isinstance(line, str) else json.dumps(line)
    proc.stdin.write(raw.encode() + b"\n")
    proc.stdin.flush()
    if isinstance(line, dict) and "id" not in line:
        return None  # a notification has no answer
    return read_message(proc.stdout)


def read_message(stdout: IO[bytes]) -> dict[str, Any]:
    while True:
        answer = stdout.readline()
        assert answer, "the gateway closed its stdout"
        message: dict[str, Any] = json.loads(answer)
        if "id" in message:  # skip the server's notifications (logging)
            return message


def test_malformed_json_rpc_and_unknown_methods_get_protocol_errors(
    setup: tuple[GatewayConfig, Path, str],
) -> None:
    config, _, db = setup
    proc = serve(config, db)
    try:
        init = exchange(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        assert init is not None and init["result"]["serverInfo"]["name"] == "tether-gateway"
        exchange(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        garbage = exchange(proc, "{this is not json")
        assert garbage is not None and garbage["error"]["code"] == -32700, garbage
        not_rpc = exchange(proc, '{"hello": "world"}')
        assert not_rpc is not None and not_rpc["error"]["code"] == -32600, not_rpc
        unknown = exchange(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/explode"})
        assert unknown is not None and unknown["error"]["code"] == -32601, unknown
        bad = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5}}
        invalid = exchange(proc, bad)
        assert invalid is not None and invalid["error"]["code"] == -32602, invalid
        listed = exchange(proc, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert listed is not None and "lookup" in {t["name"] for t in listed["result"]["tools"]}
        call = {"name": "lookup", "arguments": {"tenant": "acme", "key": "k"}}
        read = exchange(proc, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call})
        assert read is not None and read["result"]["content"][0]["text"] == "acme:k=value"
    finally:
        stop(proc)


def test_over_stdio_a_principal_credential_decides_who_calls(
    setup: tuple[GatewayConfig, Path, str],
) -> None:
    config, _, db = setup
    store = SQLiteStore(db)
    _, token = add_identity(store, "agent-g", "principal", now=time.time(), tenants=["globex"])
    store.close()
    refused = serve(config, db, token="tth_cred-0000000000000000_not-a-real-credential")
    assert refused.wait(timeout=30) == 2
    stop(refused)
    proc = serve(config, db, token=token)
    try:
        exchange(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        exchange(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i, tenant in enumerate(("globex", "acme")):
            call = {"name": "lookup", "arguments": {"tenant": tenant, "key": "k"}}
            message = {"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": call}
            answer = exchange(proc, message)
            assert answer is not None
            assert answer["result"]["isError"] is (tenant == "acme"), answer  # not the config's
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.communicate(timeout=10)  # also closes the pipes


def listening(proc: subprocess.Popen[bytes], url: str) -> None:
    """Wait (up to 30 s) until the gateway ``proc`` answers HTTP at ``url``."""
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            assert proc.poll() is None, "the gateway exited"
            assert time.monotonic() < deadline, "the gateway did not start listening"
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def http_gateway(setup: tuple[GatewayConfig, Path, str]) -> Iterator[tuple[str, str, Path, str]]:
    config, state, db = setup
    store = SQLiteStore(db)
    _, token = add_identity(store, "agent-7", "principal", now=time.time(), tenants=["acme"])
    store.close()
    port = free_port()
    proc = serve(config, db, "--http", "--port", str(port))
    url = f"http://127.0.0.1:{port}/mcp"
    listening(proc, url)
    try:
        yield url, token, state, db
    finally:
        stop(proc)


def post(
    client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str], **kw: Any
) -> httpx.Response:
    h = {"accept": "application/json, text/event-stream", **headers}
    return client.post(url, json=body, headers=h, **kw)


def answer(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("application/json"):
        found: dict[str, Any] = response.json()
        return found
    for line in response.text.splitlines():
        if line.startswith("data:") and '"id"' in line:
            message: dict[str, Any] = json.loads(line[5:])
            if "result" in message or "error" in message:
                return message
    raise AssertionError(f"no JSON-RPC answer in {response.text!r}")


def test_http_needs_a_credential_and_a_retried_request_runs_once(
    http_gateway: tuple[str, str, Path, str],
) -> None:
    url, token, state, db = http_gateway
    with httpx.Client() as client:
        denied = post(client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize"}, {})
        assert denied.status_code == 401
        forged = post(
            client,
            url,
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"authorization": "Bearer tth_cred-0000_forged"},
        )
        assert forged.status_code == 401
        auth = {"authorization": f"Bearer {token}"}
        init = post(
            client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, auth
        )
        assert init.status_code == 200, init.text
        session = {
            **auth,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        post(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        call = {"name": "slow_save", "arguments": {"key": "k", "seconds": 1.0}}
        asked = answer(
            post(
                client,
                url,
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
                session,
            )
        )
        approval = asked["result"]["_meta"]["io.tether/approval"]["approval_id"]
        store = SQLiteStore(db)
        approve(store, approval)
        request = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and drops the connection
            post(client, url, request, session, timeout=0.3)
        deadline = time.monotonic() + 10
        while not witness(state):
            assert time.monotonic() < deadline, "the call never ran"
            time.sleep(0.05)
        time.sleep(0.3)  # let the gateway record the outcome
        retried = answer(post(client, url, request, session, timeout=10))
        assert retried["result"]["content"][0]["text"] == "saved k slowly", retried
        assert retried["result"]["_meta"]["io.tether/outcome"]["replayed"] is True
    assert witness(state) == ["slow_save k"]
    [effect] = [e for e in store.list_effects() if e.tool_name == "slow_save"]
    assert effect.status.value == "committed"
    store.close()


def test_an_http_upstream_with_headers_is_reached_and_governed(
    http_gateway: tuple[str, str, Path, str], tmp_path: Path
) -> None:
    """A second gateway whose upstream is the first one's URL (with its bearer credential):
    the HTTP client side of the gateway, end to end."""
    url, token, state, _ = http_gateway
    outer = tmp_path / "outer"
    outer.mkdir()
    servers = f"""
[servers.inner]
url = "{url}"
headers = {{ Authorization = "Bearer {token}" }}
[servers.inner.tools.lookup]
risk = "read"
tenant_path = "tenant"
[servers.inner.tools.save]
risk = "write"
tenant_path = "tenant"
"""
    config = write_config(outer, servers)
    store = SQLiteStore(f"sqlite:///{outer}/outer.db")

    async def scenario() -> None:
        pinned, _ = await pin_tools(config)
        assert sorted(pinned) == ["inner/lookup", "inner/save"]
        async with connected(config, store) as (_, client):
            read = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
            assert text(read) == "acme:k=value"
            asked = await client.call_tool("save", {"tenant": "acme", "key": "k", "value": "v"})
            assert approval_id(asked)

    anyio.run(scenario)
    assert witness(state) == []
    store.close()


def test_sigterm_lets_a_call_in_flight_finish_and_record_its_outcome(
    setup: tuple[GatewayConfig, Path, str],
) -> None:
    config, state, db = setup
    proc = serve(config, db)
    try:
        exchange(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        exchange(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "slow_save", "arguments": {"key": "t", "seconds": 1.5}}
        asked = exchange(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        assert asked is not None
        store = SQLiteStore(db)
        approve(store, asked["result"]["_meta"]["io.tether/approval"]["approval_id"])
        assert proc.stdin is not None
        request = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        time.sleep(0.5)  # the call is running upstream now
        proc.terminate()  # SIGTERM: drain, then exit
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    assert witness(state) == ["slow_save t"]
    [effect] = [e for e in store.list_effects() if e.tool_name == "slow_save"]
    assert effect.status.value == "committed"  # recorded, not left dispatched
    store.close()
