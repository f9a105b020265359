"""An approval decided while its run's driver is writing the pause must still wake the run.

On PostgreSQL (READ COMMITTED) the driver's last write reads the run's approvals and then
sets the run ``awaiting_approval``; the reviewer's decision queues the run only if it finds
it ``awaiting_approval``. Each must see the other's write, or the run waits for nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg import schema_url
from tether.core.approvals import ApprovalStatus
from tether.core.lifecycle import RunStatus
from tether.demo import TicketWorld, build
from tether.gate.desk import decide_approval
from tether.store.postgres import PostgresStore, PostgresTx


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from schema_url()


def test_an_approval_decided_between_the_drivers_read_and_its_write_queues_the_run(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build(TicketWorld(tmp_path / "world.db"))
    driver, reviewer = PostgresStore(pg_url), PostgresStore(pg_url)
    asked, decided = threading.Event(), threading.Event()
    driving = threading.get_ident()
    read = PostgresTx.approvals_for_run

    def review(run_id: str) -> None:
        [pending] = reviewer.list_approvals(run_id=run_id)
        decide_approval(reviewer, pending.approval_id, "reviewer-5", approve=True, now=time.time())
        decided.set()

    def read_then_decide(tx: PostgresTx, run_id: str) -> Any:
        # The driver has read the approvals (one pending); the reviewer approves now, before
        # the driver writes the run. It may have to wait for the driver's transaction.
        found = read(tx, run_id)
        if threading.get_ident() == driving and not asked.is_set():
            asked.set()
            threading.Thread(target=review, args=(run_id,), daemon=True).start()
            decided.wait(1.0)
        return found

    monkeypatch.setattr(PostgresTx, "approvals_for_run", read_then_decide)
    try:
        runner = app.runner(driver)
        run_id = runner.create("close ticket T-1", app.principal)
        runner.resume(run_id)
        assert decided.wait(10), "the reviewer never decided"
        with reviewer.read() as tx:
            run = tx.get_run(run_id)
            approvals = tx.approvals_for_run(run_id)
        assert run is not None
        assert [a.status for a in approvals] == [ApprovalStatus.APPROVED]
        # Nothing is pending: the run must be where a worker finds it, not waiting on nobody.
        assert run.status == RunStatus.QUEUED.value
        assert app.runner(driver).resume(run_id).status == RunStatus.COMPLETED.value
    finally:
        driver.close()
        reviewer.close()
