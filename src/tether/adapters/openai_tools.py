"""An OpenAI Agents SDK agent's function tools in tether's registry: found by walking the
agent (agents used as tools, handoffs), registered with the SDK's own schema and a risk tier
the application gives, and run from inside the gate by the SDK's own ``on_invoke_tool`` with
the arguments tether judged. ``tether.adapters.openai_agents`` is where they are governed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigurationError
from tether.tools.registry import OPERATION_KEY_PARAMETER, Manifest, Registry, Risk

if TYPE_CHECKING:
    from agents import Agent, FunctionTool
    from agents.tool_context import ToolContext

__all__ = ["ACTIVE", "Invocation", "agents_and_tools", "handler", "register"]


# -- walking an agent's tools --------------------------------------------------------------------
def agents_and_tools(root: Any) -> tuple[list[Agent[Any]], list[FunctionTool]]:
    """Every agent reachable from ``root`` (itself, agents used as tools, handoffs) and every
    function tool they have, refusing tools tether cannot put through its gate."""
    from agents import Agent, FunctionTool, Handoff

    agents: list[Agent[Any]] = []
    tools: list[FunctionTool] = []
    seen: set[int] = set()

    def visit_tool(tool: Any, owner: str) -> None:
        if not isinstance(tool, FunctionTool):
            raise ConfigurationError(
                f"{owner} has a {type(tool).__name__}, which runs outside this process, so "
                "tether cannot gate its calls; remove it or wrap what it does in a "
                "function tool"
            )
        nested = tool._agent_instance if tool._is_agent_tool else None
        if isinstance(nested, Agent):
            # The agent tool itself only starts a nested run (which the SDK pauses and
            # resumes as a whole); what it does happens in the nested agent's own tools.
            visit_agent(nested)
        else:
            tools.append(tool)

    def visit_agent(agent: Agent[Any]) -> None:
        if id(agent) in seen:
            return
        seen.add(id(agent))
        agents.append(agent)
        if agent.mcp_servers:
            raise ConfigurationError(
                f"agent {agent.name!r} has MCP servers, whose tools arrive at run time and "
                "would bypass tether; expose them as function tools instead"
            )
        for tool in agent.tools:
            visit_tool(tool, f"agent {agent.name!r}")
        for handoff in agent.handoffs:
            if isinstance(handoff, Agent):
                visit_agent(handoff)
                continue
            target = (
                handoff._agent_ref()
                if isinstance(handoff, Handoff) and handoff._agent_ref
                else None
            )
            if not isinstance(target, Agent):
                raise ConfigurationError(
                    f"agent {agent.name!r} hands off to {handoff.agent_name!r} through a "
                    "custom handoff tether cannot follow; make it with handoff(agent) so the "
                    "target agent's tools are governed too"
                )
            visit_agent(target)

    if isinstance(root, Agent):
        visit_agent(root)
    else:
        for tool in root:
            visit_tool(tool, "the tool list")
    return agents, tools


def register(
    registry: Registry,
    agent_or_tools: Agent[Any] | Iterable[Any],
    *,
    risk: Mapping[str, Risk | str],
    manifest: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Add every function tool of ``agent_or_tools`` (nested agents and handoffs included) to
    ``registry``, with the SDK's JSON schema and ``risk[name]`` (required for each: a tool's
    risk is what the policy judges, so it is never guessed). ``manifest[name]`` adds other
    ``Manifest`` fields (``required_scope``, ``cost``, ``sensitive_fields``...). Returns the
    names registered. Build the ``Gate`` after this, so it checks the policy against them."""
    _, tools = agents_and_tools(agent_or_tools)
    extra = manifest or {}
    names: list[str] = []
    for tool in tools:
        name = tool.name
        if name not in risk:
            raise ConfigurationError(
                f"give tool {name!r} a risk tier: register(..., risk={{{name!r}: 'write'}}) "
                f"(one of {', '.join(r.value for r in Risk)})"
            )
        schema = tool.params_json_schema
        if OPERATION_KEY_PARAMETER in schema.get("properties", {}):
            raise ConfigurationError(
                f"tool {name!r} takes an argument named {OPERATION_KEY_PARAMETER!r}, which "
                "tether passes itself; rename the argument"
            )
        fields = dict(extra.get(name, {}))
        for key in ("allowed_tenants", "sensitive_fields"):
            if fields.get(key) is not None:
                fields[key] = frozenset(fields[key])
        if name in registry:
            continue  # the same tool reached twice (two agents share it)
        registry.add(
            Manifest(
                name=name,
                description=tool.description,
                parameters=schema,
                risk=Risk.parse(risk[name]),
                **fields,
            ),
            handler(name),
        )
        names.append(name)
    unknown = sorted(set(risk) - {t.name for t in tools})
    if unknown:
        raise ConfigurationError(
            f"risk names {', '.join(unknown)}, which the agent has no function tool for"
        )
    return names


# -- running the SDK's tool body from inside the gate --------------------------------------------
@dataclass(frozen=True)
class Invocation:
    """One SDK tool invocation waiting in ``gate.call`` for the gate to dispatch it."""

    tool: str
    invoke: Any  # the SDK's own on_invoke_tool
    context: ToolContext[Any]
    loop: asyncio.AbstractEventLoop


# Keyed by operation key (which the adapter computes before it calls the gate): the gate may
# call a handler from its own thread (a tool with a timeout), where no context variable of
# the caller is visible.
ACTIVE: dict[str, Invocation] = {}


def handler(name: str) -> Any:
    def run_sdk_tool(operation_key: str, **arguments: Any) -> Any:
        active = ACTIVE.get(operation_key)
        if active is None or active.tool != name:
            raise RuntimeError(
                f"{name} is an OpenAI Agents SDK tool: it runs only inside an SDK run governed "
                "by tether.adapters.openai_agents.govern"
            )
        # The arguments tether judged (and a grant bound), not the text the model sent.
        coroutine = active.invoke(active.context, json.dumps(arguments))
        return asyncio.run_coroutine_threadsafe(coroutine, active.loop).result()

    run_sdk_tool.__name__ = name
    return run_sdk_tool
