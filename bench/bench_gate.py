"""Benchmark: one approved, durable write call through the gate on SQLite (WAL), beside the
floor measured in the same run — the same rows written by two raw SQLite commits.

    .venv/bin/python bench/bench_gate.py [--calls 1000] [--growth 10000] [--paired-growth N]
                                         [--json]

Prints, for synchronous=FULL and NORMAL, the median and p99 microseconds per governed call,
the floor's median, tether's own work (median minus floor) and the ratio; then whether the
per-call cost grows with the number of calls already in the run (first 1,000 vs last 1,000
of a long run; with ``--paired-growth``, also each call of a second long run timed beside a
call of a fresh run, which a change in the machine's speed mid-run cannot move). Approvals
are requested and granted before timing starts: the timed part is exactly ``Gate.call`` on a
call that holds a valid grant.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether import Gate, Policy, Principal, Registry, Risk, ToolCall
from tether.errors import ApprovalRequired
from tether.store.sqlite import MIGRATIONS, SQLiteStore, statements


def make_gate(path: Path, mode: str) -> tuple[Gate, str]:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "status": "closed"}

    store = SQLiteStore(f"sqlite:///{path}?synchronous={mode}")
    gate = Gate(registry, Policy(version="policy-3", approvers=frozenset({"reviewer-5"})), store)
    principal = Principal(subject="user-42", tenant="acme", scopes=frozenset({"ticket:write"}))
    return gate, gate.start_run(principal, run_id="run-bench")


def calls(n: int, start: int = 0) -> list[ToolCall]:
    return [
        ToolCall(call_id=f"call-{i}", tool="close_ticket", arguments={"ticket_id": f"T-{i}"})
        for i in range(start, start + n)
    ]


def grant_all(gate: Gate, run_id: str, batch: list[ToolCall]) -> None:
    for call in batch:
        try:
            gate.call(run_id, call)
        except ApprovalRequired as signal:
            gate.approve(signal.approval_id, "reviewer-5")


def time_gate(gate: Gate, run_id: str, batch: list[ToolCall]) -> list[float]:
    out = []
    for call in batch:
        t = time.perf_counter_ns()
        gate.call(run_id, call)
        out.append((time.perf_counter_ns() - t) / 1000)
    return out


def time_floor(path: Path, mode: str, n: int) -> list[float]:
    """Two raw commits per call writing the rows the gate writes: effect, approval, run and
    audit in the first; effect and audit in the second."""
    return list(floor_steps(path, mode, n))


def floor_steps(path: Path, mode: str, n: int) -> Iterator[float]:
    """``time_floor``, one call at a time: yields each call's microseconds."""
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute(f"PRAGMA synchronous={mode}")
    for statement in statements(MIGRATIONS[0]):
        c.execute(statement)
    c.execute(
        "INSERT INTO agent_runs VALUES ('r', 1, 'running', 'u', 't', 'p', ?, 0, 0)", ("x" * 200,)
    )
    body = "x" * 600
    for i in range(n):
        c.execute(
            "INSERT INTO approvals VALUES (?, 'r', ?, 'approved', 0, 0, ?)", (f"a{i}", i, body)
        )
    seq = 0
    for i in range(n):
        t = time.perf_counter_ns()
        key = f"r:call-{i}:close_ticket:1"
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            "INSERT INTO agent_effects VALUES (?, 'r', ?, 'close_ticket', '1', 'sha256:x',"
            " 'dispatched', NULL, NULL, NULL, NULL, 1, 0, 0)",
            (key, f"call-{i}"),
        )
        c.execute(
            "UPDATE approvals SET status = 'used', record_json = ? WHERE approval_id = ?",
            (body, f"a{i}"),
        )
        c.execute(
            "UPDATE agent_runs SET state_version = state_version + 1, checkpoint_json = ?"
            " WHERE run_id = 'r'",
            ("y" * 200,),
        )
        seq += 1
        c.execute(
            "INSERT INTO audit_log VALUES (?, 'effect_dispatched', 'r', 'p', 'h', ?)", (seq, body)
        )
        c.execute("COMMIT")
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            "UPDATE agent_effects SET status = 'committed', result_json = ?,"
            " result_digest = 'sha256:y' WHERE operation_key = ?",
            ('{"ok":1}', key),
        )
        seq += 1
        c.execute(
            "INSERT INTO audit_log VALUES (?, 'tool_effect_resolved', 'r', 'p', 'h', ?)",
            (seq, body),
        )
        c.execute("COMMIT")
        yield (time.perf_counter_ns() - t) / 1000
    c.close()


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def bench_mode(tmp: Path, mode: str, n: int) -> dict[str, Any]:
    gate, run_id = make_gate(tmp / f"gate-{mode}.db", mode)
    batch = calls(n)
    grant_all(gate, run_id, batch)
    # Interleave gate and floor in rounds so machine noise hits both alike.
    gate_us: list[float] = []
    floor_us: list[float] = []
    rounds = 5
    per = n // rounds
    for r in range(rounds):
        gate_us += time_gate(gate, run_id, batch[r * per : (r + 1) * per])
        floor_us += time_floor(tmp / f"floor-{mode}-{r}.db", mode, per)
    assert gate.store.verify_audit().intact
    gm, fm = statistics.median(gate_us), statistics.median(floor_us)
    return {
        "mode": mode,
        "calls": len(gate_us),
        "median_us": round(gm, 1),
        "p99_us": round(p99(gate_us), 1),
        "floor_median_us": round(fm, 1),
        "floor_p99_us": round(p99(floor_us), 1),
        "overhead_us": round(gm - fm, 1),
        "ratio": round(gm / fm, 2),
    }


