"""tether on Temporal: a worker is SIGKILLed after paying, before it reports; Temporal retries:
plain activities pay twice; tether's activity asks the payee (its reconciler) and pays once."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from datetime import timedelta
from typing import Any

try:
    from temporalio import activity, workflow
    from temporalio.client import Client
    from temporalio.common import RetryPolicy
    from temporalio.worker import Worker
except ModuleNotFoundError:  # without the extra: say what to install, and stop cleanly
    print("this example needs tether's [temporal] extra: pip install -e '.[temporal]'")
    sys.exit(0)

with workflow.unsafe.imports_passed_through():  # the workflow sandbox re-imports this file
    from tether import Gate, Policy, Principal, Registry, Risk, Verdict, open_store
    from tether.adapters.temporal import DevServer, GovernedCalls, Governor

QUICK = RetryPolicy(initial_interval=timedelta(milliseconds=200))
OPTIONS: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=60), "retry_policy": QUICK}
OPTIONS["heartbeat_timeout"] = timedelta(seconds=1)  # a dead worker is noticed within a second
registry = Registry()  # the tools tether governs


@workflow.defn
class Payment:
    def __init__(self) -> None:
        self.tools = GovernedCalls(**OPTIONS)

    @workflow.run
    async def run(self, governed: bool) -> str:
        if governed:  # through tether's gate
            return (await self.tools.call("pay", {"recipient": "ada", "amount": 30})).text
        return str(await workflow.execute_activity(pay, args=["ada", 30, "plain"], **OPTIONS))


def payments(key: str) -> list[tuple[str, str]]:  # what the payee saw, by operation key
    with sqlite3.connect(os.environ["WORLD"]) as db:
        db.execute("CREATE TABLE IF NOT EXISTS paid (key TEXT, result TEXT)")
        return db.execute("SELECT * FROM paid WHERE ? IN (key, 'all')", (key,)).fetchall()


@activity.defn  # the plain Temporal activity, and the tool tether governs (with a reconciler)
@registry.tool(risk=Risk.WRITE, reconcile=lambda key: next((r for _, r in payments(key)), None))
async def pay(recipient: str, amount: int, operation_key: str) -> str:
    """Pay someone. The payee sees the key. A doomed worker's first payment is its last act."""
    payments(operation_key)
    with sqlite3.connect(os.environ["WORLD"]) as db:
        db.execute("INSERT INTO paid VALUES (?, ?)", (operation_key, f"paid {recipient} {amount}"))
    if os.environ.pop("DIE_AFTER_PAYING", None):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"paid {recipient} {amount}"


async def worker(address: str, queue: str) -> None:
    """One worker process: tether's governed activity (its body is the gate), the plain one."""
    policy = Policy(version="pay-1", tiers={Risk.WRITE: Verdict.ALLOW})
    gate = Gate(registry, policy, open_store(os.environ["STORE"]))
    governor = Governor(gate, Principal(subject="payer", tenant="acme", scopes=frozenset()))
    client, activities = await Client.connect(address), [*governor.activities, pay]
    async with Worker(client, task_queue=queue, workflows=[Payment], activities=activities):
        await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin (or dies)


def spawn(address: str, queue: str, **env: str) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, address, queue]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.PIPE, text=True)


async def killed_after_paying(address: str, governed: bool, tmp: str) -> int:
    """The payment on a worker that dies right after paying, then on a fresh one."""
    queue = "governed" if governed else "plain"
    os.environ.update(WORLD=f"{tmp}/{queue}.db", STORE=f"sqlite:///{tmp}/tether.db")
    with spawn(address, queue, DIE_AFTER_PAYING="1") as doomed:
        client = await Client.connect(address)
        handle = await client.start_workflow(Payment.run, governed, id=queue, task_queue=queue)
        died = signal.Signals(-await asyncio.to_thread(doomed.wait)).name
    print(f"{queue}: the worker died of {died} after paying; Temporal retries on another")
    with spawn(address, queue):
        print(f"{queue}: {await handle.result()}")
    return len(payments("all"))


if __name__ == "__main__":
    if len(sys.argv) == 3:  # a worker process, started by spawn
        asyncio.run(worker(*sys.argv[1:]))
    else:
        with tempfile.TemporaryDirectory() as tmp, DevServer(tmp) as server:
            once = asyncio.run(killed_after_paying(server.address, True, tmp))
            twice = asyncio.run(killed_after_paying(server.address, False, tmp))
        print(json.dumps({"executions": once, "expected": 1, "plain_temporal": twice}))
