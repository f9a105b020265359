"""Benchmark: the hot path's figures (issue 26's table) in one run, each as a ratio to its
floor measured beside it, and a profile of what remains.

    .venv/bin/python bench/bench_hotpath.py [--calls 1000] [--pg-calls 500] [--no-pg]
                                            [--profile-calls 2000] [--json]

One process, one after the other on the same machine within a minute or two: the whole call
on the memory store (tether's Python alone; an absolute median, no floor), SQLite ``NORMAL``
and ``FULL`` beside two raw commits (``bench_gate.py``'s floor, interleaved in rounds),
PostgreSQL beside its plain floor and its pipelined floor (``bench_pg.py``), and the
PostgreSQL round trips of one approved call counted from libpq's protocol trace. Then a
cProfile of approved calls on SQLite ``NORMAL``: each function's own time as a share of the
call, tether's functions and the driver's ``execute`` — where the time that is left goes.
The framework adapters are measured by ``bench_adapters.py`` (their own agents and models).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gate
import bench_memory

TARGETS = {"memory_us": 60.0, "NORMAL": 2.5, "FULL": 1.5, "postgres": 1.15}


def pg_round_trips(url: str) -> int:
    """Round trips of one approved call on PostgreSQL (its libpq trace: each turn from what
    the client sent to what the server answered)."""
    import bench_pg
    from tether.store.postgres import PostgresStore

    schema = bench_pg.new_schema()
    store = PostgresStore(bench_pg.with_schema(url, schema), max_connections=1)
    try:
        gate, run_id = bench_pg.make_gate(store, "run-trips")
        batch = bench_pg.calls(8)
        bench_pg.grant_all(gate, run_id, batch)
        bench_pg.time_gate(gate, run_id, batch[:7])  # prepared statements, warm pool
        with tempfile.NamedTemporaryFile("w+") as f:
            with store._pool.connection() as conn:
                conn.pgconn.trace(f.fileno())
            gate.call(run_id, batch[7])
            with store._pool.connection() as conn:
                conn.pgconn.untrace()
            f.seek(0)
            trips, before = 0, ""
            for line in f.read().splitlines():
                fields = line.split("\t")
                direction = fields[1] if len(fields) > 1 else ""
                trips += direction == "B" and before == "F"
                before = direction or before
        return trips
    finally:
        store.close()
        bench_pg.drop_schema(url, schema)


def profile(tmp: Path, n: int) -> list[dict[str, Any]]:
    """Own time per function over ``n`` approved calls on SQLite NORMAL, as shares."""
    gate, run_id = bench_gate.make_gate(tmp / "profile.db", "NORMAL")
    batch = bench_gate.calls(n)
    bench_gate.grant_all(gate, run_id, batch)
    profiler = cProfile.Profile()
    profiler.enable()
    for call in batch:
        gate.call(run_id, call)
    profiler.disable()
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    rows = []
    for (path, line, name), (_, calls, own, _cum, _) in raw.items():
        where = path.split("/src/")[-1] if "/tether/" in path else path.split("/")[-1]
        rows.append(
            {
                "function": f"{where}:{line}({name})",
                "share": round(own / total, 4),
                "calls_per_call": round(calls / n, 1),
            }
        )
    rows.sort(key=lambda r: -r["share"])
    return rows[:20]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--pg-calls", type=int, default=500)
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--profile-calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    out: dict[str, Any] = {"load_average_at_start": [round(x, 2) for x in load]}
    out["memory"] = bench_memory.bench_calls(args.calls)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out["sqlite"] = [bench_gate.bench_mode(tmp, m, args.calls) for m in ("NORMAL", "FULL")]
        out["profile_sqlite_normal"] = profile(tmp, args.profile_calls)
    if not args.no_pg:
        import bench_pg

        out["postgres"] = bench_pg.bench_latency(bench_pg.DEFAULT_URL, args.pg_calls, 10, 50)
        out["postgres_round_trips"] = pg_round_trips(bench_pg.DEFAULT_URL)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    rows = [("memory store, whole call (µs)", out["memory"]["median_us"], TARGETS["memory_us"])]
    for r in out["sqlite"]:
        rows.append((f"SQLite {r['mode']} ÷ floor", r["ratio"], TARGETS[r["mode"]]))
    if "postgres" in out:
        pg = out["postgres"]
        rows.append(("PostgreSQL ÷ floor", pg["ratio"], TARGETS["postgres"]))
        rows.append(
            ("PostgreSQL ÷ pipelined floor", pg["ratio_to_pipelined_floor"], TARGETS["postgres"])
        )
    out["table"] = [{"measure": m, "value": v, "goal": g, "met": v <= g} for m, v, g in rows]
    if args.json:
        print(json.dumps(out))
        return
    print(f"load average {out['load_average_at_start']} -> {out['load_average_at_end']}")
    for t in out["table"]:
        verdict = "met" if t["met"] else "missed"
        print(f"  {t['measure']:<32} {t['value']:>9}   goal <= {t['goal']:<6} {verdict}")
    if "postgres_round_trips" in out:
        print(f"  PostgreSQL round trips per approved call: {out['postgres_round_trips']}")
    print("where an approved call's time goes (SQLite NORMAL, cProfile, own time):")
    for p in out["profile_sqlite_normal"]:
        print(f"  {p['share'] * 100:5.1f} %  {p['calls_per_call']:>5} x  {p['function']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
