"""Over HTTP, a call's identity and its approval outlive the request, and a session belongs
to its credential: stateless requests (no protocol session, as the 2026-07-28 protocol
sends them) find the approval an earlier request asked for and run once; a session id
presented with another principal's credential is a session that does not exist."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from tests.mcp.helpers import approve, witness
from tests.mcp.test_serve import INIT, answer, http_gateway, post, setup
from tether.identity import add_identity
from tether.store import SQLiteStore

__all__ = ["http_gateway", "setup"]  # the fixtures, shared with test_serve


MODERN = "2026-07-28"  # the stateless protocol: no handshake, no session, all in _meta
STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
}


def call(n: int, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def stateless(n: int, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return call(n, name, arguments, **STATELESS_META, **meta)


def test_stateless_requests_find_their_approval_and_a_resend_runs_once(
    http_gateway: tuple[str, str, Path, str],
) -> None:
    url, token, state, db = http_gateway
    auth = {
        "authorization": f"Bearer {token}",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": "slow_save",
    }
    save = {"key": "s", "seconds": 0.0}
    with httpx.Client(timeout=10) as client:
        asked = answer(post(client, url, stateless(1, "slow_save", save), auth))
        approval = asked["result"]["_meta"]["io.tether/approval"]["approval_id"]
        store = SQLiteStore(db)
        approve(store, approval)
        # Another request (a new client process starts at id 1 again), same call: it runs.
        ran = answer(post(client, url, stateless(1, "slow_save", save), auth))
        assert ran["result"]["content"][0]["text"] == "saved s slowly", ran
        # Resent: the ledger's record, never a second run.
        again = answer(post(client, url, stateless(1, "slow_save", save), auth))
        assert again["result"]["_meta"]["io.tether/outcome"]["replayed"] is True
    assert witness(state) == ["slow_save s"]
    runs = {e.run_id for e in store.list_effects()}
    assert len(runs) == 1  # one credential, one standing session
    store.close()


def test_a_session_id_with_another_credential_is_a_session_that_does_not_exist(
    http_gateway: tuple[str, str, Path, str],
) -> None:
    url, token, _, db = http_gateway
    store = SQLiteStore(db)
    _, other = add_identity(store, "agent-9", "principal", now=time.time(), tenants=["acme"])
    store.close()
    mine = {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10) as client:
        init = post(
            client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, mine
        )
        sid = init.headers["mcp-session-id"]
        session = {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        post(
            client,
            url,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {**mine, **session},
        )
        theirs = {"authorization": f"Bearer {other}", **session}
        h = {"accept": "application/json, text/event-stream", **theirs}
        stolen_call = post(client, url, call(2, "profile", {}), theirs)
        stolen_cancel = post(
            client,
            url,
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}},
            theirs,
        )
        stolen_stream = client.get(url, headers=h)
        stolen_delete = client.delete(url, headers=h)
        for refused in (stolen_call, stolen_cancel, stolen_stream, stolen_delete):
            assert refused.status_code == 404, (refused.request.method, refused.text)
        # The owner's session is untouched.
        own = answer(post(client, url, call(3, "profile", {}), {**mine, **session}))
        assert own["result"]["isError"] is False, own


def test_the_sdk_client_in_its_default_stateless_mode_gets_its_approved_call_once(
    http_gateway: tuple[str, str, Path, str],
) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url, token, state, db = http_gateway
    save = {"key": "sdk", "seconds": 0.0}

    async def one_client_process() -> Any:
        # Each Client is a new client process: it discovers the server (the 2026-07-28
        # protocol: no handshake, no session) and numbers its requests from the start.
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool("slow_save", save)

    asked = anyio.run(one_client_process)
    approval = (asked.meta or {})["io.tether/approval"]["approval_id"]
    store = SQLiteStore(db)
    approve(store, approval)
    ran = anyio.run(one_client_process)
    assert not ran.is_error and ran.content[0].text == "saved sdk slowly"
    again = anyio.run(one_client_process)  # the same call from yet another process
    assert (again.meta or {})["io.tether/outcome"]["replayed"] is True
    assert witness(state) == ["slow_save sdk"]
    store.close()
