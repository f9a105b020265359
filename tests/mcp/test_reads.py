"""Resources and prompts through the gateway as governed reads, with the official SDK client:
listed only as pinned, a poisoned resource left out, every read and prompt judged by the gate
(ledger, audit), instruction-like resource text flagged, a drifted prompt refused, reads for
another tenant refused, and the read manifests never callable as tools."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from tests.mcp.helpers import (
    audit_kinds,
    connected,
    pin_tools,
    text,
    upstream_config,
    witness,
    write_config,
)
from tether.core.digest import canonical_json, sha256_hex
from tether.core.screening import INJECTION_FLAG
from tether.mcp.config import GatewayConfig
from tether.mcp.gateway import Gateway
from tether.store import SQLiteStore

TOOLS = {"lookup": 'risk = "read"\ntenant_path = "tenant"'}


def reads_config(tmp_path: Path, state: Path, extra: str = "") -> GatewayConfig:
    servers = upstream_config(state, TOOLS).replace(
        "[servers.test.tools.lookup]",
        f"resources = true\nprompts = true\n{extra}\n[servers.test.tools.lookup]",
    )
    return write_config(tmp_path, servers)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "upstream"
    folder.mkdir()
    return folder


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{tmp_path}/gateway.db")


def test_resources_and_prompts_are_pinned_judged_and_screened(
    tmp_path: Path, state: Path, store: SQLiteStore
) -> None:
    config = reads_config(tmp_path, state)

    async def scenario() -> None:
        pinned, problems = await pin_tools(config)
        assert sorted(pinned) == ["test/lookup", "test/prompt:review", "test/template:note"]
        assert not problems
        async with connected(config, store) as (_, client):
            prompts = (await client.list_prompts()).prompts
            assert [(p.name, p.description) for p in prompts] == [("review", "Review a topic.")]
            ref = mcp_types.PromptReference(type="ref/prompt", name="review")
            done = await client.complete(ref, {"name": "topic", "value": "bu"})
            assert done.completion.values == ["budget", "bugs"]
            unpinned = mcp_types.PromptReference(type="ref/prompt", name="other")
            with pytest.raises(MCPError, match="pinned prompts"):
                await client.complete(unpinned, {"name": "topic", "value": "bu"})
            got = await client.get_prompt("review", {"topic": "the budget"})
            assert got.messages[0].content.text == "Review the budget"  # type: ignore[union-attr]
            assert (got.meta or {})["io.tether/outcome"]["status"] == "committed"

            listed = [r.uri for r in (await client.list_resources()).resources]
            assert listed == ["note://readme"]  # the poisoned one is left out
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["note://notes/{id}"]

            readme = await client.read_resource("note://readme")
            assert readme.contents[0].text == "hello"  # type: ignore[union-attr]
            note = await client.read_resource("note://notes/7")
            assert note.contents[0].text == "note 7"  # type: ignore[union-attr]
            evil = await client.read_resource("note://notes/evil")
            assert INJECTION_FLAG in (evil.meta or {})["io.tether/outcome"]["flags"]
            assert evil.contents[0].text.startswith("[tether: ")  # type: ignore[union-attr]
            huge = await client.read_resource("note://notes/huge")
            kept = huge.contents[0].text  # type: ignore[union-attr]
            assert 0 < len(kept) < 65_536 and set(kept) == {"y"}
            capped = (huge.meta or {})["io.tether/capped"]
            whole = {"contents": [{"uri": "note://notes/huge", "text": "y" * 200_000}]}
            assert capped["bytes"] == len(canonical_json(whole))
            assert capped["sha256"] == "sha256:" + sha256_hex(canonical_json(whole))
            with pytest.raises(MCPError, match="no offered resource"):
                await client.read_resource("file:///etc/passwd")
            as_tool = await client.call_tool("test__read_resource", {"uri": "note://readme"})
            assert as_tool.is_error and "no tool" in text(as_tool)

    anyio.run(scenario)
    assert witness(state) == [
        "read note://readme",
        "read note://notes/7",
        "read note://notes/evil",
        "read note://notes/huge",
    ]
    reads = [e for e in store.list_effects() if e.tool_name == "test__read_resource"]
    assert len(reads) == 4 and all(e.status.value == "committed" for e in reads)
    assert all(len(e.result_json or "") < 65_536 for e in reads)  # the huge one capped
    prompts = [e for e in store.list_effects() if e.tool_name == "test__get_prompt"]
    assert len(prompts) == 1
    kinds = audit_kinds(store)  # each read and the prompt: dispatched, then its outcome
    assert kinds.count("effect_dispatched") == 5 and kinds.count("tool_effect_resolved") == 5


def test_a_drifted_prompt_is_refused_and_reads_keep_to_their_tenants(
    tmp_path: Path, state: Path, store: SQLiteStore
) -> None:
    config = reads_config(tmp_path, state)

    async def scenario() -> None:
        await pin_tools(config)
        (state / "prompt_variant").write_text("v2")  # the server rewords its prompt
        async with connected(config, store) as (_, client):
            assert (await client.list_prompts()).prompts == []
            with pytest.raises(MCPError, match=r"changed .*description changed"):
                await client.get_prompt("review", {"topic": "x"})
            readme = await client.read_resource("note://readme")  # the rest still serves
            assert readme.contents[0].text == "hello"  # type: ignore[union-attr]

        other = tmp_path / "globex"
        other.mkdir()
        elsewhere = reads_config(other, state, 'read_tenants = ["globex"]')
        await pin_tools(elsewhere)
        async with connected(elsewhere, store) as (_, client):
            with pytest.raises(MCPError, match="acme"):  # the caller is acme's
                await client.read_resource("note://readme")

    anyio.run(scenario)
    assert witness(state) == ["read note://readme"]  # neither refused read reached it


def test_a_prompt_that_drifts_mid_session_is_withdrawn_and_the_client_told(
    tmp_path: Path, state: Path, store: SQLiteStore
) -> None:
    tools = {**TOOLS, "reword": 'risk = "read"\ntenant_scoped = false'}
    servers = upstream_config(state, tools).replace(
        "[servers.test.tools.lookup]", "prompts = true\n[servers.test.tools.lookup]"
    )
    config = write_config(tmp_path, servers)
    told = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.PromptListChangedNotification):
            told.set()

    async def scenario() -> None:
        await pin_tools(config)
        with open(os.devnull, "w") as quiet:
            async with (
                Gateway(config, store, errlog=quiet) as gateway,
                Client(gateway.server(), mode="legacy", message_handler=on_message) as client,
            ):
                assert [p.name for p in (await client.list_prompts()).prompts] == ["review"]
                await client.call_tool("reword", {})  # the server changes it and says so
                with anyio.fail_after(10):
                    await told.wait()
                assert (await client.list_prompts()).prompts == []
                with pytest.raises(MCPError, match="changed"):
                    await client.get_prompt("review", {"topic": "x"})

    anyio.run(scenario)


def test_a_subscribed_client_is_told_of_updates_and_the_server_asked_once(
    tmp_path: Path, state: Path, store: SQLiteStore
) -> None:
    tools = {**TOOLS, "touch": 'risk = "read"\ntenant_scoped = false'}
    servers = upstream_config(state, tools).replace(
        "[servers.test.tools.lookup]", "resources = true\n[servers.test.tools.lookup]"
    )
    config = write_config(tmp_path, servers)
    updated: list[str] = []
    told = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            told.set()

    async def scenario() -> None:
        await pin_tools(config)
        with open(os.devnull, "w") as quiet:
            async with (
                Gateway(config, store, errlog=quiet) as gateway,
                Client(gateway.server(), mode="legacy", message_handler=on_message) as client,
            ):
                with pytest.warns(MCPDeprecationWarning):  # handshake-era feature
                    await client.subscribe_resource("note://readme")
                await client.call_tool("touch", {})
                with anyio.fail_after(10):
                    await told.wait()
                with pytest.warns(MCPDeprecationWarning):
                    await client.unsubscribe_resource("note://readme")
                with (
                    pytest.warns(MCPDeprecationWarning),
                    pytest.raises(MCPError, match="no offered resource"),
                ):
                    await client.subscribe_resource("file:///etc/passwd")

    anyio.run(scenario)
    assert updated == ["note://readme"]
    assert witness(state) == ["subscribe note://readme", "unsubscribe note://readme"]
