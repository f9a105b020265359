"""Gate.ask_if_needed: frameworks that ask before they call learn the gate's ask (and the
request is recorded, once) without anything running or being written otherwise."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tether.core.principal import Principal
from tether.errors import ApprovalRequired
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.tools.registry import Registry, Risk


def test_it_records_an_ask_once_and_writes_nothing_for_any_other_verdict(
    backend: Backend,
) -> None:
    ran: list[str] = []
    registry = Registry()

    @registry.tool(risk=Risk.WRITE)
    def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        ran.append(ticket_id)
        return "closed"

    @registry.tool(risk=Risk.READ)
    def read_ticket(ticket_id: str) -> str:
        """Read a ticket."""
        ran.append("read")
        return "open"

    gate = Gate(registry, Policy(version="p1", approvers=frozenset({"reviewer"})), backend.store)
    run_id = gate.start_run(Principal(subject="agent", tenant="acme"))
    write = ToolCall(call_id="c1", tool="close_ticket", arguments={"ticket_id": "T-1"})
    read = ToolCall(call_id="c2", tool="read_ticket", arguments={"ticket_id": "T-1"})
    entries = len(list(backend.store.audit_entries()))

    assert gate.ask_if_needed(run_id, read) is None
    assert len(list(backend.store.audit_entries())) == entries  # allow: nothing written

    asked = gate.ask_if_needed(run_id, write)
    assert asked is not None
    again = gate.ask_if_needed(run_id, write)
    assert again is not None and again.approval_id == asked.approval_id  # the same request
    assert [a.approval_id for a in backend.store.list_approvals(run_id=run_id)] == [
        asked.approval_id
    ]
    with pytest.raises(ApprovalRequired):
        gate.call(run_id, write)  # the call itself agrees, and waits on the same request

    gate.approve(asked.approval_id, "reviewer")
    assert gate.ask_if_needed(run_id, write) is None  # a grant to use: call acts on it
    assert gate.call(run_id, write).result == "closed"
    assert ran == ["T-1"]
    assert backend.store.verify_audit().intact
