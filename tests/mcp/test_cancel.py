"""A client's cancellation of a call in flight, through `tether mcp serve` (a subprocess) to
the test upstream (another): the gateway tells the server, naming the server's own request
id, and records what the server did — nothing within the wait (it honoured the cancel):
unknown, a resend refused naming it; an answer anyway (it ignored the cancel): that
answer, a resend replaying it. The client that cancelled is never answered. Over HTTP the
owner's cancellation goes through, another credential's is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import RequestParamsMeta

from tests.mcp.helpers import (
    approval_id,
    approve,
    effect_of,
    pin_tools,
    text,
    upstream_config,
    witness,
    write_config,
)
from tests.mcp.test_serve import (
    INIT,
    answer,
    free_port,
    listening,
    post,
    read_message,
    serve,
    stop,
)
from tether.identity import add_identity
from tether.mcp.config import GatewayConfig
from tether.store import SQLiteStore

WAIT_S = 3.0  # the server table's cancel_wait_seconds in these tests
# The call's identity, so a resend is the same call (RequestParamsMeta is an open map).
META = cast(RequestParamsMeta, {"io.tether/call_id": "cancel-1"})


@pytest.fixture
def setup(tmp_path: Path) -> tuple[GatewayConfig, Path, str]:
    state = tmp_path / "upstream"
    state.mkdir()
    keys = f"cancel_wait_seconds = {WAIT_S}"
    config = write_config(tmp_path, upstream_config(state, keys=keys))
    anyio.run(pin_tools, config)
    return config, state, f"sqlite:///{tmp_path}/gateway.db"


def gateway_env(db: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_DB"] = db
    return env


@asynccontextmanager
async def sdk_client(config: GatewayConfig, db: str) -> AsyncIterator[Client]:
    """The SDK's client (its default mode) on `tether mcp serve` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tether", "mcp", "serve", "--config", str(config.path)],
        env=gateway_env(db),
    )
    with open(os.devnull, "w") as quiet:
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(params, errlog=quiet)) as client:
            yield client


def lines(state: Path, name: str) -> list[str]:
    path = state / name
    return path.read_text().splitlines() if path.exists() else []


def status(db: str, tool: str = "slow_save") -> str | None:
    effect = effect_of(db, tool)
    return None if effect is None else effect.status.value


