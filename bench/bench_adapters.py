"""Benchmark: what each framework adapter adds to a tool call — the same agent run plain (the
framework's own tool) and governed (the tool through tether's adapter and gate), in the same
process, on the same checkpointer, interleaved.

    .venv/bin/python bench/bench_adapters.py [--calls 200] [--rounds 10]
                                             [--synchronous FULL|NORMAL|both] [--profile]
                                             [--frameworks langgraph,openai-agents,pydantic-ai]
                                             [--json]

For each framework — LangGraph (a hand-built ``StateGraph`` with LangGraph's ``SqliteSaver``;
plain: ``ToolNode``, governed: ``GovernedToolNode``), the OpenAI Agents SDK (its offline
``ScriptedModel``; plain: the ``function_tool``, governed: ``govern``) and Pydantic AI
(``FunctionModel``; plain: the agent's own tool, governed: the ``Tether`` capability) — an
agent makes ``--calls`` allowed read-tier tool calls, **one call per model turn** (the model
proposes one ``read_file`` call, reads its result, proposes the next). The calls are split
into ``--rounds`` agent runs (a new thread / conversation / tether run each), plain and
governed alternating within each round and swapping which goes first, so machine noise hits
both alike; one untimed warm-up run of each comes first.

What is timed: the tool body stamps ``perf_counter_ns`` each time it runs, and a call's time
is the interval from one stamp to the next within a run — one whole turn: the tool's result
handed back, the framework's bookkeeping (LangGraph writes two checkpoints), the model turn,
and the next call dispatched (governed: ``gate.call`` judging it, writing ``dispatched`` and
the audit entry, running the tool, recording the outcome — two SQLite commits — plus what the
adapter does around it). The first call of each run has no interval before it and is not
counted. Reported per framework: the per-call median plain and governed, p99s, the difference
(the added cost) and the ratio, and whether the added median meets the target of ≤ 1 ms
(issue 10). tether's store is a ``SQLiteStore`` (WAL) in a temporary directory, at
``synchronous=FULL`` (its default: a committed ``dispatched`` row survives a power cut) and,
by default, also at ``NORMAL``; LangGraph's checkpointer is its own ``SqliteSaver`` (WAL, the
connection's default synchronous) on a file in the same directory, shared by plain and
governed. The SDK and Pydantic AI keep a run's state in memory, so neither has a checkpointer.

The added cost can be below zero: LangGraph's ``ToolNode`` starts a thread pool for each
invocation and runs the LangChain tool (argument validation, callbacks) in it, while
``GovernedToolNode`` calls the gate in the node's own thread. The CPU columns (process CPU time
per interval) are steadier than wall time on a shared machine, but miss the fsyncs.

``--profile`` also runs each framework's governed agent under cProfile (NORMAL) and prints
the functions where the most cumulative time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import platform
import pstats
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool as langchain_tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import UsageLimits

from tether.adapters.langgraph import GovernedToolNode
from tether.adapters.openai_agents import govern, register
from tether.adapters.pydantic_ai import Tether
from tether.core.principal import Principal
from tether.gate.pipeline import Gate
from tether.policy.rules import Policy
from tether.store.sqlite import SQLiteStore
from tether.tools.registry import Registry, Risk

TARGET_US = 1000.0  # issue 10: at most 1 ms added per call, median, on SQLite
PRINCIPAL = Principal(subject="agent-1", tenant="acme")
POLICY = Policy(version="bench-1")

set_tracing_disabled(True)  # the SDK would otherwise try to export traces


class Witness:
    """The tool body's clock: one stamp each time a tool really runs."""

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.cpu: list[int] = []

    def stamp(self, path: str) -> str:
        self.stamps.append(time.perf_counter_ns())
        self.cpu.append(time.process_time_ns())
        return f"contents of {path}"

    def clear(self) -> None:
        self.stamps.clear()
        self.cpu.clear()

    def intervals_us(self) -> list[float]:
        return [(b - a) / 1000 for a, b in itertools.pairwise(self.stamps)]

    def cpu_us(self) -> list[float]:
        """The process's CPU time (all threads) per interval: what waiting cannot move —
        neither other processes taking the cores nor an fsync."""
        return [(b - a) / 1000 for a, b in itertools.pairwise(self.cpu)]


def tether_registry(witness: Witness) -> Registry:
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def read_file(path: str) -> str:
        """Read a file."""
        return witness.stamp(path)

    return registry


def tether_gate(registry: Registry, path: Path, mode: str) -> Gate:
    return Gate(registry, POLICY, SQLiteStore(f"sqlite:///{path}?synchronous={mode}"))


# A run: given its number and how many calls to make, make them (the witness stamps each).
Run = Callable[[str, int], None]


@dataclass
class Variant:
    witness: Witness
    run: Run
    close: Callable[[], None]


