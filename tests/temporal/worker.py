"""A Temporal worker process for the tests: the governed and the plain workflows, tether's
activity over a tether store, and a plain activity, over one "world" (a SQLite file outside
tether counting every payment that happened).

    python -m tests.temporal.worker ADDRESS TASK_QUEUE STORE_URL WORLD_PATH

Environment: ``KILL_AFTER_EFFECT=1`` SIGKILLs this process right after its first payment
(the effect happened; nothing reported it); ``SLOW_RECONCILE=S`` makes the reconciler take
S seconds (so another worker races it); ``MAX_ACTIVITIES=N`` bounds the activities it runs at once;
``APPROVAL_TTL=S`` sets the policy's approval expiry; ``PRINCIPAL_PER_WORKFLOW=1`` names the
principal from the workflow's type.
Prints ``ready`` once polling.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from tether import App, Gate, Policy, Principal, Registry, Risk
from tether.core.verdicts import Verdict
from tether.policy.constraints import ToolRule
from tether.store import open_store

PRINCIPAL = Principal(subject="agent-1", tenant="acme", scopes=frozenset())
APPROVER = "reviewer-1"


def policy(ttl_s: float = 3600.0) -> Policy:
    return Policy(
        version="temporal-1",
        approvers=frozenset({APPROVER}),
        tools={
            "pay": ToolRule(verdict=Verdict.ALLOW),
            "transfer": ToolRule(verdict=Verdict.ALLOW),
            "drop_ledger": ToolRule(verdict=Verdict.DENY),
        },
        approval_ttl_s=ttl_s,
    )


def world(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS payments "
        "(seq INTEGER PRIMARY KEY, key TEXT, recipient TEXT, amount INTEGER, pid INTEGER)"
    )
    return db


def payments(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    with world(path) as db:
        rows = db.execute("SELECT key, recipient, amount FROM payments ORDER BY seq").fetchall()
    return [(str(k), str(r), int(a)) for k, r, a in rows]


def make_payment(path: Path, key: str, recipient: str, amount: int) -> dict[str, Any]:
    """The side effect, then (if asked) the worker dies before anyone hears of it."""
    db = world(path)
    db.execute(
        "INSERT INTO payments (key, recipient, amount, pid) VALUES (?, ?, ?, ?)",
        (key, recipient, amount, os.getpid()),
    )
    db.close()
    if os.environ.get("KILL_AFTER_EFFECT") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return {"paid": recipient, "amount": amount}


def registry(path: Path) -> Registry:
    reg = Registry()

    def reconcile(operation_key: str) -> dict[str, Any] | None:
        with Path(f"{path}.reconciled").open("a") as log:  # who asked, for the race test
            log.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("SLOW_RECONCILE", "0")))
        with world(path) as db:
            row = db.execute(
                "SELECT recipient, amount FROM payments WHERE key = ?", (operation_key,)
            ).fetchone()
        return None if row is None else {"paid": row[0], "amount": row[1]}

    @reg.tool(risk=Risk.WRITE, reconcile=reconcile)
    def pay(recipient: str, amount: int, operation_key: str) -> dict[str, Any]:
        """Pay someone (allowed by the policy's rule)."""
        return make_payment(path, operation_key, recipient, amount)

    @reg.tool(risk=Risk.WRITE, reconcile=reconcile)
    def refund(recipient: str, amount: int, operation_key: str) -> dict[str, Any]:
        """Refund someone (a write: the policy asks a human)."""
        return make_payment(path, operation_key, recipient, amount)

    @reg.tool(risk=Risk.WRITE)
    def transfer(recipient: str, amount: int, operation_key: str) -> dict[str, Any]:
        """Move money (allowed; no reconciler: an unknown outcome waits for a human)."""
        return make_payment(path, operation_key, recipient, amount)

    @reg.tool(risk=Risk.READ)
    def balance(account: str) -> int:
        """Read a balance."""
        return len(payments(path)) * 10

    @reg.tool(risk=Risk.ADMIN)
    def drop_ledger(reason: str) -> str:
        """Drop the ledger (the policy denies it)."""
        raise AssertionError("a denied tool ran")

    return reg


def app() -> App:
    """The worker's registry and policy as an ``App``, for the command line (``tether effects
    resolve --app tests.temporal.worker:app`` asks the policy who may resolve). It runs no
    agent loop, so its model is never asked."""

    def no_model() -> Any:
        raise AssertionError("the Temporal tests run no tether agent loop")

    world_path = Path(os.environ.get("TETHER_TEST_WORLD", "world.db"))
    return App(registry=registry(world_path), policy=policy(), model=no_model, principal=PRINCIPAL)


async def main(address: str, queue: str, store_url: str, world_path: str) -> None:
    from temporalio import activity
    from temporalio.client import Client
    from temporalio.worker import Worker

    from tests.temporal.flows import Chain, Governed, Plain
    from tether.adapters.temporal import Governor

    path = Path(world_path)
    ttl = float(os.environ.get("APPROVAL_TTL", "3600"))
    gate = Gate(registry(path), policy(ttl), open_store(store_url))
    if os.environ.get("PRINCIPAL_PER_WORKFLOW") == "1":
        # Who a workflow acts for, as the worker's code says: here, by workflow type.
        governor = Governor(
            gate,
            lambda info: Principal(
                subject=f"agent-{(info.workflow_type or '').lower()}",
                tenant="acme",
                scopes=frozenset(),
            ),
        )
    else:
        governor = Governor(gate, PRINCIPAL)

    @activity.defn(name="plain.pay")
    def plain_pay(arguments: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        key = f"plain:{info.workflow_id}:{info.activity_id}:{info.attempt}"
        return make_payment(path, key, arguments["recipient"], int(arguments["amount"]))

    client = await Client.connect(address)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[Chain, Governed, Plain],
            activities=[*governor.activities, plain_pay],
            activity_executor=pool,
            max_concurrent_activities=int(os.environ.get("MAX_ACTIVITIES", "100")),
        )
        async with worker:
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.read)  # until the test closes our stdin (or dies)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
