"""Benchmark: what a call costs by the size and kind of its tool's result.

    .venv/bin/python bench/bench_results.py [--calls 300] [--sizes 100,1000,10000,60000]
                                            [--json]

A result is screened before the model reads it (its size capped, secrets redacted, text that
reads like instructions marked: ``tether.core.screening``), and encoded, digested and stored
once. Each of those walks every byte, so a tool that returns a document pays for it per
kilobyte, where the issue-26 figures (a 40-byte result) do not look. Here the approved
``close_ticket`` call of ``bench_memory.py`` (memory store: tether's Python alone) returns
``{"ticket_id", "body"}`` with a body of each size in three kinds of text: ASCII with none of
the screening patterns' anchor words, English prose that holds several of them ("please",
"note", "system", "user", "must", "before"), and German prose (non-ASCII, so normalised and
transliterated before it is matched). Prints the median per call and the cost per kilobyte
above the smallest size. To compare two versions, run it with ``PYTHONPATH`` at each's
``src`` one after the other (the figures are absolute: compare them within one sitting).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gate
from tether import Gate, Policy, Principal, Registry, Risk
from tether.store.memory import MemoryStore

UNITS = {
    "ascii": "The quarterly report lists revenue by region. ",
    "prose": "Please note: the system user must sign in before the report is shared. ",
    "german": "Der Bericht für Zürich enthält die Umsätze je Region und Quartal. ",
}


def text_of(kind: str, size: int) -> str:
    unit = UNITS[kind]
    return (unit * (size // len(unit) + 1))[:size]


def median_call_us(kind: str, size: int, n: int) -> float:
    body = text_of(kind, size)
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "body": body}

    policy = Policy(version="policy-3", approvers=frozenset({"reviewer-5"}))
    gate = Gate(registry, policy, MemoryStore())
    principal = Principal(subject="user-42", tenant="acme", scopes=frozenset({"ticket:write"}))
    run_id = gate.start_run(principal, run_id="run-bench")
    batch = bench_gate.calls(n)
    bench_gate.grant_all(gate, run_id, batch)
    times = []
    for call in batch:
        t = time.perf_counter_ns()
        gate.call(run_id, call)
        times.append((time.perf_counter_ns() - t) / 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sizes", default="100,1000,10000,60000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows: list[dict[str, Any]] = []
    for kind in UNITS:
        base = None
        for size in sizes:
            us = median_call_us(kind, size, args.calls)
            base = us if base is None else base
            per_kb = (us - base) / ((size - sizes[0]) / 1000) if size > sizes[0] else None
            rows.append(
                {
                    "kind": kind,
                    "bytes": size,
                    "median_us": round(us, 1),
                    "us_per_kb": None if per_kb is None else round(per_kb, 1),
                }
            )
    if args.json:
        print(json.dumps({"calls": args.calls, "results": rows}))
        return
    for r in rows:
        slope = "" if r["us_per_kb"] is None else f"  {r['us_per_kb']:>8.1f} µs per KB above"
        print(f"{r['kind']:<7} {r['bytes']:>6} B  median {r['median_us']:>9.1f} µs{slope}")


if __name__ == "__main__":
    main()
