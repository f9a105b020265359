"""Benchmark: `tether audit verify` on a SQLite store — entries per second and peak memory.

    .venv/bin/python bench/bench_verify.py [--sizes 50000,200000] [--repeat 3] [--json]

Builds SQLite stores through the store's own append path (``Tx.insert_effect``,
``Tx.update_effect``, ``Tx.append_audit``: real row digests, chain hashes and MACs), many
appends per transaction so that building is quick. Each simulated call is what the gate writes
for it: an ``effect_dispatched`` entry recording the new effect row and a
``tool_effect_resolved`` entry recording it committed, with data shaped like the gate's.

Two kinds of log, at each size:

* ``fixed-state``: the calls reuse 1,000 effect rows (each updated again and again), so the
  state stays the same size while the log grows. Peak memory here must not grow with the
  number of entries: verifying streams the log.
* ``growing-state``: every call adds an effect row (half as many rows as entries), as a real
  deployment does. Verifying keeps one (digest, entry) pair per state row to cross-check the
  tables against the log, so memory grows with the rows, not with the entries; the
  bytes per row are printed.

Each verification runs in a fresh subprocess that opens the store read-only (as the CLI does)
and reports the median wall time of ``--repeat`` runs of ``store.verify_audit()`` and the
tracemalloc peak of one more run (tracemalloc slows Python down, so it is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether.core.ledger import Effect, EffectStatus
from tether.store import open_store
from tether.store.rows import RunRecord

CALLS_PER_TX = 5_000
FIXED_ROWS = 1_000


def build(path: Path, entries: int, *, fixed_rows: int | None) -> None:
    """A store at ``path`` with ``entries`` audit entries (two per simulated call)."""
    store = open_store(f"sqlite:///{path}?synchronous=normal")
    calls = entries // 2
    now = 1_800_000_000.0
    try:
        with store.transaction() as tx:
            tx.insert_run(
                RunRecord(
                    run_id="run-bench",
                    state_version=0,
                    status="running",
                    principal_id="user-42",
                    tenant_id="acme",
                    policy_version="policy-3",
                    checkpoint_json="{}",
                    created_at=now,
                    updated_at=now,
                )
            )
            tx.append_audit("run_started", at=now, run_id="run-bench", actor="user-42")
        live: dict[str, Effect] = {}
        for start in range(0, calls, CALLS_PER_TX):
            with store.transaction() as tx:
                for i in range(start, min(calls, start + CALLS_PER_TX)):
                    now += 0.001
                    _one_call(tx, i, now, live, fixed_rows)
    finally:
        store.close()


def _one_call(tx: Any, i: int, now: float, live: dict[str, Effect], fixed: int | None) -> None:
    slot = i if fixed is None else i % fixed
    key = f"run-bench:call-{slot}:close_ticket:1"
    call_id = f"call-{slot}"
    existing = live.get(key)
    if existing is None:
        effect = Effect(
            operation_key=key,
            run_id="run-bench",
            call_id=call_id,
            tool_name="close_ticket",
            tool_version="1",
            argument_digest="sha256:" + f"{i:064x}",
            status=EffectStatus.DISPATCHED,
            attempts=1,
            created_at=now,
            updated_at=now,
        )
        tx.insert_effect(effect)
    else:
        effect = replace(
            existing, status=EffectStatus.DISPATCHED, attempts=existing.attempts + 1, updated_at=now
        )
        tx.update_effect(effect, existing.status)
    tx.append_audit(
        "effect_dispatched",
        at=now,
        run_id="run-bench",
        actor="user-42",
        data={
            "arguments": {"ticket_id": f"T-{i}"},
            "call_id": call_id,
            "cost": 0,
            "operation_key": key,
            "policy_decision": "allow",
            "tool": "close_ticket",
            "tool_version": "1",
        },
    )
    done = replace(
        effect,
        status=EffectStatus.COMMITTED,
        result_digest="sha256:" + f"{i + 7:064x}",
        updated_at=now + 0.0005,
    )
    tx.update_effect(done, EffectStatus.DISPATCHED)
    live[key] = done
    tx.append_audit(
        "tool_effect_resolved",
        at=now + 0.0005,
        run_id="run-bench",
        actor="user-42",
        data={
            "call_id": call_id,
            "effect_status": "committed",
            "event": "tool_effect_resolved",
            "external_reference": None,
            "latency_ms": 0.2,
            "operation_key": key,
            "policy_decision": "allow",
            "policy_version": "policy-3",
            "redactions": [],
            "result_digest": done.result_digest,
            "run_id": "run-bench",
            "step_id": f"step-{i}",
            "tool": "close_ticket",
            "tool_version": "1",
        },
    )


# -- measuring, in a child process so that each measurement starts from nothing --------------
CHILD = """
import json, statistics, sys, time, tracemalloc
from tether.store import open_store
url, repeat = sys.argv[1], int(sys.argv[2])
store = open_store(url, create=False, read_only=True)
times = []
for _ in range(repeat):
    t = time.perf_counter()
    report = store.verify_audit()
    times.append(time.perf_counter() - t)
    assert report.intact, report.summary()
tracemalloc.start()
store.verify_audit()
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"seconds": statistics.median(times), "entries": report.entries,
                  "rows": report.rows, "peak_bytes": peak}))
"""


def measure(path: Path, repeat: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, f"sqlite:///{path}", str(repeat)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    result: dict[str, Any] = json.loads(out.stdout)
    result["entries_per_s"] = result["entries"] / result["seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50000,200000", help="entries, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="timed verifications per store")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-verify-") as tmp:
        for shape, fixed in (("fixed-state", FIXED_ROWS), ("growing-state", None)):
            for n in sizes:
                path = Path(tmp) / f"{shape}-{n}.db"
                t = time.perf_counter()
                build(path, n, fixed_rows=fixed)
                built = time.perf_counter() - t
                r = measure(path, args.repeat)
                r.update(shape=shape, size=n, build_seconds=round(built, 1))
                results.append(r)
                if not args.json:
                    print(
                        f"{shape:>13} {r['entries']:>8} entries {r['rows']:>7} rows: "
                        f"{r['entries_per_s']:>9,.0f} entries/s (median of {args.repeat}), "
                        f"peak {r['peak_bytes'] / 1e6:7.1f} MB "
                        f"({r['peak_bytes'] / r['entries']:6.0f} B/entry, "
                        f"{r['peak_bytes'] / max(r['rows'], 1):6.0f} B/row)"
                    )
                path.unlink()
    if args.json:
        print(json.dumps({"python": platform.python_version(), "results": results}))


if __name__ == "__main__":
    main()
