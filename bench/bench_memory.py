"""Benchmark: the whole governed call on the in-memory store — tether's own work, no SQL.

    .venv/bin/python bench/bench_memory.py [--calls 2000] [--growth 10000] [--json]

The same call as ``bench_gate.py``: an approved ``close_ticket`` write call whose approval was
requested and granted before timing starts, so the timed part is exactly ``Gate.call`` on a
call that holds a valid grant (resolve, validate, screen, decide, budget, verify the grant,
write ``dispatched`` with the grant used, the run's budget and an audit entry; call the tool;
record the outcome with its audit entry) — on a ``MemoryStore``, where every write is a dict
update, so what is measured is Python. There is no floor: the target (DESIGN §6) is an
absolute median, ≤ 40 µs.

Prints the median and p99 microseconds per call, then whether the per-call cost grows with the
number of calls already in the run: first 1,000 vs last 1,000 of one long run, and — because
this machine's speed changes by half within seconds, which moves a first/last ratio more than
any growth would — each call of the long run beside a call of a fresh run timed right after
(or before) it, so the late/fresh ratio compares calls made at the same moment.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from typing import Any

import tether
from tether import Gate, Policy, Principal, Registry, Risk, ToolCall
from tether.errors import ApprovalRequired
from tether.store.memory import MemoryStore


def make_gate() -> tuple[Gate, str]:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "status": "closed"}

    store = MemoryStore()
    gate = Gate(registry, Policy(version="policy-3", approvers=frozenset({"reviewer-5"})), store)
    principal = Principal(subject="user-42", tenant="acme", scopes=frozenset({"ticket:write"}))
    return gate, gate.start_run(principal, run_id="run-bench")


def calls(n: int) -> list[ToolCall]:
    return [
        ToolCall(call_id=f"call-{i}", tool="close_ticket", arguments={"ticket_id": f"T-{i}"})
        for i in range(n)
    ]


def grant_all(gate: Gate, run_id: str, batch: list[ToolCall]) -> None:
    for call in batch:
        try:
            gate.call(run_id, call)
        except ApprovalRequired as signal:
            gate.approve(signal.approval_id, "reviewer-5")
        else:
            raise AssertionError(f"{call.call_id} did not ask for approval")


def time_gate(gate: Gate, run_id: str, batch: list[ToolCall]) -> list[float]:
    out = []
    for call in batch:
        t = time.perf_counter_ns()
        gate.call(run_id, call)
        out.append((time.perf_counter_ns() - t) / 1000)
    return out


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def bench_calls(n: int) -> dict[str, Any]:
    gate, run_id = make_gate()
    batch = calls(n)
    grant_all(gate, run_id, batch)
    gc.collect()
    times = time_gate(gate, run_id, batch)
    assert gate.store.verify_audit().intact
    return {
        "calls": len(times),
        "median_us": round(statistics.median(times), 1),
        "p99_us": round(p99(times), 1),
    }


def bench_growth(total: int) -> dict[str, Any]:
    """The first 1,000 and last 1,000 calls of one long run; and, because this machine's speed
    jumps by half from one second to the next, each call of the long run paired with a call
    of a fresh run (a new store and run every 100 calls) timed right beside it, so that the
    late/fresh ratio is not moved by the machine getting slower or faster mid-run."""
    gate, run_id = make_gate()
    batch = calls(total)
    grant_all(gate, run_id, batch)
    gc.collect()
    long_us: list[float] = []
    fresh_us: list[float] = []
    fresh: list[tuple[Gate, str, ToolCall]] = []
    for i, call in enumerate(batch):
        if not fresh:
            ref, ref_run = make_gate()
            ref_batch = calls(100)
            grant_all(ref, ref_run, ref_batch)
            fresh = [(ref, ref_run, c) for c in reversed(ref_batch)]
        ref, ref_run, ref_call = fresh.pop()
        pair = [(gate, run_id, call, long_us), (ref, ref_run, ref_call, fresh_us)]
        for g, r, c, out in pair if i % 2 else reversed(pair):
            t = time.perf_counter_ns()
            g.call(r, c)
            out.append((time.perf_counter_ns() - t) / 1000)
    first, last = statistics.median(long_us[:1000]), statistics.median(long_us[-1000:])
    fresh_first = statistics.median(fresh_us[:1000])
    fresh_last = statistics.median(fresh_us[-1000:])
    return {
        "calls": total,
        "first_1000_median_us": round(first, 1),
        "last_1000_median_us": round(last, 1),
        "growth": round(last / first, 3),
        "fresh_beside_first_1000_median_us": round(fresh_first, 1),
        "fresh_beside_last_1000_median_us": round(fresh_last, 1),
        "late_vs_fresh": round(last / fresh_last, 3),
        "early_vs_fresh": round(first / fresh_first, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--growth", type=int, default=10_000, help="calls in the long run (0: skip; >= 2000)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "tether": tether.__file__,
        "calls": bench_calls(args.calls),
    }
    if args.growth >= 2000:
        results["growth"] = bench_growth(args.growth)
    if args.json:
        print(json.dumps(results))
        return
    print(f"{results['machine']}, Python {results['python']}, tether from {results['tether']}")
    r = results["calls"]
    ok = "met" if r["median_us"] <= 40 else "MISSED"
    print(
        f"memory store, approved write call: median {r['median_us']} µs, p99 {r['p99_us']} µs "
        f"(target median <= 40 µs: {ok})"
    )
    if "growth" in results:
        g = results["growth"]
        print(
            f"growth ({g['calls']} calls): first 1,000 median {g['first_1000_median_us']} µs, "
            f"last 1,000 {g['last_1000_median_us']} µs, ratio {g['growth']}x"
        )
        print(
            f"  paired with a fresh run timed beside each call: last 1,000 / fresh "
            f"{g['fresh_beside_last_1000_median_us']} µs = {g['late_vs_fresh']}x "
            f"(first 1,000 / fresh {g['fresh_beside_first_1000_median_us']} µs = "
            f"{g['early_vs_fresh']}x)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
