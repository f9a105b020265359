"""The gateway against the SDK test upstream (tests/mcp/upstream_server.py, a subprocess):
what is offered, reads, approvals, tenancy, rug pulls, poisoning, result limits, redaction,
upstream errors and crashes. The agent is the SDK's own client on the gateway's server."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from tests.mcp.helpers import (
    TEST_TOOLS,
    approval_id,
    approve,
    audit_kinds,
    connected,
    pin_tools,
    text,
    upstream_config,
    witness,
    write_config,
)
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import EffectStatus
from tether.errors import TetherError
from tether.gate.desk import decide_approval
from tether.identity import add_identity, authenticate
from tether.mcp.caller import Caller
from tether.mcp.config import GatewayConfig
from tether.mcp.tracing import WhenTraced
from tether.runs.reconcile import resolve_effect
from tether.store import SQLiteStore


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "upstream"
    folder.mkdir()
    return folder


@pytest.fixture
def config(tmp_path: Path, state: Path) -> GatewayConfig:
    return write_config(tmp_path, upstream_config(state))


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{tmp_path}/gateway.db")


def test_only_configured_pinned_tools_are_offered_and_a_read_runs(
    config: GatewayConfig, store: SQLiteStore
) -> None:
    async def scenario() -> None:
        pinned, problems = await pin_tools(config)
        assert "test/add" not in pinned  # poisoned: not pinned, so not offered
        assert any("test/add" in p and "poisoned" in p for p in problems), problems
        async with connected(config, store) as (gateway, client):
            # The SDK's span per request only when tracing is on (tether.mcp.tracing).
            assert all(isinstance(m, WhenTraced) for m in gateway.server().middleware)
            names = sorted(t.name for t in (await client.list_tools()).tools)
            assert names == sorted(set(TEST_TOOLS) - {"add"})  # not 'unlisted', not 'add'
            read = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
            assert not read.is_error and text(read) == "acme:k=value"
            unknown = await client.call_tool("unlisted", {})
            assert unknown.is_error and "unlisted" in text(unknown)

    anyio.run(scenario)
    assert "tool_effect_resolved" in audit_kinds(store)
    [effect] = store.list_effects()
    assert effect.status is EffectStatus.COMMITTED and effect.tool_name == "lookup"


def test_a_write_waits_for_approval_then_runs_once(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    args = {"tenant": "acme", "key": "k", "value": "v"}

    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            asked = await client.call_tool("save", args)
            approval = approval_id(asked)
            assert f"tether approvals approve {approval}" in text(asked)
            assert witness(state) == []
            again = await client.call_tool("save", args)  # still pending: the same approval
            assert approval_id(again) == approval
            approve(store, approval)
            done = await client.call_tool("save", args)
            assert not done.is_error and text(done) == "saved k"
            assert witness(state) == ["save k v"]
            # A further write with the same arguments is a new call: it asks anew.
            fresh = await client.call_tool("save", args)
            assert approval_id(fresh) != approval

    anyio.run(scenario)
    assert witness(state) == ["save k v"]
    kinds = audit_kinds(store)
    for kind in ("approval_requested", "approval_granted", "tool_effect_resolved"):
        assert kind in kinds, kinds
    [effect] = [e for e in store.list_effects() if e.tool_name == "save"]
    assert effect.status is EffectStatus.COMMITTED


def test_a_call_for_another_tenant_is_refused_before_it_reaches_the_server(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            other = await client.call_tool("lookup", {"tenant": "globex", "key": "k"})
            assert other.is_error and "globex" in text(other)
            write = await client.call_tool("save", {"tenant": "globex", "key": "k", "value": "v"})
            assert write.is_error and "globex" in text(write)
            assert not (write.meta or {}).get("io.tether/approval")

    anyio.run(scenario)
    assert witness(state) == []
    assert store.list_effects() == []
    assert audit_kinds(store).count("call_denied") == 2


def test_a_rug_pull_between_sessions_is_blocked_until_pinned_again(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    args = {"tenant": "acme", "key": "k", "value": "v"}

    async def scenario() -> None:
        await pin_tools(config)
        (state / "variant").write_text("v2")  # the server changes 'save' after review
        async with connected(config, store) as (_, client):
            offered = {t.name: t for t in (await client.list_tools()).tools}
            assert "mode" not in offered["save"].input_schema["properties"]  # as pinned
            blocked = await client.call_tool("save", args)
            assert blocked.is_error
            assert "inputSchema.properties.mode added" in text(blocked), text(blocked)
            assert "tether mcp pin" in text(blocked)
            read = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
            assert not read.is_error  # an unchanged tool still works
        await pin_tools(config)  # the operator reviewed v2
        async with connected(config, store) as (_, client):
            asked = await client.call_tool("save", args)
            assert "needs a human's approval" in text(asked)

    anyio.run(scenario)
    assert witness(state) == []
    assert "mcp_tool_blocked" in audit_kinds(store)


def test_list_changed_mid_session_blocks_the_changed_tool(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (gateway, client):
            assert gateway.offered["save"].blocked is None
            await client.call_tool("mutate", {})
            with anyio.fail_after(10):
                while gateway.offered["save"].blocked is None:
                    await anyio.sleep(0.02)
            blocked = await client.call_tool("save", {"tenant": "acme", "key": "k", "value": "v"})
            assert blocked.is_error and "changed on MCP server 'test'" in text(blocked)

    anyio.run(scenario)
    assert witness(state) == []


def test_a_poisoned_description_is_flagged_and_pinned_only_when_accepted(
    config: GatewayConfig, store: SQLiteStore
) -> None:
    async def scenario() -> None:
        _, problems = await pin_tools(config)
        [problem] = [p for p in problems if p.startswith("test/add")]
        assert "<IMPORTANT>" in problem or "important" in problem.lower()
        assert "~/.ssh" in problem or "user" in problem
        pinned, problems = await pin_tools(config, accept={"test/add"})
        assert "test/add" in pinned and not problems
        async with connected(config, store) as (_, client):
            added = await client.call_tool("add", {"a": 1, "b": 2})
            assert text(added) == "3"

    anyio.run(scenario)


def test_results_are_capped_redacted_and_upstream_errors_fail(
    config: GatewayConfig, store: SQLiteStore
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            big = await client.call_tool("big", {"size": 50_000})
            assert len(text(big).encode()) < 1200 and "result capped" in text(big)
            capped = (big.meta or {})["io.tether/capped"]
            whole = {"content": [{"type": "text", "text": "x" * 50_000}]}
            assert capped["bytes"] == len(canonical_json(whole))
            assert capped["sha256"] == "sha256:" + sha256_hex(canonical_json(whole))
            profile = await client.call_tool("profile", {})
            # Passed through as the server gave it (text and structured content), with the
            # credential-looking key redacted as the ledger holds it.
            assert text(profile) == "profile"
            assert profile.structured_content == {
                "user": "ann",
                "api_key": "[REDACTED]",
                "plan": "pro",
            }
            failed = await client.call_tool("fail", {})
            assert failed.is_error and "disk full" in text(failed)
            drop = await client.call_tool("drop", {})  # configured read, says destructive
            assert approval_id(drop)

    anyio.run(scenario)
    stored = {e.tool_name: e for e in store.list_effects()}
    assert stored["fail"].status is EffectStatus.FAILED
    assert "k-123" not in (stored["profile"].result_json or "")
    assert "drop" not in stored
    assert len(stored["big"].result_json or "") < 1000  # not the 50,000 bytes it was sent


def test_an_upstream_that_dies_mid_call_leaves_an_unknown_effect_a_human_resolves(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (gateway, client):
            assert config.principal is not None
            caller = Caller(config.principal, "session-1")
            asked = await gateway.call_tool(caller, 1, "crash", {"key": "c"})
            approve(store, approval_id(asked))
            lost = await gateway.call_tool(caller, 2, "crash", {"key": "c"})
            assert lost.is_error and "unknown" in text(lost), text(lost)
            again = await gateway.call_tool(caller, 2, "crash", {"key": "c"})  # a retry
            assert again.is_error and "unknown" in text(again)  # never sent a second time
            with anyio.fail_after(20):  # the gateway starts the server again
                while gateway.upstreams["test"].lost is not None:
                    await anyio.sleep(0.05)
            after = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
            assert not after.is_error and text(after) == "acme:k=value"
            [effect] = [e for e in store.list_effects() if e.tool_name == "crash"]
            assert effect.status is EffectStatus.UNKNOWN
            # The server cannot be asked what it did: a human who checked says so.
            resolve_effect(
                store,
                effect.operation_key,
                committed=True,
                result="saved c",
                actor="alice",
                now=time.time(),
            )
            replayed = await gateway.call_tool(caller, 2, "crash", {"key": "c"})
            assert not replayed.is_error and text(replayed) == "saved c"

    anyio.run(scenario)
    assert witness(state) == ["crash c"]  # it acted once; nothing sent it again
    [effect] = [e for e in store.list_effects() if e.tool_name == "crash"]
    assert effect.status is EffectStatus.RECONCILED_COMMITTED


def test_a_session_budget_stops_calls_with_the_numbers(
    tmp_path: Path, state: Path, store: SQLiteStore
) -> None:
    config = write_config(tmp_path, upstream_config(state) + "\n[budget]\nmax_steps = 2\n")

    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            for _ in range(2):
                ok = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
                assert not ok.is_error
            over = await client.call_tool("lookup", {"tenant": "acme", "key": "k"})
            assert over.is_error and "need 1, remaining 0" in text(over), text(over)

    anyio.run(scenario)


def test_a_denied_call_is_told_why_and_never_runs(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    args = {"tenant": "acme", "key": "k", "value": "v"}

    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            approval = approval_id(await client.call_tool("save", args))
            _, token = add_identity(store, "bob", "approver", now=time.time(), tenants=["acme"])
            who = authenticate(store, token, "approver")
            with pytest.raises(TetherError):  # bob is not an approver the policy names
                decide_approval(store, approval, who, approve=False, now=time.time())
            approve_as = authenticate(
                store,
                add_identity(store, "alice", "approver", now=time.time(), tenants=["acme"])[1],
                "approver",
            )
            decide_approval(
                store,
                approval,
                approve_as,
                approve=False,
                now=time.time(),
                reason="not on a Friday",
            )
            denied = await client.call_tool("save", args)
            assert denied.is_error and "not on a Friday" in text(denied), text(denied)

    anyio.run(scenario)
    assert witness(state) == []
    assert "approval_denied" in audit_kinds(store)


def test_undeclared_arguments_and_credentials_never_reach_the_server(
    config: GatewayConfig, store: SQLiteStore
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            extra = await client.call_tool("lookup", {"tenant": "acme", "key": "k", "debug": 1})
            assert extra.is_error and "'debug'" in text(extra) and "pinned" in text(extra)
            key = "sk-" + "a1B2" * 8
            leaked = await client.call_tool("lookup", {"tenant": "acme", "key": key})
            assert leaked.is_error and "credential" in text(leaked)
            assert key not in text(leaked)

    anyio.run(scenario)
    assert store.list_effects() == []  # neither call reached the server


def test_an_unsettled_call_is_not_sent_again_from_another_session_or_after_a_restart(
    config: GatewayConfig, store: SQLiteStore, state: Path
) -> None:
    async def scenario() -> None:
        await pin_tools(config)
        assert config.principal is not None
        first = Caller(config.principal, "session-1")
        async with connected(config, store) as (gateway, _):
            approve(store, approval_id(await gateway.call_tool(first, 1, "crash", {"key": "u"})))
            lost = await gateway.call_tool(first, 2, "crash", {"key": "u"})
            assert lost.is_error and "unknown" in text(lost)
            # The client reconnects: a new session sends the same call. No approval is
            # asked for, nothing is sent: the unsettled one is named.
            other = Caller(config.principal, "session-2")
            refused = await gateway.call_tool(other, 1, "crash", {"key": "u"})
            assert refused.is_error and "may have run" in text(refused), text(refused)
        # A gateway started later on the same store knows it from the ledger.
        async with connected(config, store) as (gateway, _):
            third = Caller(config.principal, "session-3")
            again = await gateway.call_tool(third, 1, "crash", {"key": "u"})
            assert again.is_error and "may have run" in text(again)
            # Once a human settles it, an identical call is a new call again (it asks).
            [effect] = [e for e in store.list_effects() if e.tool_name == "crash"]
            resolve_effect(
                store,
                effect.operation_key,
                committed=True,
                result="ok",
                actor="alice",
                now=time.time(),
            )
            fresh = await gateway.call_tool(third, 2, "crash", {"key": "u"})
            assert approval_id(fresh)

    anyio.run(scenario)
    assert witness(state) == ["crash u"]
