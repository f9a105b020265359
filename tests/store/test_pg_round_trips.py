"""PostgreSQL: the gate's approved call costs five round trips to the server (its two
transactions pipelined: BEGIN goes out with the first read, writes go out without waiting,
their row counts come back with the next read, COMMIT with the last), counted from libpq's
own protocol trace; and a write that loses inside a pipelined transaction still rolls the
whole transaction back, as it did when each statement waited for its answer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pg import schema_url
from tether import Gate, Policy, Principal, Registry, Risk, ToolCall
from tether.core.ledger import EffectStatus
from tether.errors import ApprovalRequired, InvalidTransition
from tether.store.postgres import PostgresStore, PostgresTx

pytestmark = pytest.mark.usefixtures("key_home")


@pytest.fixture
def key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("TETHER_AUDIT_KEY", raising=False)
    monkeypatch.delenv("TETHER_AUDIT_KEY_FILE", raising=False)
    return tmp_path / "config"


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    urls = schema_url()
    opened = PostgresStore(next(urls), max_connections=1)  # one connection: the one traced
    try:
        yield opened
    finally:
        opened.close()
        for _ in urls:  # drops the schema
            pass


def approved_gate(store: PostgresStore, n: int) -> tuple[Gate, str, list[ToolCall]]:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "status": "closed"}

    gate = Gate(registry, Policy(version="p-1", approvers=frozenset({"reviewer"})), store)
    principal = Principal(subject="user", tenant="acme", scopes=frozenset({"ticket:write"}))
    run_id = gate.start_run(principal, run_id="run-trips")
    calls = [
        ToolCall(call_id=f"c{i}", tool="close_ticket", arguments={"ticket_id": f"T-{i}"})
        for i in range(n)
    ]
    for call in calls:
        with pytest.raises(ApprovalRequired) as asked:
            gate.call(run_id, call)
        gate.approve(asked.value.approval_id, "reviewer")
    return gate, run_id, calls


def round_trips(trace: str) -> int:
    """Each turn from what the client sent (F) to what the server answered (B)."""
    trips, before = 0, ""
    for line in trace.splitlines():
        fields = line.split("\t")
        direction = fields[1] if len(fields) > 1 else ""
        trips += direction == "B" and before == "F"
        before = direction or before
    return trips


def test_an_approved_call_is_five_round_trips(store: PostgresStore, tmp_path: Path) -> None:
    gate, run_id, calls = approved_gate(store, 8)
    for call in calls[:6]:  # past psycopg's prepare threshold: statements are prepared
        gate.call(run_id, call)
    traced = tmp_path / "libpq.trace"
    with traced.open("w") as f:
        with store._pool.connection() as conn:
            conn.pgconn.trace(f.fileno())
        outcome = gate.call(run_id, calls[6])
        with store._pool.connection() as conn:
            conn.pgconn.untrace()
    assert outcome.status is EffectStatus.COMMITTED
    assert round_trips(traced.read_text()) == 5
    assert store.verify_audit().intact


def test_a_lost_write_in_a_pipelined_transaction_rolls_it_all_back(
    store: PostgresStore,
) -> None:
    gate, run_id, calls = approved_gate(store, 1)
    gate.call(run_id, calls[0])
    (effect,) = store.list_effects(run_id)
    entries = len(list(store.audit_entries()))
    with pytest.raises(InvalidTransition), store.transaction() as tx:
        # The effect is committed, not dispatched: this compare-and-swap loses, and is only
        # answered with the checks before the commit — after the entry below was sent.
        tx.update_effect(effect, EffectStatus.DISPATCHED)
        tx.append_audit("tool_effect_resolved", at=1.0, run_id=run_id, data={"x": 1})
    assert store.list_effects(run_id) == [effect]
    assert len(list(store.audit_entries())) == entries
    assert store.verify_audit().intact


def test_a_statement_the_server_refuses_rolls_back_and_leaves_the_pool_clean(
    store: PostgresStore,
) -> None:
    import psycopg

    gate, run_id, calls = approved_gate(store, 2)
    gate.call(run_id, calls[0])
    before = store.list_effects(run_id)
    with pytest.raises(psycopg.errors.DivisionByZero), store.transaction() as tx:
        (effect,) = before
        changed = replace(effect, external_reference="ref-never-committed")
        tx.update_effect(changed, EffectStatus.COMMITTED)  # sent, not yet answered
        assert isinstance(tx, PostgresTx)
        tx._one("SELECT 1 / 0", ())  # the server refuses: the pipeline aborts
    assert store.list_effects(run_id) == before
    # The one pooled connection came back usable: the next call runs and commits.
    assert gate.call(run_id, calls[1]).status is EffectStatus.COMMITTED
    assert store.verify_audit().intact
