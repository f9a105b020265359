"""A run's recorded inputs and its effects in order, on every store: what a provenance index
is rebuilt from when a run is resumed in another process."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tether import Gate, Policy, Principal, Registry, ToolCall

PRINCIPAL = Principal(subject="agent", tenant="t1")


def gate_on(backend: Backend) -> Gate:
    reg = Registry()

    @reg.tool(risk="read", tenant_scoped=False)
    def echo(text: str) -> str:
        """Say it back."""
        return text

    return Gate(reg, Policy(version="v1"), backend.store)


def test_inputs_keep_their_order_and_belong_to_their_run(backend: Backend) -> None:
    gate = gate_on(backend)
    a, b = gate.start_run(PRINCIPAL), gate.start_run(PRINCIPAL)
    gate.record_input(a, "first")
    gate.record_input(b, "other run")
    gate.record_input(a, "second", source="user")
    with backend.open().read() as tx:
        assert tx.inputs(a) == [("user", "first"), ("user", "second")]
        assert tx.inputs(b) == [("user", "other run")]
        assert tx.inputs("run-none") == []


def test_an_input_written_in_a_failed_transaction_is_not_kept(backend: Backend) -> None:
    gate = gate_on(backend)
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(RuntimeError), backend.store.transaction() as tx:
        tx.append_input(run_id, "user", "lost", 1.0)
        raise RuntimeError("roll back")
    gate.record_input(run_id, "kept")
    with backend.store.read() as tx:
        assert tx.inputs(run_id) == [("user", "kept")]


def test_a_taken_sequence_number_is_refused(backend: Backend) -> None:
    gate = gate_on(backend)
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, "first")
    with backend.store.transaction() as tx:
        assert tx._insert_input(run_id, 0, "user", "again", 2.0) is False
    with backend.store.read() as tx:
        assert tx.inputs(run_id) == [("user", "first")]


def test_run_effects_are_the_runs_own_oldest_first(backend: Backend) -> None:
    gate = gate_on(backend)
    a, b = gate.start_run(PRINCIPAL), gate.start_run(PRINCIPAL)
    for i in range(3):
        gate.call(a, ToolCall(call_id=f"c{i}", tool="echo", arguments={"text": str(i)}))
    gate.call(b, ToolCall(call_id="c0", tool="echo", arguments={"text": "b"}))
    with backend.open().read() as tx:
        effects = tx.run_effects(a)
    assert [e.call_id for e in effects] == ["c0", "c1", "c2"]
    assert [e.result_json for e in effects] == ['"0"', '"1"', '"2"']
