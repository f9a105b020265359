"""A governed LangGraph app for the adapter's tests: a model node proposing tool calls, a
``GovernedToolNode``, LangGraph's SQLite checkpointer and a tether SQLite store, all in one
directory, so another process can open the same thread.

    python -m tests.adapters.langgraph_app DIR resume THREAD DECISIONS_JSON [APPROVER]
    python -m tests.adapters.langgraph_app DIR start THREAD CALLS_JSON

prints one JSON line: the witness's executions and the graph's last messages.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from tether import Gate, Policy, Principal, Registry, Risk
from tether.adapters.langgraph import GovernedToolNode
from tether.store import Store, open_store

PRINCIPAL = Principal(subject="agent-1", tenant="acme", scopes=frozenset())
POLICY = Policy(version="lg-1", approvers=frozenset({"reviewer-1"}))


def witness_lines(directory: Path) -> list[str]:
    path = directory / "witness.log"
    return path.read_text().splitlines() if path.exists() else []


def registry(directory: Path) -> Registry:
    reg = Registry()
    witness = directory / "witness.log"

    @reg.tool(risk=Risk.READ)
    def read_file(path: str) -> str:
        """Read a file."""
        with witness.open("a") as f:
            f.write(f"read_file {path}\n")
        return f"contents of {path}"

    @reg.tool(risk=Risk.WRITE)
    def delete_file(path: str, operation_key: str) -> str:
        """Delete a file."""
        with witness.open("a") as f:
            f.write(f"delete_file {path} {operation_key}\n")
        return f"deleted {path}"

    return reg


def proposing(state: MessagesState) -> dict[str, list[AnyMessage]]:
    """The model: its turn is in the first HumanMessage (JSON tool calls); once answered,
    it finishes, quoting the tool results."""
    messages = state["messages"]
    if isinstance(messages[-1], ToolMessage):
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        return {"messages": [AIMessage(content="done: " + " | ".join(results))]}
    calls = json.loads(str(messages[0].content))
    return {"messages": [AIMessage(content="", tool_calls=calls)]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


@dataclass
class App:
    directory: Path
    store: Store
    gate: Gate
    graph: CompiledStateGraph[Any, Any, Any, Any]

    def config(self, thread: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread}}


@contextmanager
def app(
    directory: Path,
    approver: Any = None,
    *,
    clock: Callable[[], float] = time.time,
    store_url: str | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> Iterator[App]:
    """The app on ``directory``'s SQLite files, or on the tether store at ``store_url`` and
    the given LangGraph checkpointer (the PostgreSQL ones)."""
    store = open_store(store_url or f"sqlite:///{directory / 'tether.db'}")
    gate = Gate(registry(directory), POLICY, store, clock=clock)
    builder = StateGraph(MessagesState)
    builder.add_node("model", proposing)
    builder.add_node("tools", GovernedToolNode(gate, PRINCIPAL, approver=approver))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    connection = (
        sqlite3.connect(directory / "checkpoints.db", check_same_thread=False)
        if checkpointer is None
        else None
    )
    saver = checkpointer if connection is None else SqliteSaver(connection)
    try:
        yield App(directory, store, gate, builder.compile(checkpointer=saver))
    finally:
        if connection is not None:
            connection.close()
        store.close()


def start_input(calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=json.dumps(list(calls)))]}


def summary(result: dict[str, Any], directory: Path) -> dict[str, Any]:
    interrupts = result.get("__interrupt__") or []
    return {
        "executions": witness_lines(directory),
        "interrupts": [i.value for i in interrupts],
        "last": str(result["messages"][-1].content) if result.get("messages") else None,
    }


def main(argv: list[str]) -> None:
    directory, action, thread, value = Path(argv[0]), argv[1], argv[2], json.loads(argv[3])
    approver = argv[4] if len(argv) > 4 else None
    with app(directory, approver) as a:
        if action == "start":
            result = a.graph.invoke(start_input(value), a.config(thread))
        else:
            result = a.graph.invoke(Command(resume=value), a.config(thread))
        print(json.dumps(summary(result, directory)))


if __name__ == "__main__":
    main(sys.argv[1:])
