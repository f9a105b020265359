"""Benchmark: how long a LangGraph agent's event loop stalls while a governed 0.5 s tool runs
under ``ainvoke`` — ``TetherMiddleware`` (``create_agent``) and ``GovernedToolNode`` (a
hand-built ``StateGraph``), against a floor measured in the same run: the same
``create_agent`` with LangGraph's own tool node and no tether.

    .venv/bin/python bench/bench_event_loop.py [--runs 15] [--json]

The tool is synchronous and blocks for 0.5 s (``time.sleep``), the worst case for a loop: run
on the loop's thread it stalls it for all of it. While the graph runs, a ticker task sleeps
5 ms at a time and records the gaps between its wake-ups; a run's stall is the longest gap.
Each variant runs ``--runs`` times, interleaved (floor, middleware, tool node, then again), each
on a fresh tether store (SQLite, WAL) in a temporary directory and LangGraph's in-memory
checkpointer. Reported: the median and worst stall per variant and the median's excess over
the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from tether import Gate, Policy, Principal, Registry, Risk
from tether.adapters.langgraph import GovernedToolNode, TetherMiddleware, langchain_tools
from tether.store import SQLiteStore

PRINCIPAL = Principal(subject="agent-1", tenant="acme")
CALL = {"name": "read_file", "args": {"path": "a.txt"}, "id": "call-1", "type": "tool_call"}
SLOW_S = 0.5


class FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def turns() -> Any:
    return iter([AIMessage(content="", tool_calls=[CALL]), AIMessage(content="done")])


def slow_registry() -> Registry:
    reg = Registry()

    @reg.tool(risk=Risk.READ)
    def read_file(path: str) -> str:
        """Read a file, slowly."""
        time.sleep(SLOW_S)
        return f"contents of {path}"

    return reg


def graph_for(variant: str, directory: Path) -> tuple[Any, SQLiteStore | None]:
    if variant == "floor":

        @tool
        def read_file(path: str) -> str:
            """Read a file, slowly."""
            time.sleep(SLOW_S)
            return f"contents of {path}"

        agent = create_agent(FakeModel(messages=turns()), tools=[read_file])
        return agent, None
    store = SQLiteStore(f"sqlite:///{directory / 'tether.db'}")
    gate = Gate(slow_registry(), Policy(version="p1"), store)
    if variant == "middleware":
        agent = create_agent(
            FakeModel(messages=turns()),
            tools=langchain_tools(gate.registry),
            middleware=[TetherMiddleware(gate, PRINCIPAL)],
            checkpointer=InMemorySaver(),
        )
        return agent, store
    model_turns = turns()
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda _: {"messages": [next(model_turns)]})
    builder.add_node("tools", GovernedToolNode(gate, PRINCIPAL))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver()), store


async def stall_of(graph: Any, thread: str) -> float:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    config: Any = {"configurable": {"thread_id": thread}}
    try:
        await graph.ainvoke({"messages": [{"role": "user", "content": "go"}]}, config)
    finally:
        done.set()
        await ticker
    return max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    variants = ("floor", "middleware", "tool node")
    stalls: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.runs):
        for variant in variants:
            with tempfile.TemporaryDirectory() as tmp:
                graph, store = graph_for(variant, Path(tmp))
                try:
                    stalls[variant].append(asyncio.run(stall_of(graph, f"t{i}")) * 1000)
                finally:
                    if store is not None:
                        store.close()
    floor = statistics.median(stalls["floor"])
    report = {
        v: {
            "median_ms": round(statistics.median(s), 1),
            "max_ms": round(max(s), 1),
            "over_floor_ms": round(statistics.median(s) - floor, 1),
        }
        for v, s in stalls.items()
    }
    if args.json:
        print(json.dumps({"runs": args.runs, "tool_s": SLOW_S, "stall": report}))
        return
    print(f"event-loop stall under ainvoke, a {SLOW_S} s tool, {args.runs} runs each")
    for v, r in report.items():
        print(
            f"  {v:<10} median {r['median_ms']:6.1f} ms   max {r['max_ms']:6.1f} ms   "
            f"median over the floor {r['over_floor_ms']:+6.1f} ms"
        )


if __name__ == "__main__":
    main()
