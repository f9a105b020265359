"""Benchmark: ``Tx.call_view``, the gate's read before every call, as one SQL statement versus
the four separate reads it replaces (``get_run``, ``effect_for_call``, ``find_approval``,
``count_effects``), on a SQLite file store.

    .venv/bin/python bench/bench_call_view.py [--effects 1000] [--number 20000] [--json]

The store holds one run with ``--effects`` effects and three approvals for the call read, so
the approval subquery has a tie-break to do. Both ways are timed inside one read transaction
(what is measured is the reads, not BEGIN/ROLLBACK), alternately in rounds so that a change in
the machine's speed hits both alike; the best round of each is reported, in µs per call.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import timeit
from pathlib import Path

from tether.core.approvals import Approval, CallBinding
from tether.core.ledger import Effect, EffectStatus, operation_key
from tether.store.base import Tx
from tether.store.rows import RunRecord
from tether.store.sqlite import SQLiteStore


def fill(store: SQLiteStore, effects: int) -> None:
    run = RunRecord(
        run_id="run-1",
        state_version=1,
        status="running",
        principal_id="user-42",
        tenant_id="acme",
        policy_version="p1",
        checkpoint_json="{}",
        created_at=1.0,
        updated_at=1.0,
    )
    with store.transaction() as tx:
        tx.insert_run(run)
        for i in range(effects):
            call = f"call-{i}"
            tx.insert_effect(
                Effect(
                    operation_key=operation_key("run-1", call, "t", "1"),
                    run_id="run-1",
                    call_id=call,
                    tool_name="t",
                    tool_version="1",
                    argument_digest="sha256:00",
                    status=EffectStatus.COMMITTED,
                    created_at=float(i),
                    updated_at=float(i),
                )
            )
        binding = CallBinding(
            run_id="run-1",
            call_id="call-7",
            tool="t",
            tool_version="1",
            tool_schema_digest="sha256:00",
            arguments={"ticket_id": "T-1"},
            tenant="acme",
            actor="user-42",
        )
        for n, at in enumerate((3.0, 4.0, 4.0)):
            tx.insert_approval(
                Approval.request(f"apr-{n}", binding, policy_version="p1", now=at, ttl_s=60)
            )
        tx.append_audit("filled", at=1.0, run_id="run-1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--effects", type=int, default=1000)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(f"sqlite:///{Path(folder) / 't.db'}")
        fill(store, args.effects)
        with store.read() as tx:
            one = tx.call_view("run-1", "call-7")
            assert one == Tx.call_view(tx, "run-1", "call-7")  # the same answer both ways
            assert one.approval is not None and one.approval.approval_id == "apr-2"
            four_calls: list[float] = []
            one_statement: list[float] = []
            for _ in range(args.rounds):
                for times, read in (
                    (four_calls, lambda: Tx.call_view(tx, "run-1", "call-7")),
                    (one_statement, lambda: tx.call_view("run-1", "call-7")),
                ):
                    times.append(timeit.timeit(read, number=args.number) / args.number * 1e6)
        store.close()
    result = {
        "effects": args.effects,
        "four_calls_us": round(min(four_calls), 2),
        "one_statement_us": round(min(one_statement), 2),
        "speedup": round(min(four_calls) / min(one_statement), 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"call_view on SQLite ({args.effects} effects in the run): "
            f"four calls {result['four_calls_us']} µs, one statement "
            f"{result['one_statement_us']} µs ({result['speedup']}x)"
        )


if __name__ == "__main__":
    main()
