"""What a reset and a continue-as-new mean for tether's calls, on a real dev server: the run
stays the workflow id; a reset's new calls are new unless the workflow names them."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from typing import Any

from temporalio.client import Client

from tests.temporal.conftest import Workers
from tests.temporal.flows import Chain, Governed
from tests.temporal.test_governed_activities import PAY, governed
from tests.temporal.worker import payments
from tether.adapters.temporal import CallAnswer
from tether.adapters.temporal.devserver import find_temporal
from tether.store import open_store


def reset(workers: Workers, workflow_id: str) -> list[CallAnswer]:
    """``temporal workflow reset`` to the first workflow task; the new run's result."""
    binary = find_temporal()
    assert binary is not None
    where = ["--workflow-id", workflow_id, "--address", workers.server.address]
    done = subprocess.run(
        [binary, "workflow", "reset", *where, "--type", "FirstWorkflowTask", "--reason", "test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    async def result() -> Any:
        client = await Client.connect(workers.server.address)
        handle = client.get_workflow_handle_for(Governed.run, workflow_id)
        return await asyncio.wait_for(handle.result(), 60)

    answers: list[CallAnswer] = asyncio.run(result())
    return answers


def test_a_reset_sends_new_calls_again(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start()
    workflow_id, (first,) = governed(workers, PAY)
    (again,) = reset(workers, workflow_id)
    assert again.kind == "ran" and not again.replayed
    assert again.call_id != first.call_id  # the reset run's workflow.uuid4() differs
    assert len(store.list_effects(workflow_id)) == 2  # the same tether run
    assert len(payments(workers.world)) == 2


def test_a_keyed_call_stays_once_across_a_reset(workers: Workers) -> None:
    open_store(workers.store_url)
    workers.start()
    keyed = {**PAY, "key": "invoice-7"}
    workflow_id, (first,) = governed(workers, keyed)
    (again,) = reset(workers, workflow_id)
    assert first.call_id == again.call_id == "invoice-7"
    assert again.kind == "ran" and again.replayed
    assert len(payments(workers.world)) == 1


def test_continue_as_new_keeps_the_tether_run(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start()

    async def chain() -> tuple[str, list[CallAnswer]]:
        client = await Client.connect(workers.server.address)
        handle = await client.start_workflow(
            Chain.run, args=[3, []], id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
        )
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), 60)
        return handle.id, answers

    workflow_id, answers = asyncio.run(chain())
    assert [a.kind for a in answers] == ["ran"] * 3
    assert len({a.call_id for a in answers}) == 3
    effects = store.list_effects(workflow_id)
    assert len(effects) == 3 and {e.run_id for e in effects} == {workflow_id}
    assert len(payments(workers.world)) == 3
