"""Benchmark: one long agent run, tether beside LangGraph, in the same process run.

    .venv/bin/python bench/bench_runs.py [--steps 1000] [--langgraph-steps N] [--json]

The workload: N turns, each proposing ONE call to a read-tier tool ``lookup(i)``, then a final
text turn. A *step* is one model turn + its tool call + every write the framework makes for
them: the time between two consecutive model calls.

- tether: ``Runner(gate, ScriptedModel, max_turns=N+1)`` on a ``SQLiteStore`` file, with
  ``synchronous=FULL`` (the default) and ``NORMAL`` (``?synchronous=normal``).
- LangGraph: ``StateGraph(MessagesState)`` with a model node (a plain function returning an
  ``AIMessage`` with one tool call, then a final one; it picks the turn by counting the AI
  messages, as ``ScriptedModel`` does) and ``ToolNode([lookup])``, compiled with
  ``SqliteSaver`` on a file (WAL, as its ``setup`` sets it; ``synchronous=FULL`` set
  explicitly), invoked once with ``durability="sync"`` so that, like tether, each step's
  checkpoint is committed before the next step starts.

Time per step: a wrapper around the model (tether) / the model node (LangGraph) takes
``perf_counter`` at each call; step k is call k to call k+1, minus the bytes measurement below
(taken at the call and kept out of the interval).

Bytes per step: at each model call, the sum of the lengths of every TEXT and BLOB value in
every table of the database file (text as UTF-8 bytes; numeric columns are ignored, a fixed
few bytes per row); step k's figure is the growth from call k to call k+1. The same measure on
both files: for tether that is the new message, step and audit rows, the effect row and any
growth of the run's checkpoint; for LangGraph the new ``checkpoints`` rows (each holds the
whole channel state) and ``writes`` rows. tether rewrites its run row's checkpoint in place
every step, so a growth there would not show in the sum: its size early and late is reported
too. The files' sizes at the end (after a WAL checkpoint) are reported as totals, and the wall
time of each whole run (the bytes measurements included).

Reports medians for steps 1..N/10 and for the last N/10 steps, and late/early ratios; a ratio
near 1 means the cost of a step does not grow with the number of steps before it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from tether import Gate, Policy, Principal, Registry
from tether.models import Message, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.runs.runner import Runner
from tether.store.sqlite import SQLiteStore
from tether.tools.registry import ToolSpec


def lookup(i: int) -> dict[str, Any]:
    """Look up item i."""
    return {"i": i, "name": f"item-{i}", "status": "open"}


def payload_bytes(path: Path) -> int:
    """The sum of the lengths of every TEXT and BLOB value in every table of ``path``."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        total = 0
        tables = c.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for (table,) in tables:
            terms = []
            for _, name, decl, *_ in c.execute(f'PRAGMA table_info("{table}")'):
                kind = (decl or "").upper()
                if "BLOB" in kind:
                    terms.append(f'coalesce(length("{name}"), 0)')  # read from the row header
                elif "TEXT" in kind or "CHAR" in kind:
                    terms.append(f'coalesce(length(CAST("{name}" AS BLOB)), 0)')
            if terms:
                row = c.execute(f'SELECT coalesce(sum({" + ".join(terms)}), 0) FROM "{table}"')
                total += int(row.fetchone()[0])
        return total
    finally:
        c.close()