def bench_growth(tmp: Path, mode: str, total: int) -> dict[str, Any]:
    """First 1,000 vs last 1,000 calls of one long run, and beside it the same ratio for the
    floor (raw commits into one file growing alike), each gate call and floor call timed in
    turn: the floor's ratio is what the file's growth and the machine's drift alone do, so
    only the gate's ratio above it is tether's."""
    gate, run_id = make_gate(tmp / f"growth-{mode}.db", mode)
    batch = calls(total)
    grant_all(gate, run_id, batch)
    floor = floor_steps(tmp / f"growth-floor-{mode}.db", mode, total)
    times: list[float] = []
    floor_times: list[float] = []
    for call in batch:
        t = time.perf_counter_ns()
        gate.call(run_id, call)
        times.append((time.perf_counter_ns() - t) / 1000)
        floor_times.append(next(floor))
    first, last = statistics.median(times[:1000]), statistics.median(times[-1000:])
    floor_first = statistics.median(floor_times[:1000])
    floor_last = statistics.median(floor_times[-1000:])
    return {
        "mode": mode,
        "calls": total,
        "first_1000_median_us": round(first, 1),
        "last_1000_median_us": round(last, 1),
        "growth": round(last / first, 3),
        "floor_first_1000_median_us": round(floor_first, 1),
        "floor_last_1000_median_us": round(floor_last, 1),
        "floor_growth": round(floor_last / floor_first, 3),
        "growth_over_floor": round((last / first) / (floor_last / floor_first), 3),
    }


def bench_growth_paired(tmp: Path, mode: str, total: int) -> dict[str, Any]:
    """Growth measured so that the machine's speed changing mid-run cannot move it: each call
    of one long run is timed beside a call of a fresh run (a new database file and run every
    100 calls, granted untimed), alternating which goes first. The ratio of the last 1,000
    calls to the fresh calls made beside them is the cost of the calls already in the run
    (and in the file)."""
    gate, run_id = make_gate(tmp / f"paired-{mode}.db", mode)
    batch = calls(total)
    grant_all(gate, run_id, batch)
    long_us: list[float] = []
    fresh_us: list[float] = []
    fresh: list[tuple[Gate, str, ToolCall]] = []
    for i, call in enumerate(batch):
        if not fresh:
            ref, ref_run = make_gate(tmp / f"fresh-{mode}-{i}.db", mode)
            ref_batch = calls(100)
            grant_all(ref, ref_run, ref_batch)
            fresh = [(ref, ref_run, c) for c in reversed(ref_batch)]
        ref, ref_run, ref_call = fresh.pop()
        pair = [(gate, run_id, call, long_us), (ref, ref_run, ref_call, fresh_us)]
        for g, r, c, out in pair if i % 2 else reversed(pair):
            t = time.perf_counter_ns()
            g.call(r, c)
            out.append((time.perf_counter_ns() - t) / 1000)
        if not fresh:
            ref.store.close()
    first, last = statistics.median(long_us[:1000]), statistics.median(long_us[-1000:])
    fresh_first = statistics.median(fresh_us[:1000])
    fresh_last = statistics.median(fresh_us[-1000:])
    return {
        "mode": mode,
        "calls": total,
        "first_1000_median_us": round(first, 1),
        "last_1000_median_us": round(last, 1),
        "fresh_beside_first_1000_median_us": round(fresh_first, 1),
        "fresh_beside_last_1000_median_us": round(fresh_last, 1),
        "early_vs_fresh": round(first / fresh_first, 3),
        "late_vs_fresh": round(last / fresh_last, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--growth", type=int, default=10_000)
    parser.add_argument(
        "--paired-growth",
        type=int,
        default=0,
        help="also measure growth over this many calls, each beside a fresh run's call",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results["calls"] = [bench_mode(tmp, m, args.calls) for m in ("FULL", "NORMAL")]
        results["growth"] = [bench_growth(tmp, "NORMAL", args.growth)]
        if args.paired_growth:
            results["growth_paired"] = [bench_growth_paired(tmp, "NORMAL", args.paired_growth)]
    if args.json:
        print(json.dumps(results))
        return
    print(f"{results['machine']}, Python {results['python']}, SQLite {results['sqlite']}")
    for r in results["calls"]:
        print(
            f"{r['mode']:<7} approved durable write call: median {r['median_us']} µs, "
            f"p99 {r['p99_us']} µs | floor (two raw commits) median {r['floor_median_us']} µs | "
            f"tether's own work {r['overhead_us']} µs | ratio {r['ratio']}x"
        )
    for g in results["growth"]:
        print(
            f"growth ({g['mode']}, {g['calls']} calls): first 1,000 median "
            f"{g['first_1000_median_us']} µs, last 1,000 {g['last_1000_median_us']} µs, "
            f"ratio {g['growth']}x; the floor beside it {g['floor_growth']}x, so "
            f"{g['growth_over_floor']}x is tether's"
        )
    for g in results.get("growth_paired", []):
        print(
            f"growth paired ({g['mode']}, {g['calls']} calls, each beside a fresh run's call): "
            f"last 1,000 {g['last_1000_median_us']} µs / fresh "
            f"{g['fresh_beside_last_1000_median_us']} µs = {g['late_vs_fresh']}x "
            f"(first 1,000 {g['first_1000_median_us']} µs / fresh "
            f"{g['fresh_beside_first_1000_median_us']} µs = {g['early_vs_fresh']}x)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
