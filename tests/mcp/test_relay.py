"""What an upstream sends back during a call reaches the client that made it, through the
gateway (the official SDK client, in-process): progress on the client's token, a log line,
a sampling request answered by the client's model, an elicitation answered by its user — and the
call's outcome is still the gate's record."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp import Client

from tests.mcp.helpers import pin_tools, text, upstream_config, write_config
from tether.mcp.gateway import Gateway
from tether.store import SQLiteStore

TOOLS = {
    "ask_model": 'risk = "read"\ntenant_scoped = false',
    "ask_user": 'risk = "read"\ntenant_scoped = false',
    "steps": 'risk = "read"\ntenant_scoped = false',
}


def test_progress_sampling_and_elicitation_are_relayed_to_the_calling_client(
    tmp_path: Path,
) -> None:
    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state, TOOLS))
    store = SQLiteStore(f"sqlite:///{tmp_path}/gateway.db")
    asked: list[str] = []
    seen_progress: list[tuple[float, float | None, str | None]] = []

    async def sampling(context: Any, params: Any) -> Any:
        asked.append(params.messages[0].content.text)
        return mcp_types.CreateMessageResult.model_validate(
            {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
        )

    async def elicitation(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return mcp_types.ElicitResult.model_validate(
            {"action": "accept", "content": {"name": "Ann"}}
        )

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen_progress.append((progress, total, message))

    logged: list[Any] = []

    async def on_log(params: Any) -> None:
        logged.append((params.level, params.data, params.logger))

    async def scenario() -> None:
        pinned, _ = await pin_tools(config)
        assert sorted(pinned) == sorted(f"test/{t}" for t in TOOLS)
        with open(os.devnull, "w") as quiet:
            async with (
                Gateway(config, store, errlog=quiet) as gateway,
                Client(
                    gateway.server(),
                    mode="legacy",  # a session: the back-channel server requests need
                    raise_exceptions=True,
                    sampling_callback=sampling,
                    elicitation_callback=elicitation,
                    logging_callback=on_log,
                ) as client,
            ):
                model = await client.call_tool("ask_model", {})
                assert text(model) == "model said: hi", text(model)
                user = await client.call_tool("ask_user", {})
                assert text(user) == "user accept: Ann", text(user)
                steps = await client.call_tool("steps", {}, progress_callback=on_progress)
                assert text(steps) == "three steps", text(steps)

    anyio.run(scenario)
    assert asked == ["Say hi", "Your name?"]
    assert logged == [("info", {"step": "starting"}, "steps")]
    assert seen_progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    effects = {e.tool_name: e.status.value for e in store.list_effects()}
    assert effects == {"ask_model": "committed", "ask_user": "committed", "steps": "committed"}


def test_over_stdio_a_served_gateway_relays_sampling_to_its_client(tmp_path: Path) -> None:
    """The same through `tether mcp serve` as a subprocess, the client over stdio."""
    from mcp import StdioServerParameters

    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state, TOOLS))
    anyio.run(pin_tools, config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_DB"] = f"sqlite:///{tmp_path}/gateway.db"
    served = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tether", "mcp", "serve", "--config", str(config.path)],
        env=env,
    )

    async def sampling(context: Any, params: Any) -> Any:
        return mcp_types.CreateMessageResult.model_validate(
            {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
        )

    async def scenario() -> str:
        async with Client(served, mode="legacy", sampling_callback=sampling) as client:
            return text(await client.call_tool("ask_model", {}))

    assert anyio.run(scenario) == "model said: hello"
