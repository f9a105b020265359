"""tether's governed activity on a real Temporal dev server, with worker processes that are
started, SIGKILLed and raced for real. Every payment is counted in a SQLite "world" file
that tether never writes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.temporal.conftest import ROOT, Workers, wait_for_exit
from tests.temporal.flows import Governed, Plain
from tests.temporal.worker import payments
from tether.adapters.temporal import CallAnswer
from tether.core.ledger import EffectStatus
from tether.store import open_store

PAY = {"tool": "pay", "arguments": {"recipient": "ada", "amount": 30}}


async def run_workflow(workers: Workers, flow: Any, steps: list[dict[str, Any]]) -> Any:
    client = await Client.connect(workers.server.address)
    handle = await client.start_workflow(
        flow.run, steps, id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
    )
    return handle.id, await asyncio.wait_for(handle.result(), timeout=120)


def governed(workers: Workers, *steps: dict[str, Any]) -> tuple[str, list[CallAnswer]]:
    workflow_id, answers = asyncio.run(run_workflow(workers, Governed, list(steps)))
    return workflow_id, answers


def test_an_allowed_call_runs_once_with_its_operation_key(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start()
    workflow_id, (answer,) = governed(workers, PAY)
    assert answer.kind == "ran" and answer.result == {"paid": "ada", "amount": 30}
    assert not answer.replayed
    (effect,) = store.list_effects(workflow_id)  # the tether run is the workflow
    assert effect.status is EffectStatus.COMMITTED
    assert answer.operation_key == effect.operation_key
    assert effect.operation_key.startswith(f"{workflow_id}:{answer.call_id}:pay:")
    assert payments(workers.world) == [(effect.operation_key, "ada", 30)]  # the key reached it


def test_two_calls_are_two_effects_and_a_read_is_allowed(workers: Workers) -> None:
    open_store(workers.store_url)
    workers.start()
    read = {"tool": "balance", "arguments": {"account": "ada"}}
    _, answers = governed(workers, PAY, PAY, read)
    assert [a.kind for a in answers] == ["ran", "ran", "ran"]
    assert answers[0].call_id != answers[1].call_id
    assert len(payments(workers.world)) == 2
    assert answers[2].result == 20


def test_a_denial_reaches_the_workflow_as_what_the_model_reads(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start()
    drop = {"tool": "drop_ledger", "arguments": {"reason": "cleanup"}}
    workflow_id, (denied, after) = governed(workers, drop, PAY)
    assert denied.kind == "refused" and denied.error == "PolicyDenied"
    assert "denies 'drop_ledger'" in denied.text
    assert after.kind == "ran"  # the workflow goes on; the model may try something else
    assert [e.tool_name for e in store.list_effects(workflow_id)] == ["pay"]


def test_unknown_tool_is_refused(workers: Workers) -> None:
    open_store(workers.store_url)
    workers.start()
    _, (answer,) = governed(workers, {"tool": "launch", "arguments": {}})
    assert answer.kind == "refused" and answer.error == "UnknownToolError"


def reconcilers(world: Path) -> list[str]:
    log = Path(f"{world}.reconciled")
    return log.read_text().split() if log.exists() else []


def killed_after_the_effect(workers: Workers, flow: Any, *others: dict[str, str]) -> Any:
    """Start the flow on a worker that SIGKILLs itself right after the payment; then start
    ``others`` (workers' environments) to take Temporal's retry; the flow's result."""

    async def scenario() -> Any:
        client = await Client.connect(workers.server.address)
        doomed = workers.start(KILL_AFTER_EFFECT="1")
        handle = await client.start_workflow(
            flow.run, [PAY], id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
        )
        code = await asyncio.to_thread(wait_for_exit, doomed)
        assert code == -signal.SIGKILL
        assert len(payments(workers.world)) == 1  # the effect happened; nobody reported it
        for env in others or ({},):
            workers.start(**env)
        return handle.id, await asyncio.wait_for(handle.result(), timeout=120)

    return asyncio.run(scenario())


def test_plain_temporal_pays_twice_when_the_worker_dies_after_the_effect(
    workers: Workers,
) -> None:
    _, (result,) = killed_after_the_effect(workers, Plain)
    assert result == {"paid": "ada", "amount": 30}
    assert len(payments(workers.world)) == 2  # at least once: the retry paid again


def test_tether_pays_once_when_the_worker_dies_after_the_effect(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workflow_id, (answer,) = killed_after_the_effect(workers, Governed)
    assert answer.kind == "ran" and answer.result == {"paid": "ada", "amount": 30}
    assert answer.replayed  # the retry replayed what the reconciler found
    (effect,) = store.list_effects(workflow_id)
    assert effect.status is EffectStatus.RECONCILED_COMMITTED
    assert [p[0] for p in payments(workers.world)] == [effect.operation_key]


def test_two_workers_racing_the_retried_activity_pay_once(tmp_path: Path, workers: Workers) -> None:
    # After the kill, two workers wait for the retry, each running one activity at a time
    # and slow to reconcile (past the activity's start-to-close timeout). One takes the
    # retry; when it times out Temporal hands the next attempt to the other while the first
    # is still in the gate with the same call (its slot stays taken until its gate call
    # ends). Two processes reconcile one effect at once; it is settled and paid once.
    store = open_store(workers.store_url)
    racer = {"SLOW_RECONCILE": "6", "MAX_ACTIVITIES": "1"}
    workflow_id, (answer,) = killed_after_the_effect(workers, Governed, racer, racer)
    assert answer.kind == "ran"
    (effect,) = store.list_effects(workflow_id)
    assert effect.status is EffectStatus.RECONCILED_COMMITTED
    assert len(payments(workers.world)) == 1
    assert len(set(reconcilers(workers.world))) == 2  # two worker processes raced for it


def test_an_unknown_outcome_with_no_reconciler_waits_for_a_human(workers: Workers) -> None:
    # The tool cannot say whether it acted: the retries fail (retryably) and nothing is
    # sent again until an approver says what happened; then the next retry replays it.
    from tests.temporal.test_approvals import approver_token

    store = open_store(workers.store_url)
    token = approver_token(store)
    transfer = {"tool": "transfer", "arguments": {"recipient": "bo", "amount": 9}}

    async def scenario() -> tuple[str, list[CallAnswer]]:
        client = await Client.connect(workers.server.address)
        doomed = workers.start(KILL_AFTER_EFFECT="1")
        handle = await client.start_workflow(
            Governed.run, [transfer], id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
        )
        assert await asyncio.to_thread(wait_for_exit, doomed) == -signal.SIGKILL
        workers.start()
        key = await unknown_effect(store, handle.id)
        await asyncio.sleep(3)  # retries meanwhile: each one finds it unknown, sends nothing
        assert len(payments(workers.world)) == 1
        description = await handle.describe()
        (pending,) = description.raw_description.pending_activities
        assert pending.attempt >= 3 and "TetherOutcomeUnknown" in str(pending.last_failure)
        await asyncio.to_thread(resolve_with_cli, workers, key, token)
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        return handle.id, answers

    workflow_id, (answer,) = asyncio.run(scenario())
    assert answer.kind == "ran" and answer.replayed
    assert answer.result == {"sent": True}
    (effect,) = store.list_effects(workflow_id)
    assert effect.status is EffectStatus.RECONCILED_COMMITTED
    assert len(payments(workers.world)) == 1


async def unknown_effect(store: Any, run_id: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for effect in store.list_effects(run_id):
            if effect.status is EffectStatus.UNKNOWN:
                return str(effect.operation_key)
        await asyncio.sleep(0.1)
    raise AssertionError("the effect never became unknown")


def resolve_with_cli(workers: Workers, key: str, token: str) -> None:
    token_file = workers.world.parent / "resolver.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    says = ["--committed", "--result", '{"sent": true}', "--token-file", str(token_file)]
    says += ["--app", "tests.temporal.worker:app"]  # the policy: who may say what happened
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "effects",
            "resolve",
            key,
            *says,
            "--db",
            workers.store_url,
        ],
        cwd=ROOT,
        env={**os.environ, "TETHER_TEST_WORLD": str(workers.world)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_worker_names_each_workflows_principal(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start(PRINCIPAL_PER_WORKFLOW="1")
    workflow_id, (answer,) = governed(workers, PAY)
    assert answer.kind == "ran"
    with store.read() as tx:
        run = tx.get_run(workflow_id)
    assert run is not None and run.principal_id == "agent-governed"
