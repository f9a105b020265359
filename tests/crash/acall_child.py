"""A process that calls one tool through ``Gate.acall`` (an ``async def`` tool on the
process's event loop), for tests/crash/test_acall.py to kill at a crash point and recover.

    python -m tests.crash.acall_child DIR start|call|recover

``DIR`` holds tether's SQLite store and the service's own witness file (every execution of
the tool, by operation key). ``recover`` reconciles the run's unsettled effects through the
tool's ``reconcile`` and sends the call again; each step prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.constraints import ToolRule
from tether.policy.rules import Policy
from tether.runs.reconcile import reconcile_run
from tether.store import SQLiteStore
from tether.tools.registry import Registry, Risk

RUN = "run-acall-crash"
CALL = ToolCall(call_id="c1", tool="close_ticket", arguments={"ticket": "T-1"})


def witness(d: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(d / "service.db", isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (operation_key TEXT, ticket TEXT)")
    return conn


def gate_in(d: Path) -> Gate:
    registry = Registry()

    def reconcile(operation_key: str) -> dict[str, str] | None:
        conn = witness(d)
        row = conn.execute(
            "SELECT ticket FROM calls WHERE operation_key = ?", (operation_key,)
        ).fetchone()
        conn.close()
        return None if row is None else {"closed": row[0]}

    @registry.tool(risk=Risk.WRITE, tenant_scoped=False, reconcile=reconcile)
    async def close_ticket(ticket: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        await asyncio.sleep(0)
        conn = witness(d)
        conn.execute("INSERT INTO calls VALUES (?, ?)", (operation_key, ticket))
        conn.close()
        return {"closed": ticket}

    policy = Policy(version="p-1", tools={"close_ticket": ToolRule(verdict=Verdict.ALLOW)})
    return Gate(registry, policy, SQLiteStore(f"sqlite:///{d}/tether.db"))


def main() -> None:
    d, step = Path(sys.argv[1]), sys.argv[2]
    gate = gate_in(d)
    out: dict[str, Any] = {"step": step}
    if step == "start":
        gate.start_run(Principal(subject="agent-1", tenant="acme"), run_id=RUN)
    else:
        if step == "recover":
            out["reconciled"] = [r.settlement.value for r in reconcile_run(gate, RUN)]
        outcome = asyncio.run(gate.acall(RUN, CALL))
        out.update(status=outcome.status.value, result=outcome.result, replayed=outcome.replayed)
    gate.store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
