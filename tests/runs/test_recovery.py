"""Reconciliation, recovery and compensation, on every store."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tether.core.lifecycle import RunStatus
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.demo import TicketWorld, build
from tether.errors import StoreError
from tether.gate.desk import decide_approval
from tether.gate.settle import Result
from tether.models import ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy.constraints import ToolRule
from tether.policy.rules import Policy
from tether.runs.app import App
from tether.runs.reconcile import resolve_effect
from tether.runs.recovery import recover, recoverable, rollback
from tether.tools.registry import Registry, Risk

REVIEWER = "reviewer-5"


def approve_all(backend: Backend, run_id: str) -> None:
    for a in backend.store.list_approvals(run_id=run_id):
        if a.status.value == "pending":
            decide_approval(backend.store, a.approval_id, REVIEWER, approve=True, now=time.time())


def closed_run(backend: Backend, world: TicketWorld, ticket: str = "T-1") -> tuple[App, str]:
    app = build(world)
    runner = app.runner(backend.store)
    first = runner.start(f"close ticket {ticket}", app.principal)
    assert first.status == "awaiting_approval"
    approve_all(backend, first.run_id)
    done = app.runner(backend.store).resume(first.run_id)
    assert done.status == "completed"
    return app, first.run_id


def test_rollback_compensates_committed_effects_as_governed_calls(
    backend: Backend, tmp_path: Path
) -> None:
    world = TicketWorld(tmp_path / "world.db")
    app, run_id = closed_run(backend, world)
    gate = app.gate(backend.store)
    first = rollback(gate, run_id)
    # reopen_ticket is a write: its undo needs approval like any other call.
    assert first.compensated == [] and len(first.waiting) == 1
    assert world.invocations("reopen_ticket") == 0
    approve_all(backend, run_id)
    second = rollback(gate, run_id)
    assert second.to_dict()["complete"] is True
    assert len(second.compensated) == 1
    assert world.invocations("reopen_ticket") == 1
    conn = world.connect()
    assert conn.execute("SELECT status FROM tickets WHERE ticket_id='T-1'").fetchone()[0] == "open"
    conn.close()
    # Again: the undo is a replay from the ledger, never a second reopen.
    third = rollback(gate, run_id)
    assert len(third.compensated) == 1
    assert world.invocations("reopen_ticket") == 1
    undo = [e for e in backend.store.list_effects(run_id) if e.call_id.startswith("undo-")]
    assert [e.tool_name for e in undo] == ["reopen_ticket"]
    assert backend.store.verify_audit().intact


def test_rollback_skips_effects_without_a_compensating_tool(
    backend: Backend, tmp_path: Path
) -> None:
    world = TicketWorld(tmp_path / "world.db")
    app, run_id = closed_run(backend, world)
    rollback(app.gate(backend.store), run_id)  # the undo of close_ticket asks first
    approve_all(backend, run_id)
    report = rollback(app.gate(backend.store), run_id)
    reads = [
        e.operation_key for e in backend.store.list_effects(run_id) if "read_ticket" in e.tool_name
    ]
    assert report.not_compensable == reads  # read_ticket has nothing to undo


def _one_write_app(world: dict[str, Any], *, reconcilable: bool, fail_first: str) -> App:
    """An app whose only call is ``charge``; its first attempt ``fail_first`` ("timeout" or
    "interrupt"). The outside system remembers what it applied in ``world``."""
    registry = Registry()
    attempts = world.setdefault("attempts", [])

    def reconcile(operation_key: str) -> Any:
        return world.get(operation_key)

    @registry.tool(risk=Risk.WRITE, reconcile=reconcile if reconcilable else None)
    def charge(amount: int, operation_key: str) -> Result:
        """Charge a card."""
        attempts.append(operation_key)
        if len(attempts) == 1 and fail_first == "timeout":
            raise TimeoutError("the payment service did not answer")
        world[operation_key] = {"charged": amount}
        if len(attempts) == 1 and fail_first == "interrupt":
            raise KeyboardInterrupt  # the process dies after the service acted
        return Result({"charged": amount}, external_reference=f"pay:{operation_key}")

    return App(
        registry=registry,
        policy=Policy(version="p", tools={"charge": ToolRule(verdict=Verdict.ALLOW)}),
        model=lambda: ScriptedModel(
            [[ModelToolCall(id="c1", name="charge", arguments={"amount": 5})], "charged"]
        ),
        principal=Principal(subject="agent", tenant="acme"),
    )


def test_a_timeout_stops_the_run_until_reconciled(backend: Backend) -> None:
    world: dict[str, Any] = {}
    app = _one_write_app(world, reconcilable=True, fail_first="timeout")
    result = app.runner(backend.store).start("charge 5", app.principal)
    # Not failed, not retried: the outcome is unknown and the run says so.
    assert result.status == RunStatus.AWAITING_RECONCILIATION.value
    assert [e.status.value for e in backend.store.list_effects()] == ["unknown"]
    report = recover(backend.store, lambda: app.runner(backend.store))
    assert report.recovered == {result.run_id: "completed"}
    assert report.reconciled == {"absent": 1}
    # Absent: sent again with the same key; exactly one charge happened.
    assert len(set(world["attempts"])) == 1 and len(world["attempts"]) == 2
    [effect] = backend.store.list_effects()
    assert effect.status.value == "committed" and effect.attempts == 2
    assert backend.store.verify_audit().intact


def test_a_crash_after_the_tool_acted_is_reconciled_committed(backend: Backend) -> None:
    world: dict[str, Any] = {}
    app = _one_write_app(world, reconcilable=True, fail_first="interrupt")
    with pytest.raises(KeyboardInterrupt):
        app.runner(backend.store).start("charge 5", app.principal, run_id="run-1")
    assert [r.run_id for r in recoverable(backend.store, time.time(), "someone")] == ["run-1"]
    report = recover(backend.store, lambda: app.runner(backend.store))
    assert report.to_dict()["effects_reconciled"] == {"committed": 1, "absent": 0, "unresolved": 0}
    assert report.recovered == {"run-1": "completed"}
    assert len(world["attempts"]) == 1  # never sent twice
    [effect] = backend.store.list_effects()
    assert effect.status.value == "reconciled_committed"
    assert effect.external_reference is None or effect.external_reference.startswith("pay:")


@pytest.mark.parametrize("outcome", ["committed", "absent"])
def test_an_effect_nothing_can_reconcile_waits_for_a_human(backend: Backend, outcome: str) -> None:
    world: dict[str, Any] = {}
    app = _one_write_app(world, reconcilable=False, fail_first="interrupt")
    with pytest.raises(KeyboardInterrupt):
        app.runner(backend.store).start("charge 5", app.principal, run_id="run-1")
    report = recover(backend.store, lambda: app.runner(backend.store))
    assert report.waiting_for_human == ["run-1"]
    assert report.recovered == {"run-1": RunStatus.AWAITING_RECONCILIATION.value}
    [effect] = backend.store.list_effects()
    assert effect.status.value == "unknown"
    assert len(world["attempts"]) == 1  # never a silent retry
    resolve_effect(
        backend.store,
        effect.operation_key,
        committed=outcome == "committed",
        result={"charged": 5} if outcome == "committed" else None,
        actor="ops-1",
        now=time.time(),
    )
    again = recover(backend.store, lambda: app.runner(backend.store))
    assert again.recovered == {"run-1": "completed"}
    assert len(world["attempts"]) == (1 if outcome == "committed" else 2)
    with pytest.raises(StoreError, match="nothing to resolve"):
        resolve_effect(
            backend.store, effect.operation_key, committed=True, actor="ops-1", now=time.time()
        )
    assert backend.store.verify_audit().intact


def test_recovering_the_same_run_twice_at_once_admits_one(backend: Backend) -> None:
    if backend.kind == "memory":
        pytest.skip("needs two connections to one store")
    world: dict[str, Any] = {}
    app = _one_write_app(world, reconcilable=True, fail_first="interrupt")
    with pytest.raises(KeyboardInterrupt):
        app.runner(backend.store).start("charge 5", app.principal, run_id="run-1")
    stores = [backend.open(), backend.open()]
    reports: list[Any] = [None, None]
    barrier = threading.Barrier(2)

    def go(i: int) -> None:
        barrier.wait()
        reports[i] = recover(stores[i], lambda: app.runner(stores[i]))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recovered = [r for r in reports if r.recovered]
    assert len(recovered) == 1, [r.to_dict() for r in reports]
    assert len(world["attempts"]) == 1
    assert backend.store.verify_audit().intact
