"""Benchmark: what the MCP gateway adds to a ``tools/call`` — the SDK's client calling the
same upstream server directly and through the gateway, in the same run, interleaved.

    .venv/bin/python bench/bench_mcp.py [--calls 300] [--writes 100] [--rounds 5]
                                        [--synchronous FULL|NORMAL|both] [--json]

The upstream is the notes server of ``examples/mcp_gateway.py`` (the SDK's ``MCPServer``
over stdio, a subprocess). Three clients, each the SDK's ``Client``:

- **direct**: connected to the upstream itself (the floor: one stdio hop);
- **in-process gateway**: connected to ``Gateway.server()`` in this process, the gateway
  connected to its own upstream subprocess (what ``GovernedSession`` costs);
- **``tether mcp serve``**: the gateway as a deployed client meets it, a subprocess over
  stdio in front of its upstream (one more process and JSON-RPC hop than direct);
- **plain proxy**: ``bench/plain_proxy.py``, a pass-through proxy on the same SDK, a
  subprocess over stdio in front of the same upstream: the hop ``tether mcp serve`` pays for
  besides the gate (reads only: it has no approvals).

Timed: each ``await client.call_tool(...)``, from the call to its result; every client lists
the tools once first, as an agent does. A read is
``read_note`` (risk read: allowed). An approved write is ``write_note`` (risk write): each
one is asked (untimed), approved through ``decide_approval`` with an approver's identity
(untimed), then called again with the same arguments — that call, which the gate admits with
its grant and runs, is timed; its direct counterpart is one ``write_note``. Rounds alternate
which client goes first. tether's store is a ``SQLiteStore`` (WAL) in a temporary directory
at ``synchronous=FULL`` (its default) and ``NORMAL``. Reported: medians and p99 per client
and kind, the added median against direct, and the ratio; and, to show where the gateway's
own time goes, ``gate.call`` alone in the loop's thread, in a worker thread, and in a worker
thread calling back into the loop (the path the gateway took before ``Gate.acall``), and
``await gate.acall`` of an async tool on the loop (the path it takes now) (``gate_floors``).
Target (issue 11): added median ≤ 1 ms on SQLite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
from mcp import Client, StdioServerParameters

from tether.core.principal import Identity
from tether.gate.desk import decide_approval
from tether.identity import add_identity, authenticate
from tether.mcp.config import load_config
from tether.mcp.gateway import Gateway
from tether.mcp.pins import write_lock
from tether.mcp.review import pin, review, survey
from tether.store.sqlite import SQLiteStore

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mcp_gateway.py"
CONFIG = """
principal = {{ subject = "bench-agent", tenant = "acme" }}
policy = {{ version = "bench-1", approvers = ["alice"] }}
[servers.notes]
command = "{python}"
args = ["{script}", "upstream", "{notes}"]
[servers.notes.tools.read_note]
risk = "read"
[servers.notes.tools.write_note]
risk = "write"
"""
_APPROVERS: dict[int, Identity] = {}  # per store: alice, with a credential of her own


def approver(store: SQLiteStore) -> Identity:
    """alice as an approver with a credential (decisions need one), registered once."""
    found = _APPROVERS.get(id(store))
    if found is None:
        _, token = add_identity(store, "alice", "approver", now=time.time(), tenants=["acme"])
        found = _APPROVERS[id(store)] = authenticate(store, token, "approver")
    return found


Call = Callable[[str, dict[str, Any]], Awaitable[Any]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(call: Call, name: str, args: dict[str, Any]) -> float:
    started = time.perf_counter_ns()
    result = await call(name, args)
    elapsed = (time.perf_counter_ns() - started) / 1000
    if getattr(result, "is_error", False):
        raise RuntimeError(f"{name} failed: {result.content}")
    return elapsed


async def approved_write(call: Call, store: SQLiteStore, i: int) -> float:
    args = {"name": f"n{i % 7}", "text": f"text {i}"}
    asked = await call("write_note", args)
    approval = (asked.meta or {})["io.tether/approval"]["approval_id"]
    decide_approval(store, approval, approver(store), approve=True, now=time.time())
    return await timed(call, "write_note", args)


async def measure(tmp: Path, mode: str, calls: int, writes: int, rounds: int) -> dict[str, Any]:
    notes = tmp / f"notes-{mode}"
    notes.mkdir()
    (notes / "todo").write_text("ship it")
    path = tmp / f"gw-{mode}.toml"
    fill = {"python": sys.executable, "script": EXAMPLE, "notes": notes}
    path.write_text(CONFIG.format(**fill))
    config = load_config(path)
    found = await survey(config, errlog=open(os.devnull, "w"))  # noqa: SIM115
    rows = review(config, config_lock := _empty(), {s: x for s, (_, x) in found.items()})
    write_lock(config.lock_path, pin(rows, config_lock, accept=set(), now=time.time())[0])
    url = f"sqlite:///{tmp}/tether-{mode}.db?synchronous={mode}"
    store = SQLiteStore(url)
    upstream = StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLE), "upstream", str(notes)]
    )
    served = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tether", "mcp", "serve", "--config", str(path), "--db", url],
    )
    proxy = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(__file__).with_name("plain_proxy.py")), sys.executable, *upstream.args],
    )
    times: dict[str, dict[str, list[float]]] = {
        k: {"read": [], "write": []} for k in ("direct", "inprocess", "served", "proxy")
    }
    quiet = open(os.devnull, "w")  # noqa: SIM115
    async with (
        Client(upstream, mode="legacy") as direct,
        Gateway(config, store, errlog=quiet) as gateway,
        Client(gateway.server()) as inprocess,
        Client(served) as served_client,
        Client(proxy) as proxy_client,
    ):
        for client in (direct, inprocess, served_client, proxy_client):
            # As an agent does: list first (the SDK's client lists again on every call of a
            # tool it has not seen listed, to check results against its output schema).
            await client.list_tools()
        clients: dict[str, Call] = {
            "direct": direct.call_tool,
            "inprocess": inprocess.call_tool,
            "served": served_client.call_tool,
            "proxy": proxy_client.call_tool,
        }
        for name, call in clients.items():  # warm-up, untimed
            for _ in range(10):
                await call("read_note", {"name": "todo"})
            if name not in ("direct", "proxy"):
                await approved_write(call, store, 0)
        order = list(clients)
        for r in range(rounds):
            order = order[1:] + order[:1]  # rotate who goes first
            for name in order:
                call = clients[name]
                for _ in range(calls // rounds):
                    times[name]["read"].append(await timed(call, "read_note", {"name": "todo"}))
                for i in range(writes // rounds if name != "proxy" else 0):
                    if name == "direct":
                        args = {"name": f"n{i % 7}", "text": f"text {i}"}
                        times[name]["write"].append(await timed(call, "write_note", args))
                    else:
                        times[name]["write"].append(await approved_write(call, store, r * 1000 + i))
    quiet.close()
    store.close()
    out: dict[str, Any] = {"synchronous": mode}
    for kind in ("read", "write"):
        floor = statistics.median(times["direct"][kind])
        out[kind] = {
            "direct_median_us": round(floor, 1),
            "direct_p99_us": round(percentile(times["direct"][kind], 0.99), 1),
        }
        for name in ("inprocess", "served", "proxy"):
            if not times[name][kind]:
                continue
            med = statistics.median(times[name][kind])
            out[kind][name] = {
                "median_us": round(med, 1),
                "p99_us": round(percentile(times[name][kind], 0.99), 1),
                "added_us": round(med - floor, 1),
                "ratio": round(med / floor, 2),
                "target_met": med - floor <= 1000,
            }
    return out


async def gate_floors(tmp: Path, mode: str, calls: int) -> dict[str, float]:
    """Where the gateway's own time goes: ``gate.call`` of a read whose tool returns at
    once — in the event loop's thread, in a worker thread (as the gateway runs it), and in
    a worker thread whose tool calls back into the loop through a blocking portal (as the
    gateway's handler reached the upstream before ``Gate.acall``), and ``await gate.acall``
    of an async tool on the loop (as the gateway calls it now)."""
    from tether import Gate, Policy, Principal, Registry, Risk
    from tether.gate.pipeline import ToolCall

    async with anyio.from_thread.BlockingPortal() as portal:

        async def answer() -> str:
            return "x"

        registry = Registry()

        @registry.tool(risk=Risk.READ, tenant_scoped=False)
        def direct(name: str) -> str:
            return "x"

        @registry.tool(risk=Risk.READ, tenant_scoped=False)
        def portalled(name: str) -> str:
            return portal.call(answer)

        @registry.tool(risk=Risk.READ, tenant_scoped=False)
        async def awaited(name: str) -> str:
            return await answer()

        store = SQLiteStore(f"sqlite:///{tmp}/floor-{mode}.db?synchronous={mode}")
        gate = Gate(registry, Policy(version="floor-1"), store)
        run = gate.start_run(Principal(subject="bench", tenant="acme"))
        count = iter(range(10**9))

        def call(tool: str) -> None:
            gate.call(run, ToolCall(call_id=f"c{next(count)}", tool=tool, arguments={"name": "n"}))

        async def acall(tool: str) -> None:
            call = ToolCall(call_id=f"c{next(count)}", tool=tool, arguments={"name": "n"})
            await gate.acall(run, call)

        out: dict[str, list[float]] = {
            "loop_thread": [],
            "worker": [],
            "worker_portal": [],
            "loop_acall": [],
        }
        for _ in range(calls):
            started = time.perf_counter_ns()
            call("direct")
            out["loop_thread"].append((time.perf_counter_ns() - started) / 1000)
            started = time.perf_counter_ns()
            await anyio.to_thread.run_sync(call, "direct")
            out["worker"].append((time.perf_counter_ns() - started) / 1000)
            started = time.perf_counter_ns()
            await anyio.to_thread.run_sync(call, "portalled")
            out["worker_portal"].append((time.perf_counter_ns() - started) / 1000)
            started = time.perf_counter_ns()
            await acall("awaited")
            out["loop_acall"].append((time.perf_counter_ns() - started) / 1000)
        store.close()
    return {k: round(statistics.median(v), 1) for k, v in out.items()}


def _empty() -> Any:
    from tether.mcp.pins import Lock

    return Lock({})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="reads per client")
    parser.add_argument("--writes", type=int, default=100, help="approved writes per client")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--synchronous", choices=("FULL", "NORMAL", "BOTH"), default="BOTH", type=str.upper
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modes = ("FULL", "NORMAL") if args.synchronous == "BOTH" else (args.synchronous,)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            result = anyio.run(measure, Path(tmp), mode, args.calls, args.writes, args.rounds)
            result["gate_floor_us"] = anyio.run(gate_floors, Path(tmp), mode, args.calls)
            results.append(result)
    if args.json:
        print(json.dumps({"python": platform.python_version(), "results": results}))
        return
    for r in results:
        for kind in ("read", "write"):
            d = r[kind]
            floor = f"{d['direct_median_us']} µs (p99 {d['direct_p99_us']})"
            print(f"{kind:<5} {r['synchronous']:<6} direct {floor}")
            for name in ("inprocess", "served", "proxy"):
                if name not in d:
                    continue
                g = d[name]
                ok = "met" if g["target_met"] else "missed"
                print(
                    f"      {name:<9} {g['median_us']} µs (p99 {g['p99_us']}), "
                    f"+{g['added_us']} µs, {g['ratio']}x: ≤ 1 ms {ok}"
                )
            if "proxy" in d:
                beyond = round(d["served"]["median_us"] - d["proxy"]["median_us"], 1)
                print(f"      tether mcp serve beyond a plain proxy hop: +{beyond} µs")
        floors = ", ".join(f"{k} {v} µs" for k, v in r["gate_floor_us"].items())
        print(f"gate.call alone, {r['synchronous']}: {floors}")


if __name__ == "__main__":
    main()
