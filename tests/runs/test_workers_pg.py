"""Many workers on the real PostgreSQL server: races, a SIGKILLed worker, a dropped connection.

The witness is the demo ticket service's ``calls`` table: every handler invocation is a row,
so a duplicate side effect cannot hide.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg import schema_url
from tether.core.lifecycle import RunStatus
from tether.demo import TicketWorld, build
from tether.errors import StoreError
from tether.gate.desk import decide_approval
from tether.store.postgres import PostgresStore, split_url

APP = "tether.demo:support"


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from schema_url()


def env_for(url: str, world: Path) -> dict[str, str]:
    env = {**os.environ, "TETHER_DB": url, "TETHER_DEMO_WORLD": str(world)}
    env.pop("TETHER_CRASH_AT", None)
    return env


def start_worker(env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--app", APP, "--json", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def enqueue(store: PostgresStore, world: Path, n: int) -> list[str]:
    app = build(TicketWorld(world))
    runner = app.runner(store, metadata={"app": APP})
    return [runner.create_queued(f"close ticket T-{i}", app.principal) for i in range(n)]


def approve_until_done(url: str, run_ids: list[str], stop: threading.Event) -> None:
    """A reviewer approving whatever is pending, as it appears, until every run completes."""
    with PostgresStore(url) as store:
        while not stop.is_set():
            for approval in store.list_approvals():
                if approval.status.value == "pending":
                    try:
                        decide_approval(
                            store, approval.approval_id, "reviewer-5", approve=True, now=time.time()
                        )
                    except Exception:
                        continue
            statuses = {r.run_id: r.status for r in store.list_runs()}
            if all(statuses.get(r) == RunStatus.COMPLETED.value for r in run_ids):
                return
            stop.wait(0.1)


def witness(world: Path) -> dict[str, int]:
    with sqlite3.connect(world) as c:
        rows = c.execute(
            "SELECT operation_key, count(*) FROM calls WHERE tool = 'close_ticket' "
            "GROUP BY operation_key"
        ).fetchall()
    return dict(rows)


def wait_all_completed(url: str, run_ids: list[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    with PostgresStore(url) as store:
        while True:
            statuses = {r.run_id: r.status for r in store.list_runs()}
            done = all(statuses.get(r) == RunStatus.COMPLETED.value for r in run_ids)
            if done or time.monotonic() > deadline:
                return statuses
            time.sleep(0.2)


def assert_exactly_once(url: str, world: Path, run_ids: list[str]) -> None:
    calls = witness(world)
    assert {k: n for k, n in calls.items() if n > 1} == {}, "a side effect happened twice"
    with PostgresStore(url) as store:
        effects = [e for e in store.list_effects() if e.tool_name == "close_ticket"]
        assert store.verify_audit().intact
    assert len(effects) == len(run_ids)
    assert all(e.status.took_effect for e in effects)
    assert set(calls) == {e.operation_key for e in effects}, "ledger and witness disagree"


def test_four_workers_race_over_two_hundred_runs_with_approvals_midway(
    pg_url: str, tmp_path: Path
) -> None:
    world = tmp_path / "world.db"
    with PostgresStore(pg_url) as store:
        run_ids = enqueue(store, world, 200)
    env = env_for(pg_url, world)
    # No idle exit: a worker must not leave while runs wait for the reviewer; SIGTERM ends them.
    workers = [start_worker(env, "--concurrency", "2") for _ in range(4)]
    stop = threading.Event()
    reviewer = threading.Thread(target=approve_until_done, args=(pg_url, run_ids, stop))
    reviewer.start()
    try:
        statuses = wait_all_completed(pg_url, run_ids, timeout_s=240)
    finally:
        stop.set()
        reviewer.join()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outputs = [w.communicate(timeout=60) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-500:] for o in outputs]
    stats = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    # The invariants first, so a failure below says whether any was broken.
    assert all(statuses[r] == "completed" for r in run_ids)
    assert_exactly_once(pg_url, world, run_ids)
    # Each run claimed before and after its approval.
    assert sum(s["claimed"] for s in stats) >= 400, stats
    assert sum(1 for s in stats if s["claimed"] > 0) >= 2, "the work was not shared"


def test_a_worker_killed_mid_run_is_recovered_by_the_others(pg_url: str, tmp_path: Path) -> None:
    world = tmp_path / "world.db"
    with PostgresStore(pg_url) as store:
        run_ids = enqueue(store, world, 60)
    env = env_for(pg_url, world)
    # Approve as requests appear, so runs are mid-flight across both phases when the kill lands.
    stop = threading.Event()
    reviewer = threading.Thread(target=approve_until_done, args=(pg_url, run_ids, stop))
    reviewer.start()
    victim = start_worker(env, "--concurrency", "2", "--lease", "2")
    held = held_by(pg_url, victim.pid, timeout_s=20)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert held, "the worker held no run when it was killed"
    survivors = [start_worker(env, "--concurrency", "2", "--lease", "2") for _ in range(3)]
    try:
        statuses = wait_all_completed(pg_url, run_ids, timeout_s=240)
    finally:
        stop.set()
        reviewer.join()
        for w in survivors:
            w.send_signal(signal.SIGTERM)
        for w in survivors:
            w.communicate(timeout=60)
    assert all(statuses[r] == "completed" for r in run_ids), {
        s: list(statuses.values()).count(s) for s in set(statuses.values())
    }
    assert_exactly_once(pg_url, world, run_ids)


def held_by(url: str, pid: int, timeout_s: float) -> list[str]:
    """Wait until the worker with ``pid`` holds a run's lease; the runs it holds."""
    deadline = time.monotonic() + timeout_s
    with PostgresStore(url) as store:
        while time.monotonic() < deadline:
            held = [
                r.run_id
                for r in store.list_runs(RunStatus.RUNNING.value)
                if r.lease_owner and f":{pid}:" in r.lease_owner
            ]
            if held:
                return held
            time.sleep(0.02)
    return []


