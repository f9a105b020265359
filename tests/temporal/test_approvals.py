"""Approvals as durable waits on a real Temporal dev server: the workflow waits on a signal
and a timer (no activity pending, no worker held), tether's waker signals it once an approver
decides in another process, and the gate, not the signal, decides what runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.temporal.conftest import ROOT, Workers
from tests.temporal.flows import Governed
from tests.temporal.worker import APPROVER, payments
from tether import ApprovalStatus
from tether.adapters.temporal import APPROVAL_SIGNAL, CallAnswer
from tether.core.approvals import Approval
from tether.identity import add_identity
from tether.store import Store, open_store

REFUND = {"tool": "refund", "arguments": {"recipient": "ada", "amount": 5}}


@pytest.fixture
def waker(workers: Workers) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m tether.adapters.temporal.waker`` in its own process, as deployed."""
    open_store(workers.store_url).close()  # created before two processes open it
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.adapters.temporal.waker",
            "--db",
            workers.store_url,
            "--temporal",
            workers.server.address,
            "--poll",
            "0.2",
        ],
        cwd=ROOT,
    )
    yield process
    process.kill()
    process.wait(timeout=10)


def decide_with_cli(workers: Workers, verb: str, approval_id: str, token: str) -> None:
    """``tether approvals approve|deny`` in its own process, with an approver's credential."""
    token_file = workers.world.parent / "reviewer.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "tether", "approvals", verb, approval_id]
        + ["--db", workers.store_url, "--token-file", str(token_file)]
        + (["--reason", "not this one"] if verb == "deny" else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def pending_approval(store: Store, run_id: str, timeout_s: float = 60) -> Approval:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = store.list_approvals(status=ApprovalStatus.PENDING, run_id=run_id)
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError("the workflow never asked for an approval")


async def start(workers: Workers, *steps: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    client = await Client.connect(workers.server.address)
    return await client.start_workflow(
        Governed.run, list(steps), id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
    )


async def held_activities(handle: WorkflowHandle[Any, Any]) -> int:
    description = await handle.describe()
    return len(description.raw_description.pending_activities)


async def waits(handle: WorkflowHandle[Any, Any], at_least: int, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen: int = await handle.query(Governed.waits)
        if seen >= at_least:
            return seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"the workflow did not wait {at_least} time(s)")


def approver_token(store: Store) -> str:
    _, token = add_identity(store, APPROVER, "approver", now=time.time(), tenants=["acme"])
    return token


def test_an_asked_call_waits_durably_and_runs_once_approved_from_another_process(
    workers: Workers, waker: subprocess.Popen[bytes]
) -> None:
    store = open_store(workers.store_url)
    token = approver_token(store)
    workers.start()

    async def scenario() -> tuple[list[CallAnswer], int, int]:
        handle = await start(workers, REFUND)
        approval = await pending_approval(store, handle.id)
        await waits(handle, 1)
        held = await held_activities(handle)  # waiting on the signal and the timer only
        assert payments(workers.world) == []
        await asyncio.to_thread(decide_with_cli, workers, "approve", approval.approval_id, token)
        answers = await asyncio.wait_for(handle.result(), timeout=60)
        return answers, held, await handle.query(Governed.waits)

    (answer,), held, waited = asyncio.run(scenario())
    assert held == 0
    assert answer.kind == "ran" and answer.result == {"paid": "ada", "amount": 5}
    assert waited == 1
    assert len(payments(workers.world)) == 1
    (approval,) = store.list_approvals(run_id=answer.operation_key.split(":")[0])
    assert approval.status is ApprovalStatus.USED and approval.approver == APPROVER


def test_a_denial_by_an_approver_reaches_the_workflow(
    workers: Workers, waker: subprocess.Popen[bytes]
) -> None:
    store = open_store(workers.store_url)
    token = approver_token(store)
    workers.start()

    async def scenario() -> list[CallAnswer]:
        handle = await start(workers, REFUND)
        approval = await pending_approval(store, handle.id)
        await asyncio.to_thread(decide_with_cli, workers, "deny", approval.approval_id, token)
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        return answers

    (answer,) = asyncio.run(scenario())
    assert answer.kind == "refused" and answer.error == "ApprovalDenied"
    assert "not this one" in answer.text
    assert payments(workers.world) == []


def test_an_approval_nobody_decides_expires_on_the_workflow_timer(workers: Workers) -> None:
    store = open_store(workers.store_url)
    workers.start(APPROVAL_TTL="2")

    async def scenario() -> tuple[list[CallAnswer], int]:
        handle = await start(workers, REFUND)
        await pending_approval(store, handle.id)
        await waits(handle, 1)
        held = await held_activities(handle)
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        return answers, held

    (answer,), held = asyncio.run(scenario())
    assert held == 0
    assert answer.kind == "refused" and answer.error == "ApprovalExpired"
    assert payments(workers.world) == []
    (approval,) = store.list_approvals(status=ApprovalStatus.EXPIRED)
    assert approval.decided_at is None


def test_a_forged_signal_runs_nothing_and_the_workflow_keeps_waiting(workers: Workers) -> None:
    # Anyone who can reach Temporal can signal the workflow; the signal names an approval
    # but carries no grant, so the gate finds the approval still pending and nothing runs.
    store = open_store(workers.store_url)
    workers.start(APPROVAL_TTL="10")

    async def scenario() -> tuple[list[CallAnswer], int, ApprovalStatus]:
        handle = await start(workers, REFUND)
        approval = await pending_approval(store, handle.id)
        await waits(handle, 1)
        await handle.signal(APPROVAL_SIGNAL, approval.approval_id)
        waited = await waits(handle, 2)  # ran the activity again, and waits again
        current = store.list_approvals(run_id=handle.id)[0].status
        assert payments(workers.world) == []
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        return answers, waited, current

    (answer,), waited, status = asyncio.run(scenario())
    assert waited == 2
    assert status is ApprovalStatus.PENDING
    assert answer.kind == "refused" and answer.error == "ApprovalExpired"
    assert payments(workers.world) == []


def test_the_waker_signals_each_decided_approval_once(tmp_path: Path, workers: Workers) -> None:
    from tether.adapters.temporal.waker import ApprovalWaker

    store = open_store(workers.store_url)
    token = approver_token(store)
    workers.start()

    async def scenario() -> tuple[int, int, list[CallAnswer]]:
        client = await Client.connect(workers.server.address)
        handle = await start(workers, REFUND)
        approval = await pending_approval(store, handle.id)
        waker = ApprovalWaker(store, client)
        before = await waker.wake_once()  # nothing decided yet
        await asyncio.to_thread(decide_with_cli, workers, "approve", approval.approval_id, token)
        first = await waker.wake_once()
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        again = await waker.wake_once()
        return before, first + again, answers

    before, total, (answer,) = asyncio.run(scenario())
    assert (before, total) == (0, 1)
    assert answer.kind == "ran"


def test_an_approvers_edit_runs_the_edited_call_once(
    workers: Workers, waker: subprocess.Popen[bytes]
) -> None:
    store = open_store(workers.store_url)
    token = approver_token(store)
    workers.start()

    async def scenario() -> list[CallAnswer]:
        handle = await start(workers, REFUND)
        approval = await pending_approval(store, handle.id)
        token_file = workers.world.parent / "editor.token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        edit = [sys.executable, "-m", "tether", "approvals", "edit", approval.approval_id]
        edit += ["--arguments", '{"recipient": "ada", "amount": 3}', "--db", workers.store_url]
        done = await asyncio.to_thread(
            subprocess.run,
            # The edit is judged again: the app names the worker's registry and policy.
            [*edit, "--token-file", str(token_file), "--app", "tests.temporal.worker:app"],
            cwd=ROOT,
            env={**os.environ, "TETHER_TEST_WORLD": str(workers.world)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        answers: list[CallAnswer] = await asyncio.wait_for(handle.result(), timeout=60)
        return answers

    (answer,) = asyncio.run(scenario())
    assert answer.kind == "ran" and answer.result == {"paid": "ada", "amount": 3}
    assert [amount for _, _, amount in payments(workers.world)] == [3]  # the edit, once
