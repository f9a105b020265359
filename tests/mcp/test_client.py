"""The gateway as a library: ``GovernedSession`` around the SDK's own client session to the
test upstream (a subprocess). Same pipeline, no gateway process."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.mcp.helpers import UPSTREAM, approval_id, approve, text, witness
from tether.core.ledger import EffectStatus
from tether.core.principal import Principal
from tether.mcp.client import GovernedSession
from tether.policy.rules import Policy
from tether.store import SQLiteStore

TOOLS: dict[str, dict[str, Any]] = {
    "lookup": {"risk": "read", "tenant_path": "tenant"},
    "save": {"risk": "write", "tenant_path": "tenant"},
    "add": {"risk": "read", "tenant_scoped": False},
}


def test_a_wrapped_client_session_is_governed(tmp_path: Path) -> None:
    state = tmp_path / "upstream"
    state.mkdir()
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    params = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM), str(state)])
    args = {"tenant": "acme", "key": "k", "value": "v"}

    async def scenario() -> None:
        with open(os.devnull, "w") as quiet:
            async with Client(params, mode="legacy") as client:
                governed = GovernedSession(
                    client,
                    server_id="test",
                    tools=TOOLS,
                    policy=Policy(version="lib-1", approvers=frozenset({"alice"})),
                    store=store,
                    principal=Principal(subject="agent-9", tenant="acme"),
                )
                governed.gateway.errlog = quiet
                async with governed:
                    names = sorted(t.name for t in (await governed.list_tools()).tools)
                    assert names == ["lookup", "save"]  # 'add' looks poisoned: not offered
                    read = await governed.call_tool("lookup", {"tenant": "acme", "key": "k"})
                    assert text(read) == "acme:k=value"
                    approve(store, approval_id(await governed.call_tool("save", args)))
                    done = await governed.call_tool("save", args, request_id="r-1")
                    assert text(done) == "saved k"
                    retried = await governed.call_tool("save", args, request_id="r-1")
                    assert text(retried) == "saved k"
                    assert (retried.meta or {})["io.tether/outcome"]["replayed"] is True
                    # The server changes under the wrapper: a refresh finds it and blocks.
                    (state / "variant").write_text("v2")
                    await governed.refresh()
                    blocked = await governed.call_tool("save", args)
                    assert blocked.is_error and "mode added" in text(blocked)

    anyio.run(scenario)
    assert witness(state) == ["save k v"]
    [effect] = [e for e in store.list_effects() if e.tool_name == "save"]
    assert effect.status is EffectStatus.COMMITTED
