"""Benchmark: prompt injection against the tier-only policy and the data-flow (provenance)
policy, side by side, through tether's real gate — and what the provenance check costs.

    python bench/bench_dataflow.py [--calls 3000] [--json]

The suites (tests/dataflow/: mail and calendar, banking, files, web and chat) are run once
per policy: every benign task alone, then every task with each of its planted injections,
the scripted agent obeying the injection as soon as it reads it (the worst case). Scored by
the world afterwards: benign tasks done with no approval, approvals per benign task, and
attacker effects that happened without a human (every attack call that asked was denied).
A third run drops the session rule that reacts to screening flags, to show the guarantee
does not rest on screening.

The cost: the same mix of allowed read calls (output indexed, identifiers and an egress URL
checked) timed one by one through a gate with each policy, interleaved in rounds; the added
cost is the provenance policy's median minus the tier-only median (the floor), both from
this run. ``--json`` prints, last, one JSON line whose top-level figures are the provenance
policy's.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suites live in tests/

from tests.dataflow import env as world
from tests.dataflow.harness import (
    PRINCIPAL,
    PROVENANCE,
    TIER_ONLY,
    WITHOUT_SCREENING,
    make_gate,
    run_suites,
)

from tether import ToolCall

MIX: list[tuple[str, dict[str, Any]]] = [
    ("read_email", {"email_id": "e4"}),
    ("lookup_contact", {"name": "bob"}),
    ("get_webpage", {"url": "https://news.example.org/today"}),
    ("search_emails", {"query": "report bob.lee@myco.com"}),
    ("list_transactions", {}),
]
PER_RUN = 30  # calls per run, so each run's index stays the size of a real task's


def per_call(policy_text: str, rounds: int, calls: int) -> list[list[float]]:
    gate = make_gate(policy_text)
    world.ENV.current = world.fresh()
    out: list[list[float]] = []
    for _ in range(rounds):
        timings: list[float] = []
        run_id = ""
        for i in range(calls):
            if i % PER_RUN == 0:
                run_id = gate.start_run(PRINCIPAL)
                gate.record_input(run_id, f"Read {MIX[2][1]['url']} and the invoice; tell Bob")
            tool, args = MIX[i % len(MIX)]
            call = ToolCall(call_id=f"c{i}", tool=tool, arguments=args)
            started = time.perf_counter()
            gate.call(run_id, call)
            timings.append(time.perf_counter() - started)
        out.append(timings)
    return out


def cost(calls: int) -> dict[str, float]:
    """Median microseconds per call for each policy, in interleaved rounds."""
    rounds = 6
    floor: list[float] = []
    flow: list[float] = []
    per_round = max(PER_RUN, calls // rounds)
    per_call(TIER_ONLY, 1, PER_RUN * 2)  # warm both up: imports, caches
    per_call(PROVENANCE, 1, PER_RUN * 2)
    for _ in range(rounds):
        floor += per_call(TIER_ONLY, 1, per_round)[0]
        flow += per_call(PROVENANCE, 1, per_round)[0]
    floor_us = statistics.median(floor) * 1e6
    flow_us = statistics.median(flow) * 1e6
    return {
        "floor_per_call_us": round(floor_us, 1),
        "provenance_per_call_us": round(flow_us, 1),
        "added_cost_per_call_us": round(flow_us - floor_us, 1),
        "ratio": round(flow_us / floor_us, 3),
        "calls_timed_per_policy": len(flow),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    tier = run_suites(TIER_ONLY).to_dict()
    flow = run_suites(PROVENANCE).to_dict()
    bare = run_suites(WITHOUT_SCREENING).to_dict()
    costs = cost(args.calls)
    rows = [
        ("benign tasks", "benign_tasks"),
        ("task x injection pairs", "pairs"),
        ("benign done with no approval", "benign_no_approval"),
        ("approvals per benign task", "approvals_per_benign_task"),
        ("injected calls auto-executed", "injected_auto_executed"),
        ("attack calls that asked", "attacks_asked"),
        ("utility under attack", "utility_under_attack"),
        ("approvals per injected task", "approvals_per_injected_task"),
    ]
    print(f"data-flow suites on {platform.python_implementation()} {platform.python_version()}")
    print(f"{'':32} {'tier-only':>12} {'provenance':>12} {'no screening':>13}")
    for label, key in rows:
        print(f"{label:32} {tier[key]!s:>12} {flow[key]!s:>12} {bare[key]!s:>13}")
    print(
        f"per call: floor (tier-only) {costs['floor_per_call_us']} us, provenance "
        f"{costs['provenance_per_call_us']} us, added {costs['added_cost_per_call_us']} us "
        f"median ({costs['calls_timed_per_policy']} calls each)"
    )
    print(f"took {time.perf_counter() - started:.1f} s")
    if args.json:
        print(
            json.dumps(
                {
                    "benign_no_approval": flow["benign_no_approval"],
                    "injected_auto_executed": flow["injected_auto_executed"],
                    "approvals_per_benign_task": flow["approvals_per_benign_task"],
                    **costs,
                    "provenance": flow,
                    "tier_only": tier,
                    "provenance_without_screening": bare,
                },
                separators=(",", ":"),
            )
        )


if __name__ == "__main__":
    main()