# -- LangGraph -------------------------------------------------------------------------------
def langgraph_variant(tmp: Path, mode: str, governed: bool, saver: SqliteSaver) -> Variant:
    witness = Witness()
    gate: Gate | None = None
    if governed:
        gate = tether_gate(tether_registry(witness), tmp / f"langgraph-{mode}.db", mode)
        node: Any = GovernedToolNode(gate, PRINCIPAL)
    else:

        @langchain_tool
        def read_file(path: str) -> str:
            """Read a file."""
            return witness.stamp(path)

        node = ToolNode([read_file])

    calls_wanted: dict[str, int] = {}

    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        # Human, then (AI, Tool) per call so far: the turn number without scanning history.
        i = (len(state["messages"]) - 1) // 2
        thread = config["configurable"]["thread_id"]
        if i >= calls_wanted[thread]:
            return {"messages": [AIMessage("done")]}
        call = {
            "name": "read_file",
            "args": {"path": f"f{i}.txt"},
            "id": f"{thread}-{i}",
            "type": "tool_call",
        }
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=saver)
    kind = "governed" if governed else "plain"

    def run(name: str, n: int) -> None:
        thread = f"{kind}-{mode}-{name}"
        calls_wanted[thread] = n
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 2 * n + 10}
        out = graph.invoke({"messages": [HumanMessage("read them")]}, config)
        assert out["messages"][-1].content == "done", out["messages"][-1]

    return Variant(witness, run, gate.store.close if gate else lambda: None)


# -- OpenAI Agents SDK -----------------------------------------------------------------------
def openai_variant(tmp: Path, mode: str, governed: bool) -> Variant:
    witness = Witness()

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return witness.stamp(path)

    def agent_for(name: str, n: int) -> Agent[Any]:
        steps: list[Any] = [
            [function_call("read_file", {"path": f"f{i}.txt"}, call_id=f"{name}-{i}")]
            for i in range(n)
        ]
        model = ScriptedModel([*steps, [assistant_message("done")]])
        return Agent(name="reader", instructions="Read.", model=model, tools=[read_file])

    gate: Gate | None = None
    if governed:
        registry = Registry()
        register(registry, agent_for("setup", 0), risk={"read_file": "read"})
        gate = tether_gate(registry, tmp / f"openai-{mode}.db", mode)
    kind = "governed" if governed else "plain"

    def run(name: str, n: int) -> None:
        agent = agent_for(f"{kind}-{name}", n)
        if gate is not None:
            governed_agent = govern(
                agent, gate, principal=PRINCIPAL, conversation=f"{kind}-{mode}-{name}"
            )
            result = asyncio.run(governed_agent.run("read them", max_turns=n + 2))
        else:
            result = asyncio.run(Runner.run(agent, "read them", max_turns=n + 2))
        assert result.final_output == "done", result.final_output

    return Variant(witness, run, gate.store.close if gate else lambda: None)


# -- Pydantic AI -----------------------------------------------------------------------------
def pydantic_variant(tmp: Path, mode: str, governed: bool) -> Variant:
    witness = Witness()
    wanted = [0]

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        # Request, then (response, tool return) per call so far.
        i = len(messages) // 2
        if i >= wanted[0]:
            return pm.ModelResponse(parts=[pm.TextPart("done")])
        call = pm.ToolCallPart("read_file", {"path": f"f{i}.txt"}, tool_call_id=f"c-{i}")
        return pm.ModelResponse(parts=[call])

    gate: Gate | None = None
    if governed:
        gate = tether_gate(tether_registry(witness), tmp / f"pydantic-{mode}.db", mode)
    kind = "governed" if governed else "plain"
    limits = UsageLimits(request_limit=None)

    def run(name: str, n: int) -> None:
        wanted[0] = n
        output: list[Any] = [str, DeferredToolRequests]
        if gate is not None:
            capability = Tether(gate, PRINCIPAL, run_id=f"{kind}-{mode}-{name}")
            agent: PydanticAgent[None, Any] = PydanticAgent(
                FunctionModel(model), capabilities=[capability], output_type=output
            )
        else:
            agent = PydanticAgent(FunctionModel(model), output_type=output)

            @agent.tool_plain
            def read_file(path: str) -> str:
                """Read a file."""
                return witness.stamp(path)

        result = agent.run_sync("read them", usage_limits=limits)
        assert result.output == "done", result.output

    return Variant(witness, run, gate.store.close if gate else lambda: None)


