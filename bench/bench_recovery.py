"""Benchmark: recovering 1,000 crashed runs, each left with one ``dispatched`` effect.

    .venv/bin/python bench/bench_recovery.py [--runs 1000] [--json]

Each run is crashed for real in setup: its tool call is interrupted after the ``dispatched``
row committed (a KeyboardInterrupt escapes the gate, as a kill would leave it), so the run is
``running`` with no live worker. Half the tools had acted before the interruption, half had
not; ``reconcile`` tells which. The timed part is one ``recover`` over the whole store:
claim each run, reconcile its effect, replay or re-dispatch the call, let the model finish,
and record the final status — on SQLite with synchronous=FULL and NORMAL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from tether import Gate, Policy, Principal, Registry, Risk, Verdict
from tether.models import ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.runs.recovery import recover
from tether.runs.runner import Runner
from tether.store.sqlite import SQLiteStore


def build(path: Path, mode: str) -> tuple[Gate, dict[str, Any], dict[str, bool]]:
    applied: dict[str, Any] = {}
    crash_next: dict[str, bool] = {"on": True}
    registry = Registry()

    def reconcile(operation_key: str) -> Any:
        return applied.get(operation_key)

    @registry.tool(risk=Risk.WRITE, reconcile=reconcile)
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        if crash_next["on"]:
            if int(ticket_id.split("-")[1]) % 2:
                applied[operation_key] = {"ticket_id": ticket_id, "status": "closed"}
            raise KeyboardInterrupt  # dies between dispatch and outcome
        result = {"ticket_id": ticket_id, "status": "closed"}
        applied[operation_key] = result
        return result

    store = SQLiteStore(f"sqlite:///{path}?synchronous={mode}")
    policy = Policy(version="p", approvers=frozenset({"r"}), tiers={Risk.WRITE: Verdict.ALLOW})
    return Gate(registry, policy, store), applied, crash_next


def model() -> ScriptedModel:
    return ScriptedModel(
        [[ModelToolCall(id="c1", name="close_ticket", arguments={"ticket_id": "T-0"})], "done"],
        record_calls=False,
    )


def bench(tmp: Path, mode: str, runs: int) -> dict[str, Any]:
    gate, _applied, crash_next = build(tmp / f"recovery-{mode}.db", mode)
    principal = Principal(subject="agent", tenant="acme")
    for i in range(runs):
        script = ScriptedModel(
            [
                [ModelToolCall(id="c1", name="close_ticket", arguments={"ticket_id": f"T-{i}"})],
                "done",
            ],
            record_calls=False,
        )
        with contextlib.suppress(KeyboardInterrupt):
            Runner(gate, script).start("close it", principal, run_id=f"run-{i}")
    crash_next["on"] = False
    before = gate.store.list_effects()
    assert sum(e.status.value == "dispatched" for e in before) == runs
    started = time.perf_counter()
    report = recover(gate.store, lambda: Runner(gate, model()))
    seconds = time.perf_counter() - started
    statuses = set(report.recovered.values())
    assert statuses == {"completed"}, statuses
    assert len(report.recovered) == runs
    assert gate.store.verify_audit().intact
    gate.store.close()
    return {
        "mode": mode,
        "runs": runs,
        "seconds": round(seconds, 3),
        "runs_per_second": round(runs / seconds, 1),
        "reconciled": dict(report.reconciled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        results = [bench(Path(d), m, args.runs) for m in ("FULL", "NORMAL")]
    out = {
        "machine": f"{platform.platform()}, {platform.machine()}",
        "sqlite": sqlite3.sqlite_version,
        "results": results,
    }
    if not args.json:
        for r in results:
            print(
                f"{r['mode']:<7} recovered {r['runs']} crashed runs in {r['seconds']} s: "
                f"{r['runs_per_second']} runs/s (reconciled {r['reconciled']})"
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
