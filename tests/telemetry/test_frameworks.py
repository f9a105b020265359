"""tether's span lands inside the framework's own trace: a LangChain agent (LangGraph under
``create_agent``, tether's middleware) and an OpenAI Agents SDK agent, both with their offline
scripted models, run under an application span; the tool's ``execute_tool`` span is its
descendant, in the same trace."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from tests.telemetry.conftest import Recorded
from tether import Gate, Policy, Principal
from tether.store import SQLiteStore

PRINCIPAL = Principal(subject="agent-1", tenant="acme", scopes=frozenset())


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        found = by_id[parent.span_id]
        names.append(found.name)
        parent = found.parent
    return names


def test_a_langgraph_agents_tool_call_nests_under_the_agents_span(
    otel: Recorded, tmp_path: Path
) -> None:
    pytest.importorskip("langgraph")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.adapters.langgraph_app import registry
    from tether.adapters.langgraph import TetherMiddleware, langchain_tools

    class FakeModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    read = {"name": "read_file", "args": {"path": "a.txt"}, "id": "call-read", "type": "tool_call"}
    turns = iter([AIMessage(content="", tool_calls=[read]), AIMessage(content="finished")])
    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        gate = Gate(registry(tmp_path), Policy(version="lg-1", approvers=frozenset({"r"})), store)
        connection = sqlite3.connect(tmp_path / "agent.db", check_same_thread=False)
        agent = create_agent(
            FakeModel(messages=turns),
            tools=langchain_tools(gate.registry),
            middleware=[TetherMiddleware(gate, PRINCIPAL)],
            checkpointer=SqliteSaver(connection),
        )
        tracer = otel.provider.get_tracer("app")
        with tracer.start_as_current_span("invoke_agent files") as root:
            done = agent.invoke(
                {"messages": [{"role": "user", "content": "read a"}]},
                {"configurable": {"thread_id": "t"}},
            )
        connection.close()
    assert done["messages"][-1].content == "finished"
    spans = otel.spans()
    tool = otel.span("execute_tool read_file")
    assert tool.context is not None and tool.context.trace_id == root.get_span_context().trace_id
    assert ancestors(tool, spans)[-1] == "invoke_agent files"
    assert (tool.attributes or {})["gen_ai.tool.call.id"] == "call-read"


def test_an_openai_agents_tool_call_nests_under_the_agents_span(
    otel: Recorded, tmp_path: Path
) -> None:
    pytest.importorskip("agents")
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.tracing import set_tracing_disabled

    from tether import Registry
    from tether.adapters.openai_agents import govern, register

    set_tracing_disabled(True)  # the SDK's own exporter would call OpenAI's servers

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    model = ScriptedModel(
        [[function_call("read_file", {"path": "a"}, call_id="r1")], [assistant_message("done")]]
    )
    agent = Agent(name="reader", model=model, tools=[read_file])
    registry = Registry()
    register(registry, agent, risk={"read_file": "read"})
    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        gate = Gate(registry, Policy(version="files-1", approvers=frozenset({"a"})), store)
        governed = govern(agent, gate, principal=PRINCIPAL, conversation="ticket-1")
        tracer = otel.provider.get_tracer("app")

        async def main() -> Any:
            with tracer.start_as_current_span("invoke_agent reader"):
                return await governed.run("read a")

        result = asyncio.run(main())
    assert result.final_output == "done"
    tool = otel.span("execute_tool read_file")
    assert ancestors(tool, otel.spans()) == ["invoke_agent reader"]
    a = dict(tool.attributes or {})
    assert a["gen_ai.tool.call.id"] == "r1" and a["tether.effect.status"] == "committed"


def test_an_openai_agents_call_that_asks_then_runs_under_the_grant(
    otel: Recorded, tmp_path: Path
) -> None:
    pytest.importorskip("agents")
    from tests.adapters.test_openai_agents import WRITE_TURN, World, interrupted, run, said

    world = World(tmp_path / "tether.db")
    tracer = otel.provider.get_tracer("app")
    try:
        governed, _ = world.open([WRITE_TURN, *said()])
        with tracer.start_as_current_span("invoke_agent writer"):
            result = interrupted(governed)  # the SDK asks tether before the call: it asks
        (approval,) = governed.pending(result)
        who, _ = world.approver()
        governed.approve(approval.approval_id, who)
        state = result.to_state()
        for item in state.get_interruptions():
            state.approve(item)
        with tracer.start_as_current_span("invoke_agent writer (resumed)"):
            run(governed.resume(state.to_string()))
    finally:
        for store in world.stores:
            store.close()
    asked, ran = otel.spans("execute_tool write_file")
    assert ancestors(asked, otel.spans()) == ["invoke_agent writer"]
    assert ancestors(ran, otel.spans()) == ["invoke_agent writer (resumed)"]
    a, r = dict(asked.attributes or {}), dict(ran.attributes or {})
    assert a["tether.verdict"] == "ask" and a["tether.approval.id"] == approval.approval_id
    assert (
        r["tether.verdict"] == "allow_after_approval" and r["tether.approval.approver"] == "alice"
    )
    assert [link.context.trace_id for link in asked.links] == [
        link.context.trace_id for link in ran.links
    ]
    assert otel.span("tether.approval write_file").attributes is not None