# -- measuring -------------------------------------------------------------------------------
def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def compare(
    framework: str, mode: str, plain: Variant, governed: Variant, calls: int, rounds: int
) -> dict[str, Any]:
    per = max(2, calls // rounds)
    for v in (plain, governed):
        v.run("warmup", 5)
    plain_us: list[float] = []
    governed_us: list[float] = []
    plain_cpu: list[float] = []
    governed_cpu: list[float] = []
    for r in range(rounds):
        pair = [(plain, plain_us, plain_cpu), (governed, governed_us, governed_cpu)]
        for variant, out, cpu in pair if r % 2 == 0 else reversed(pair):
            variant.witness.clear()
            variant.run(f"r{r}", per)
            assert len(variant.witness.stamps) == per, "the tool did not run once per call"
            out.extend(variant.witness.intervals_us())
            cpu.extend(variant.witness.cpu_us())
    pm_, gm = statistics.median(plain_us), statistics.median(governed_us)
    pc, gc = statistics.median(plain_cpu), statistics.median(governed_cpu)
    added = gm - pm_
    return {
        "framework": framework,
        "synchronous": mode,
        "calls": len(governed_us),
        "plain_median_us": round(pm_, 1),
        "plain_p99_us": round(p99(plain_us), 1),
        "governed_median_us": round(gm, 1),
        "governed_p99_us": round(p99(governed_us), 1),
        "added_us": round(added, 1),
        "ratio": round(gm / pm_, 2),
        "meets_1ms": added <= TARGET_US,
        "plain_cpu_median_us": round(pc, 1),
        "governed_cpu_median_us": round(gc, 1),
        "added_cpu_us": round(gc - pc, 1),
    }


FRAMEWORKS = ("langgraph", "openai-agents", "pydantic-ai")


def variants(framework: str, tmp: Path, mode: str, saver: SqliteSaver) -> tuple[Variant, Variant]:
    if framework == "langgraph":
        return (
            langgraph_variant(tmp, mode, False, saver),
            langgraph_variant(tmp, mode, True, saver),
        )
    if framework == "openai-agents":
        return openai_variant(tmp, mode, False), openai_variant(tmp, mode, True)
    return pydantic_variant(tmp, mode, False), pydantic_variant(tmp, mode, True)


def profile(framework: str, tmp: Path, saver: SqliteSaver, calls: int, rounds: int) -> str:
    """The governed agent under cProfile, in runs the size the benchmark makes: tether's own
    functions (the adapter, the gate, the store) by cumulative time. cProfile sees only the
    thread that runs the agent: what the SDK's adapter runs in worker threads
    (``asyncio.to_thread``: ``needs_approval``, ``gate.call``) shows as the wait for it."""
    _, governed = variants(framework, tmp, "NORMAL", saver)
    governed.run("profile-warmup", 5)
    profiler = cProfile.Profile()
    profiler.enable()
    for r in range(rounds):
        governed.run(f"profile-{r}", max(2, calls // rounds))
    profiler.disable()
    governed.close()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(r"tether/|asyncio/threads|concurrent/futures", 25)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="tool calls per variant")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    # The choices as ``type`` gives them: argparse checks them after converting.
    parser.add_argument(
        "--synchronous", choices=("FULL", "NORMAL", "BOTH"), default="BOTH", type=str.upper
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated, of {', '.join(FRAMEWORKS)} (default: all)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile each governed agent")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.calls < 2 * args.rounds:
        parser.error(f"--calls must be at least twice --rounds ({2 * args.rounds})")
    modes: Sequence[str] = ("FULL", "NORMAL") if args.synchronous == "BOTH" else (args.synchronous,)
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        parser.error(
            f"unknown --frameworks {', '.join(unknown)}; choose of {', '.join(FRAMEWORKS)}"
        )
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "calls_per_turn": 1,
        "target_added_us": TARGET_US,
    }
    profiles: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        connection = sqlite3.connect(tmp / "checkpoints.db", check_same_thread=False)
        saver = SqliteSaver(connection)
        rows = []
        for mode in modes:
            for framework in frameworks:
                plain, governed = variants(framework, tmp, mode, saver)
                rows.append(compare(framework, mode, plain, governed, args.calls, args.rounds))
                governed.close()
        results["adapters"] = rows
        if args.profile:
            for framework in frameworks:
                profiles[framework] = profile(framework, tmp, saver, args.calls, args.rounds)
        connection.close()
    if args.json:
        print(json.dumps(results))
        return
    print(f"{results['machine']}, Python {results['python']}, SQLite {results['sqlite']}")
    print("one allowed read-tier call per model turn; per-call medians (µs) over each run's turns")
    for r in rows:
        verdict = "meets" if r["meets_1ms"] else "MISSES"
        print(
            f"{r['framework']:<14} {r['synchronous']:<6} plain {r['plain_median_us']} µs "
            f"(p99 {r['plain_p99_us']}) | governed {r['governed_median_us']} µs "
            f"(p99 {r['governed_p99_us']}) | added {r['added_us']} µs, ratio {r['ratio']}x "
            f"| {verdict} ≤ 1 ms ({r['calls']} calls) | CPU plain {r['plain_cpu_median_us']} µs, "
            f"governed {r['governed_cpu_median_us']} µs, added {r['added_cpu_us']} µs"
        )
    for framework, text in profiles.items():
        print(f"\n== cProfile, governed {framework} (NORMAL), {args.calls} calls ==\n{text}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