def test_sigterm_stops_a_worker_cleanly(pg_url: str, tmp_path: Path) -> None:
    world = tmp_path / "world.db"
    with PostgresStore(pg_url) as store:
        enqueue(store, world, 40)
    worker = start_worker(env_for(pg_url, world), "--concurrency", "2")
    assert held_by(pg_url, worker.pid, timeout_s=20)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    stats = json.loads(out.splitlines()[-1])
    assert stats["errors"] == []
    assert stats["claimed"] < 40, "it should have stopped claiming, not drained the queue"
    with PostgresStore(pg_url) as store:
        # It finished what it was driving: nothing is left running under its lease.
        assert not [
            r for r in store.list_runs() if r.lease_owner and f":{worker.pid}:" in r.lease_owner
        ]
        assert store.verify_audit().intact


def _terminate(conn_pid: int, url: str) -> None:
    import psycopg

    conninfo, _ = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn_pid,))


class DroppingStore(PostgresStore):
    """A real PostgresStore whose chosen transaction loses its connection half-way."""

    drop_on: int = 0

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.transactions = 0

    def transaction(self) -> Any:
        self.transactions += 1
        if self.transactions != self.drop_on:
            return super().transaction()
        return self._dropped()

    def _dropped(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def tx() -> Iterator[Any]:
            with super(DroppingStore, self).transaction() as inner:
                yield inner
                pid = inner.c.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[attr-defined]
                _terminate(pid, self.url)

        return tx()


def test_a_dropped_connection_mid_transaction_leaves_nothing_half_written(
    pg_url: str, tmp_path: Path
) -> None:
    world_path = tmp_path / "world.db"
    store = DroppingStore(pg_url)

    class ArmingWorld(TicketWorld):
        def invoke(self, tool: str, arguments: Any, operation_key: str | None) -> Any:
            result = super().invoke(tool, arguments, operation_key)
            if tool == "close_ticket" and store.drop_on == -1:
                store.drop_on = store.transactions + 1  # the outcome's transaction
            return result

    app = build(ArmingWorld(world_path))
    try:
        runner = app.runner(store)
        run_id = runner.create("close ticket T-1", app.principal)
        result = runner.resume(run_id)
        assert result.status == "awaiting_approval"
        [approval_id] = result.approvals
        decide_approval(store, approval_id, "reviewer-5", approve=True, now=time.time())
        # The outcome of close_ticket is the transaction that loses its connection: the tool
        # ran, its "dispatched" row is durable, the outcome is not.
        store.drop_on = -1
        with pytest.raises(StoreError):
            app.runner(store).resume(run_id)
        effects = {e.tool_name: e for e in store.list_effects(run_id)}
        assert store.verify_audit().intact
        assert effects["close_ticket"].status.value == "dispatched"
        store.drop_on = 0
        # The pool replaced the dead connection (the failed driver released its lease on the
        # way out); resuming settles the effect by reconciling it, once.
        final = app.runner(store).resume(run_id)
        assert final.status == "completed"
        assert witness(world_path) == {effects["close_ticket"].operation_key: 1}
        assert store.verify_audit().intact
    finally:
        store.close()