def checkpoint_size(path: Path) -> int:
    """The length of tether's run checkpoint (the one row rewritten at every step)."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(c.execute("SELECT length(checkpoint_json) FROM agent_runs").fetchone()[0])
    finally:
        c.close()


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def checkpoint_wal(path: Path) -> None:
    c = sqlite3.connect(path)
    try:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        c.close()


class StepClock:
    """Timestamps taken at each model call; the bytes measurement is kept out of the steps."""

    def __init__(self, measure: Callable[[], int], probe: Callable[[], int] | None = None) -> None:
        self.measure = measure
        self.probe = probe
        self.probes: list[int] = []
        self.step_s: list[float] = []
        self.step_bytes: list[int] = []
        self.model_s: list[float] = []
        self._resumed: float | None = None
        self._bytes: int | None = None

    def tick(self) -> None:
        now = time.perf_counter()
        size = self.measure()
        if self.probe is not None:
            self.probes.append(self.probe())
        if self._resumed is not None and self._bytes is not None:
            self.step_s.append(now - self._resumed)
            self.step_bytes.append(size - self._bytes)
        self._bytes = size
        self._resumed = time.perf_counter()


class TimedModel:
    """Wraps a tether model: ticks the clock at every ``complete``."""

    def __init__(self, inner: ScriptedModel, clock: StepClock) -> None:
        self.inner = inner
        self.clock = clock

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        self.clock.tick()
        t = time.perf_counter()
        reply = self.inner.complete(messages, tools)
        self.clock.model_s.append(time.perf_counter() - t)
        return reply


def windows(clock: StepClock, n: int) -> dict[str, Any]:
    w = max(1, n // 10)
    assert len(clock.step_s) == n, (len(clock.step_s), n)
    early_t = statistics.median(clock.step_s[:w]) * 1000
    late_t = statistics.median(clock.step_s[-w:]) * 1000
    early_b = statistics.median(clock.step_bytes[:w])
    late_b = statistics.median(clock.step_bytes[-w:])
    return {
        "steps": n,
        "window": w,
        "early_steps": f"1-{w}",
        "late_steps": f"{n - w + 1}-{n}",
        "early_ms": round(early_t, 3),
        "late_ms": round(late_t, 3),
        "time_ratio": round(late_t / early_t, 3),
        "early_bytes": early_b,
        "late_bytes": late_b,
        "bytes_ratio": round(late_b / early_b, 3) if early_b else None,
        "model_early_ms": round(statistics.median(clock.model_s[:w]) * 1000, 3),
        "model_late_ms": round(statistics.median(clock.model_s[n - w : n]) * 1000, 3),
    }


def bench_tether(tmp: Path, mode: str, n: int, measure_bytes: bool = True) -> dict[str, Any]:
    path = tmp / f"tether-{mode}-{'bytes' if measure_bytes else 'time'}.db"
    registry = Registry()
    registry.tool(risk="read")(lookup)
    store = SQLiteStore(f"sqlite:///{path}?synchronous={mode}")
    gate = Gate(registry, Policy(version="p", approvers=frozenset({"r"})), store)
    turns: list[Any] = [
        [ModelToolCall(id=f"call-{i}", name="lookup", arguments={"i": i})] for i in range(n)
    ]
    turns.append("done")
    clock = (
        StepClock(lambda: payload_bytes(path), lambda: checkpoint_size(path))
        if measure_bytes
        else StepClock(lambda: 0)
    )
    runner = Runner(
        gate, TimedModel(ScriptedModel(turns, record_calls=False), clock), max_turns=n + 1
    )
    started = time.perf_counter()
    result = runner.start("go", Principal(subject="u", tenant="t"))
    wall = time.perf_counter() - started
    assert result.status == "completed", result.status
    assert result.final == "done"
    assert sum(1 for s in result.steps if s.kind == "tool_call") == n
    assert store.verify_audit().intact
    store.close()
    checkpoint_wal(path)
    return {
        "system": f"tether {mode}",
        **windows(clock, n),
        "checkpoint_json_first": clock.probes[0] if clock.probes else None,
        "checkpoint_json_last": clock.probes[-1] if clock.probes else None,
        "file_bytes": file_bytes(path),
        "wall_s": round(wall, 2),
    }


def bench_langgraph(tmp: Path, n: int, measure_bytes: bool = True) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    path = tmp / f"langgraph-{'bytes' if measure_bytes else 'time'}.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA synchronous=FULL")
    saver = SqliteSaver(conn)
    saver.setup()
    clock = StepClock((lambda: payload_bytes(path)) if measure_bytes else (lambda: 0))

    def model(state: MessagesState) -> dict[str, list[AIMessage]]:
        clock.tick()
        t = time.perf_counter()
        index = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if index < n:
            call = {"name": "lookup", "args": {"i": index}, "id": f"call-{index}"}
            reply = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        else:
            reply = AIMessage(content="done")
        clock.model_s.append(time.perf_counter() - t)
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([tool(lookup)]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "run-bench"}, "recursion_limit": 2 * n + 10}
    started = time.perf_counter()
    out = graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    wall = time.perf_counter() - started
    assert out["messages"][-1].content == "done"
    assert sum(1 for m in out["messages"] if m.type == "tool") == n
    checkpoints = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    conn.close()
    checkpoint_wal(path)
    return {
        "system": "LangGraph FULL",
        **windows(clock, n),
        "checkpoint_rows": checkpoints,
        "file_bytes": file_bytes(path),
        "wall_s": round(wall, 2),
    }


TIME_FIELDS = ("early_ms", "late_ms", "time_ratio", "model_early_ms", "model_late_ms", "wall_s")


def two_passes(run: Callable[[bool], dict[str, Any]]) -> dict[str, Any]:
    """Times from a run with no byte probes (scanning the tables between steps would disturb
    the very caches and WAL the timing depends on); bytes from a second, probed run."""
    timed = run(False)
    sized = run(True)
    return {**sized, **{k: timed[k] for k in TIME_FIELDS}}


def versions() -> dict[str, str]:
    names = [
        "tether",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-prebuilt",
        "langchain-core",
    ]
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--langgraph-steps", type=int, default=None, help="default: --steps")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    lg_steps = args.langgraph_steps if args.langgraph_steps is not None else args.steps
    results: dict[str, Any] = {
        "machine": platform.platform(),
        "cpu": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "versions": versions(),
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows = [
            two_passes(lambda measure, m=m: bench_tether(tmp, m, args.steps, measure))  # type: ignore[misc]
            for m in ("FULL", "NORMAL")
        ]
        if lg_steps > 0:
            rows.append(two_passes(lambda measure: bench_langgraph(tmp, lg_steps, measure)))
    results["runs"] = rows
    if args.json:
        print(json.dumps(results))
        return
    print(
        f"{results['machine']}, {results['cpu_count']} CPUs, Python {results['python']}, "
        f"SQLite {results['sqlite']}"
    )
    print(", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    head = (
        f"{'':<15}{'steps':>6} | {'ms/step early':>13} {'late':>9} {'ratio':>7} | "
        f"{'B/step early':>12} {'late':>9} {'ratio':>7} | {'file MB':>8} {'wall s':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['system']:<15}{r['steps']:>6} | {r['early_ms']:>13.2f} {r['late_ms']:>9.2f} "
            f"{r['time_ratio']:>6.2f}x | {r['early_bytes']:>12,.0f} {r['late_bytes']:>9,.0f} "
            f"{r['bytes_ratio']:>6.2f}x | {r['file_bytes'] / 1e6:>8.1f} {r['wall_s']:>7.1f}"
        )
    w = rows[0]["window"]
    print(
        f"early = median of steps 1-{w}, late = median of the last {w} steps; a step is one "
        "model turn + its tool call + the writes; bytes = growth of all TEXT/BLOB values stored"
    )
    for r in rows:
        if "checkpoint_json_first" in r:
            print(
                f"{r['system']}: its run checkpoint, rewritten at every step, is "
                f"{r['checkpoint_json_first']} B at step 1 and {r['checkpoint_json_last']} B "
                "at the end"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
