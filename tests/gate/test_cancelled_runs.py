"""A cancelled run never dispatches again, and a finished one takes no new call: the gate
refuses them, on every store, and the refusal is audited with the log still intact."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tether.core.approvals import ApprovalStatus
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.errors import ApprovalRequired, RunStateError
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.constraints import DEFAULT_TIERS
from tether.policy.rules import Policy
from tether.runs.cancel import cancel_run, complete_run
from tether.tools.registry import Registry, Risk


def test_the_gate_refuses_every_call_of_a_cancelled_run(backend: Backend) -> None:
    sent: list[str] = []
    registry = Registry()

    @registry.tool(risk=Risk.WRITE)
    def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        sent.append(ticket_id)
        return "closed"

    @registry.tool(risk=Risk.READ)
    def read_ticket(ticket_id: str) -> str:
        """Read a ticket."""
        sent.append("read " + ticket_id)
        return "open"

    gate = Gate(registry, Policy(version="p1", approvers=frozenset({"reviewer"})), backend.store)
    run_id = gate.start_run(Principal(subject="agent", tenant="acme"))
    write = ToolCall(call_id="c1", tool="close_ticket", arguments={"ticket_id": "T-1"})
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(run_id, write)

    cancel_run(backend.store, run_id, actor="operator", reason="wrong customer")
    closed = backend.store.list_approvals(run_id=run_id)
    assert [a.status for a in closed] == [ApprovalStatus.EXPIRED]
    with pytest.raises(Exception, match="approv"):  # the closed request can no longer be decided
        gate.approve(asked.value.approval_id, "reviewer")

    # Another connection, as a worker in another process would have.
    other = Gate(registry, gate.policy, backend.open())
    for call in (write, ToolCall(call_id="c2", tool="read_ticket", arguments={"ticket_id": "T-1"})):
        with pytest.raises(RunStateError, match="cancelled"):
            other.call(run_id, call)
    assert sent == []
    assert backend.store.list_effects(run_id) == []
    report = backend.store.verify_audit()
    assert report.intact, report
    kinds = [e.kind for e in backend.store.audit_entries() if e.run_id == run_id]
    assert kinds.count("call_refused") == 2
    assert "run_cancelled" in kinds


def test_a_run_its_own_code_drove_is_completed_only_once_nothing_waits(backend: Backend) -> None:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE)
    def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        return "closed"

    gate = Gate(registry, Policy(version="p1", approvers=frozenset({"reviewer"})), backend.store)
    run_id = gate.start_run(Principal(subject="agent", tenant="acme"))
    write = ToolCall(call_id="c1", tool="close_ticket", arguments={"ticket_id": "T-1"})
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(run_id, write)
    with pytest.raises(RunStateError, match="waits on apr-"):  # completing would hide it
        complete_run(backend.store, run_id, actor="agent-code")
    gate.approve(asked.value.approval_id, "reviewer")
    gate.call(run_id, write)
    done = complete_run(backend.store, run_id, actor="agent-code", final="closed T-1")
    assert done.status == "completed"
    with pytest.raises(RunStateError, match="already completed"):
        complete_run(backend.store, run_id, actor="agent-code")
    assert backend.store.verify_audit().intact


def test_a_completed_run_replays_its_calls_runs_its_undos_and_refuses_new_ones(
    backend: Backend,
) -> None:
    sent: list[str] = []
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, compensation="reopen_ticket")
    def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        sent.append("close " + ticket_id)
        return "closed"

    @registry.tool(risk=Risk.WRITE)
    def reopen_ticket(ticket_id: str) -> str:
        """Reopen a ticket."""
        sent.append("reopen " + ticket_id)
        return "reopened"

    policy = Policy(version="p1", tiers={**DEFAULT_TIERS, Risk.WRITE: Verdict.ALLOW})
    gate = Gate(registry, policy, backend.store)
    run_id = gate.start_run(Principal(subject="agent", tenant="acme"))
    first = ToolCall(call_id="c1", tool="close_ticket", arguments={"ticket_id": "T-1"})
    gate.call(run_id, first)
    complete_run(backend.store, run_id, actor="agent-code", final="closed T-1")

    other = Gate(registry, gate.policy, backend.open())  # as another process would see it
    assert other.call(run_id, first).replayed  # what it did is read back, not run again
    fresh = ToolCall(call_id="c2", tool="close_ticket", arguments={"ticket_id": "T-2"})
    with pytest.raises(RunStateError, match="completed; it takes no new calls"):
        other.call(run_id, fresh)
    undo = ToolCall(call_id="undo-c1", tool="reopen_ticket", arguments={"ticket_id": "T-1"})
    assert not other.call(run_id, undo).replayed  # a rollback still compensates
    assert sent == ["close T-1", "reopen T-1"]
    assert [e.call_id for e in backend.store.list_effects(run_id)] == ["c1", "undo-c1"]
    report = backend.store.verify_audit()
    assert report.intact, report
    kinds = [e.kind for e in backend.store.audit_entries() if e.run_id == run_id]
    assert kinds.count("call_refused") == 1