async def until(what: Callable[[], object], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out waiting"
        await anyio.sleep(0.05)


def approve_in(db: str, result: Any) -> None:
    store = SQLiteStore(db)
    try:
        approve(store, approval_id(result))
    finally:
        store.close()


async def cancel_once_started(client: Client, state: Path, arguments: dict[str, Any]) -> None:
    """Send the call, and cancel it (the SDK sends notifications/cancelled) once the
    upstream has started it."""
    answered: list[Any] = []

    async def call() -> None:
        answered.append(await client.call_tool("slow_save", arguments, meta=META))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await until(lambda: lines(state, "started.log"))
        tg.cancel_scope.cancel()
    assert not answered


def test_a_cancel_the_server_honours_leaves_the_call_unknown_and_its_resend_refused(
    setup: tuple[GatewayConfig, Path, str],
) -> None:
    config, state, db = setup
    arguments = {"key": "c", "seconds": 2.0}  # it would answer within the wait, had it run

    async def scenario() -> None:
        async with sdk_client(config, db) as client:
            approve_in(db, await client.call_tool("slow_save", arguments, meta=META))
            started = time.monotonic()
            await cancel_once_started(client, state, arguments)
            await until(lambda: lines(state, "cancels.log"))
            # The server was told, naming the request the gateway sent it (its own id).
            (call,) = lines(state, "started.log")
            upstream_id = call.split()[1]
            assert lines(state, "cancels.log")[0] == upstream_id
            # Nothing answers: the call is in flight until the wait ends, then unknown.
            await until(lambda: status(db) == "unknown", WAIT_S + 10)
            assert time.monotonic() - started >= WAIT_S
            resent = await client.call_tool("slow_save", arguments, meta=META)
            effect = effect_of(db, "slow_save")
            assert effect is not None
            assert resent.is_error and "unknown" in text(resent), text(resent)
            assert effect.operation_key in text(resent)
            # A new call with the same arguments (a client that lost its call id) is
            # refused too, naming the unsettled one, and asks for no approval.
            fresh = await client.call_tool("slow_save", arguments)
            assert fresh.is_error and effect.operation_key in text(fresh), text(fresh)
            assert "io.tether/approval" not in (fresh.meta or {})

    anyio.run(scenario)
    assert witness(state) == []  # it stopped: the server honoured the cancellation
    assert lines(state, "started.log") == [lines(state, "started.log")[0]]  # sent once
    assert [e.status.value for e in SQLiteStore(db).list_effects()] == ["unknown"]


def test_a_cancel_the_server_ignores_records_its_answer_and_a_resend_replays_it(
    setup: tuple[GatewayConfig, Path, str],
) -> None:
    config, state, db = setup
    (state / "deaf").touch()  # the server drops cancellations and answers anyway
    arguments = {"key": "d", "seconds": 1.0}

    async def scenario() -> None:
        async with sdk_client(config, db) as client:
            approve_in(db, await client.call_tool("slow_save", arguments, meta=META))
            await cancel_once_started(client, state, arguments)
            await until(lambda: status(db) == "committed", WAIT_S + 10)
            assert lines(state, "cancels.log") == [lines(state, "started.log")[0].split()[1]]
            resent = await client.call_tool("slow_save", arguments, meta=META)
            assert not resent.is_error and text(resent) == "saved d slowly", text(resent)
            assert (resent.meta or {})["io.tether/outcome"]["replayed"] is True

    anyio.run(scenario)
    assert witness(state) == ["slow_save d"]  # it ran, once
    assert len(lines(state, "started.log")) == 1


# -- the wire, raw: the client that cancelled is never answered ------------------------------
def send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def call_message(n: int, arguments: dict[str, Any], call_id: str = "cancel-1") -> dict[str, Any]:
    params = {"name": "slow_save", "arguments": arguments, "_meta": {"io.tether/call_id": call_id}}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def cancel_message(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": n}}


@pytest.mark.parametrize("deaf", [False, True], ids=["honoured", "ignored"])
def test_over_stdio_the_cancelled_request_gets_no_answer_either_way(
    setup: tuple[GatewayConfig, Path, str], deaf: bool
) -> None:
    config, state, db = setup
    if deaf:
        (state / "deaf").touch()
    arguments = {"key": "r", "seconds": 1.0}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "mcp", "serve", "--config", str(config.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=gateway_env(db),
    )
    try:
        assert proc.stdout is not None
        send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        read_message(proc.stdout)
        send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(proc, call_message(2, arguments))
        approve_in(db, _Result(read_message(proc.stdout)))
        send(proc, call_message(3, arguments))
        anyio.run(until, lambda: lines(state, "started.log"))
        send(proc, cancel_message(3))
        anyio.run(until, lambda: status(db) in ("unknown", "committed"), WAIT_S + 10)
        send(proc, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        # The next answer is the listing's: request 3 is never answered.
        assert read_message(proc.stdout)["id"] == 4
    finally:
        stop(proc)
    assert status(db) == ("committed" if deaf else "unknown")
    assert witness(state) == (["slow_save r"] if deaf else [])
    upstream_id = lines(state, "started.log")[0].split()[1]
    assert set(lines(state, "cancels.log")) == {upstream_id}  # told, either way


class _Result:
    """A raw tools/call answer, as `approval_id` reads an SDK result."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.is_error = message["result"]["isError"]
        self.meta = message["result"].get("_meta")
        self.content: list[Any] = []


# -- over HTTP: the owner's cancellation, and another credential's ---------------------------
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


def test_over_http_the_owner_cancels_and_another_credential_cannot(
    http_gateway: tuple[str, str, Path, str],
) -> None:
    url, token, state, db = http_gateway
    store = SQLiteStore(db)
    _, other = add_identity(store, "agent-9", "principal", now=time.time(), tenants=["acme"])
    store.close()
    mine = {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30) as client:
        init = post(
            client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, mine
        )
        session = {"mcp-session-id": init.headers["mcp-session-id"]}
        session["mcp-protocol-version"] = "2025-06-18"
        owner = {**mine, **session}
        post(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, owner)

        def in_flight(n: int, key: str) -> tuple[threading.Thread, list[httpx.Response]]:
            """Request ``n`` asks for approval, granted; ``n + 1`` runs, on a thread."""
            arguments = {"key": key, "seconds": 1.5}
            asked = answer(post(client, url, call_message(n, arguments, key), owner))
            approve_in(db, _Result(asked))
            got: list[httpx.Response] = []
            body = call_message(n + 1, arguments, key)

            def run() -> None:
                with httpx.Client(timeout=30) as own:
                    got.append(post(own, url, body, owner))

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            return thread, got

        # Another credential's cancellation is a session that does not exist: the call
        # runs on and is answered.
        thread, got = in_flight(2, "t")
        anyio.run(until, lambda: lines(state, "started.log"))
        theirs = {"authorization": f"Bearer {other}", **session}
        refused = post(client, url, cancel_message(3), theirs)
        assert refused.status_code == 404, refused.text
        thread.join(timeout=30)
        assert answer(got[0])["result"]["content"][0]["text"] == "saved t slowly"
        assert lines(state, "cancels.log") == []

        # The owner's goes to the server, and the request gets no result: the SDK's HTTP
        # transport must end the request's stream, and does so with "Request cancelled".
        thread, got = in_flight(4, "m")
        anyio.run(until, lambda: len(lines(state, "started.log")) == 2)
        accepted = post(client, url, cancel_message(5), owner)
        assert accepted.status_code == 202, accepted.text
        thread.join(timeout=WAIT_S + 30)
        ended = answer(got[0])
        assert "result" not in ended and ended["error"]["code"] == -32800, ended
    upstream_id = lines(state, "started.log")[1].split()[1]
    assert set(lines(state, "cancels.log")) == {upstream_id}  # its id (told twice: the module)
    effects = {e.call_id: e.status.value for e in SQLiteStore(db).list_effects()}
    assert effects == {"mcp-t": "committed", "mcp-m": "unknown"}
    assert witness(state) == ["slow_save t"]


# -- the edges, against a stand-in request ----------------------------------------------------
def run_cancelled(
    request: Callable[[Any], Any], *, noted: bool = True, before: bool = False
) -> tuple[list[Any], BaseException | None]:
    """``cancellable`` around ``request(writes)`` (``writes``: the noting write stream),
    cancelled by its client at once (``before``: before it starts); what the server was
    told and what came out."""
    from mcp.shared.message import SessionMessage

    from tether.mcp.cancel import CANCEL, _NotingWrites, cancellable

    told: list[Any] = []
    raised: list[BaseException] = []

    async def scenario() -> None:
        send, receive = anyio.create_memory_object_stream[SessionMessage](10)
        writes = _NotingWrites(send)
        cancelled = anyio.Event()
        if before:
            cancelled.set()

        async def tell(request_id: Any) -> None:
            told.append(request_id)

        token = CANCEL.set(cancelled)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_later, cancelled)
                await cancellable(
                    lambda: request(writes), tell, what="x", wait_s=0.3, noted=noted, note=print
                )
        except BaseException as e:
            raised.append(e.exceptions[0] if isinstance(e, BaseExceptionGroup) else e)
        finally:
            CANCEL.reset(token)
            send.close()
            receive.close()

    anyio.run(scenario)
    return told, raised[0] if raised else None


async def _later(event: anyio.Event) -> None:
    await anyio.sleep(0.05)
    event.set()


async def _written(writes: Any, then: Callable[[], Any]) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCRequest

    await writes.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/call")))
    return await then()


def test_a_call_cancelled_before_it_is_sent_never_reaches_the_server_and_is_failed() -> None:
    from tether.errors import CancelledUnsent

    started: list[bool] = []

    async def request(writes: Any) -> None:
        started.append(True)

    told, raised = run_cancelled(request, before=True)
    assert isinstance(raised, CancelledUnsent) and not started and not told
    # Cancelled while the request is on its way but not yet written: not sent either,
    # when the transport notes what it writes; without that, nobody can tell.
    told, raised = run_cancelled(lambda writes: anyio.sleep(10))
    assert isinstance(raised, CancelledUnsent) and not told
    told, raised = run_cancelled(lambda writes: anyio.sleep(10), noted=False)
    assert type(raised).__name__ == "CancelUnanswered" and not told


def test_a_protocol_error_after_the_cancel_is_unknown_and_a_lost_connection_stays_lost() -> None:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    from tether.errors import CancelUnanswered

    def answering(code: int) -> Callable[[Any], Any]:
        async def then() -> None:
            await anyio.sleep(0.1)  # after the cancel: the server's "request cancelled"
            raise MCPError(code=code, message="Request cancelled")

        return lambda writes: _written(writes, then)

    told, raised = run_cancelled(answering(0))
    assert told == [7] and isinstance(raised, CancelUnanswered)
    assert isinstance(raised, TimeoutError)  # what the gate records as unknown
    told, raised = run_cancelled(answering(CONNECTION_CLOSED))
    assert told == [7] and isinstance(raised, MCPError)  # the upstream's own path: lost
