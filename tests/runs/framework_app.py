"""A run driven call by call by its own code (as a framework adapter drives one): the gate
only, no conversation in tether's store. ``tether recover --app tests.runs.framework_app:app``
loads ``app``; ``python -m tests.runs.framework_app DB TOOL`` makes one call of TOOL in run
``fw-1`` and prints its outcome, so a test can kill it at a crash point.

The outside system is the directory $FRAMEWORK_WORLD: ``charge`` records each charge there
under its operation key (what its reconciler reads back), and every execution of either tool
appends a line to ``witness.log``, which tether never reads."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.gate.pipeline import Gate, ToolCall
from tether.models.scripted import ScriptedModel
from tether.policy.constraints import ToolRule
from tether.policy.rules import Policy
from tether.runs.app import App
from tether.store import SQLiteStore
from tether.tools.registry import Registry, Risk

WORLD_ENV = "FRAMEWORK_WORLD"
RUN_ID = "fw-1"
PRINCIPAL = Principal(subject="agent", tenant="acme")


def world() -> Path:
    return Path(os.environ[WORLD_ENV])


def witness() -> list[str]:
    log = world() / "witness.log"
    return log.read_text().splitlines() if log.exists() else []


def _witness(line: str) -> None:
    with (world() / "witness.log").open("a") as f:
        f.write(line + "\n")


def reconcile_charge(operation_key: str) -> Any:
    recorded = world() / f"{operation_key}.json"
    return json.loads(recorded.read_text()) if recorded.exists() else None


registry = Registry()


@registry.tool(risk=Risk.WRITE, reconcile=reconcile_charge)
def charge(amount: int, operation_key: str) -> dict[str, int]:
    """Charge a card; the payment service keeps each charge under its key."""
    result = {"charged": amount}
    (world() / f"{operation_key}.json").write_text(json.dumps(result))
    _witness(f"charge {operation_key}")
    return result


@registry.tool(risk=Risk.WRITE)
def notify(amount: int, operation_key: str) -> str:
    """Send a notification; the service keeps no record a reconciler could read."""
    _witness(f"notify {operation_key}")
    return f"notified {amount}"


policy = Policy(
    version="p1",
    tools={name: ToolRule(verdict=Verdict.ALLOW) for name in ("charge", "notify")},
)

# The model is never driven for a run without a conversation; recover only needs a runner.
app = App(
    registry=registry,
    policy=policy,
    model=lambda: ScriptedModel(["unused"]),
    principal=PRINCIPAL,
)


def call(db: str, tool: str) -> dict[str, Any]:
    with SQLiteStore(db) as store:
        gate = Gate(registry, policy, store)
        with store.read() as tx:
            started = tx.get_run(RUN_ID) is not None  # by the process before this one
        if not started:
            gate.start_run(PRINCIPAL, run_id=RUN_ID)
        outcome = gate.call(RUN_ID, ToolCall(call_id="c1", tool=tool, arguments={"amount": 5}))
    return {"result": outcome.result, "replayed": outcome.replayed}


if __name__ == "__main__":
    print(json.dumps(call(sys.argv[1], sys.argv[2])))
