"""Benchmark: prompt injection against the tier-only policy and the data-flow (provenance)
policy, side by side, through tether's real gate — and what the provenance check costs.

    python bench/bench_dataflow.py [--calls 3000] [--json]

The suites (tests/dataflow/: mail and calendar, banking, files, web and chat, travel) run once
per policy: every benign task alone, then every task with each of its planted injections,
the scripted agent obeying the injection as soon as it reads it (the worst case). Scored by
the world afterwards: benign tasks done with no approval, approvals per benign task, and
attacker effects that happened without a human (every attack call that asked was denied).
A third run drops the session rule that reacts to screening flags, to show the guarantee
does not rest on screening; a fourth (when the cedar extra is installed) decides the same
policy in Cedar.

The cost: the same mix of allowed read calls (output indexed, identifiers and an egress URL
checked) made through a gate with each policy, each call through both one right after the
other; the added cost is the median of those paired differences, beside each policy's
median (the tier-only one is the floor), all from this run; then the same with every result
new to the run (a run of the mix otherwise reads each of its five results six times, which
the index does not learn twice). ``--json`` prints, last, one JSON line whose top-level
figures are the provenance policy's.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
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
    CEDAR,
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
REQUEST = "Read https://news.example.org/today and the invoice; then tell Bob"


def cost(calls: int, policy_text: str = PROVENANCE, *, distinct: bool = False) -> dict[str, float]:
    """Median microseconds per call for each policy, and of the paired differences: the same
    call made through both gates one right after the other (in alternating order), so both
    see the same machine within microseconds. ``distinct``: the mail, the transactions and
    the page change before every pair, so no result repeats one the run has already seen
    (otherwise a run reads each of the mix's five results six times)."""
    world.ENV.current = world.fresh()
    originals = copy.deepcopy(world.ENV.current)
    gates = {"floor": make_gate(TIER_ONLY), "flow": make_gate(policy_text)}
    runs = dict.fromkeys(gates, "")
    timings: dict[str, list[float]] = {name: [] for name in gates}
    differences: list[float] = []
    for i in range(calls + 2 * PER_RUN):  # the first two runs warm up imports and caches
        if i % PER_RUN == 0:
            for name, gate in gates.items():
                runs[name] = gate.start_run(PRINCIPAL)
                gate.record_input(runs[name], REQUEST)
        tool, args = MIX[i % len(MIX)]
        if distinct:
            _change(world.ENV.current, originals, i)
        call = ToolCall(call_id=f"c{i}", tool=tool, arguments=args)
        took: dict[str, float] = {}
        for name in ("floor", "flow") if i % 2 else ("flow", "floor"):
            started = time.perf_counter()
            gates[name].call(runs[name], call)
            took[name] = time.perf_counter() - started
        if i >= 2 * PER_RUN:
            for name, seconds in took.items():
                timings[name].append(seconds)
            differences.append(took["flow"] - took["floor"])
    floor_us = statistics.median(timings["floor"]) * 1e6
    flow_us = statistics.median(timings["flow"]) * 1e6
    return {
        "floor_per_call_us": round(floor_us, 1),
        "provenance_per_call_us": round(flow_us, 1),
        "added_cost_per_call_us": round(statistics.median(differences) * 1e6, 1),
        "ratio": round(flow_us / floor_us, 3),
        "calls_timed_per_policy": len(differences),
    }


def _change(env: world.Env, originals: world.Env, i: int) -> None:
    """New content of the same shape and size for the mix's results: a reference number in
    each email body, transaction memo and the page."""
    for email, was in zip(env.emails, originals.emails, strict=True):
        email["body"] = f"{was['body']} Ref {i}."
    for row, was in zip(env.transactions, originals.transactions, strict=True):
        row["memo"] = f"{was['memo']} {i}"
    for key, page in originals.web.items():
        env.web[key] = f"{page} Updated {i}."


def indexing_4kb() -> float:
    """Median microseconds to index one 4 KB untrusted text result (a web page, a long
    email): the part of the added cost that grows with what a tool returns."""
    from tether.policy.provenance import Origin, ProvenanceIndex

    paragraph = " ".join(e["body"] for e in world.BASE.emails)
    text = (paragraph + " ") * (4096 // (len(paragraph) + 1) + 1)
    text = text[:4096]
    timings = []
    for i in range(300):
        index = ProvenanceIndex()
        started = time.perf_counter()
        index.add_output(Origin(f"c{i}", "get_webpage"), text)
        timings.append(time.perf_counter() - started)
    return round(statistics.median(timings) * 1e6, 1)


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
    changing = cost(args.calls, distinct=True)
    costs["added_cost_distinct_results_us"] = changing["added_cost_per_call_us"]
    costs["index_4kb_output_us"] = indexing_4kb()
    cedar: dict[str, Any] | None = None
    if importlib.util.find_spec("cedarpy") is not None:  # the cedar extra, not a base need
        cedar = run_suites(CEDAR).to_dict()
        cedar["added_cost_per_call_us"] = cost(args.calls // 3, CEDAR)["added_cost_per_call_us"]
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
    cedar_head = f" {'cedar':>10}" if cedar is not None else ""
    print(f"{'':32} {'tier-only':>12} {'provenance':>12} {'no screening':>13}{cedar_head}")
    for label, key in rows:
        cell = f" {cedar[key]!s:>10}" if cedar is not None else ""
        print(f"{label:32} {tier[key]!s:>12} {flow[key]!s:>12} {bare[key]!s:>13}{cell}")
    print(
        f"per call: floor (tier-only) {costs['floor_per_call_us']} us, provenance "
        f"{costs['provenance_per_call_us']} us, added {costs['added_cost_per_call_us']} us "
        f"median ({costs['calls_timed_per_policy']} calls each)"
    )
    print(
        f"per call, no result seen before in the run: added "
        f"{costs['added_cost_distinct_results_us']} us median"
    )
    print(f"indexing one 4 KB untrusted result: {costs['index_4kb_output_us']} us median")
    if cedar is not None:
        added = cedar["added_cost_per_call_us"]
        print(f"per call, the same policy decided in Cedar: added {added} us")
    else:
        print("cedar: cedarpy is not installed (the cedar extra); its column is left out")
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
                    "cedar": cedar,
                },
                separators=(",", ":"),
            )
        )


if __name__ == "__main__":
    main()
