"""Many Temporal worker processes on one tether PostgreSQL store: several workflows at once,
one worker SIGKILLed mid-way, and every payment made exactly once."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tests import pg
from tests.temporal.conftest import Workers, wait_for_exit
from tests.temporal.flows import Governed
from tests.temporal.worker import payments
from tether.adapters.temporal import CallAnswer
from tether.adapters.temporal.devserver import DevServer
from tether.core.ledger import EffectStatus
from tether.store import open_store

FLOWS = 6


@pytest.fixture
def pg_workers(temporal: DevServer, tmp_path: Path) -> Iterator[Workers]:
    schema = pg.schema_url()
    w = Workers(temporal, next(schema), tmp_path / "world.db")
    yield w
    w.close()
    for _ in schema:  # drops the schema
        pass


def test_three_workers_one_killed_pay_each_call_once(pg_workers: Workers) -> None:
    workers = pg_workers
    store = open_store(workers.store_url)
    steps = [{"tool": "pay", "arguments": {"recipient": f"r{i}", "amount": i}} for i in range(1, 3)]

    async def scenario() -> tuple[list[str], list[list[CallAnswer]]]:
        client = await Client.connect(workers.server.address)
        doomed = workers.start(KILL_AFTER_EFFECT="1")  # polling first, it takes the first payment
        handles = [
            await client.start_workflow(
                Governed.run, steps, id=f"wf-{uuid.uuid4().hex[:10]}", task_queue=workers.queue
            )
            for _ in range(FLOWS)
        ]
        for _ in range(2):
            workers.start()
        code = await asyncio.to_thread(wait_for_exit, doomed)
        assert code == -signal.SIGKILL
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
        return [h.id for h in handles], list(results)

    ids, results = asyncio.run(scenario())
    assert all(a.kind == "ran" for answers in results for a in answers)
    effects = [e for run in ids for e in store.list_effects(run)]
    assert len(effects) == FLOWS * len(steps)
    assert all(e.status.took_effect for e in effects)
    # The killed worker's payment was reconciled, not sent again.
    assert any(e.status is EffectStatus.RECONCILED_COMMITTED for e in effects)
    keys = [key for key, _, _ in payments(workers.world)]
    assert sorted(keys) == sorted(e.operation_key for e in effects)  # each once, none lost
