"""Readers and intent through the real gate, on every store: a private value goes only to
its readers, a write after untrusted output must be one the request asks for (or the
application's allow-list names), the same call twice asks, and links are followed within a
budget — and a gate opened later on the same store (another process) decides the same."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Backend
from tether import Gate, Policy, Principal, Registry, ToolCall
from tether.core.verdicts import Verdict
from tether.errors import ApprovalRequired, ConfigurationError
from tether.policy.flow import FlowPolicy, FlowRule, IntentRule
from tether.policy.provenance import Check

PRINCIPAL = Principal(subject="agent", tenant="t1")
POLICY = Policy(
    version="intent-1",
    approvers=frozenset({"alice"}),
    flow=FlowPolicy(
        tools={
            "send_email": FlowRule(
                trusted=Verdict.ALLOW,
                arguments={"body": Check.LINKS},
                audience=("to",),
                intent=("email", "tell", "reply"),
            ),
            "fetch": FlowRule(
                egress=("url",), default=Check.ANY, follow_links=frozenset({"example.org"})
            ),
        },
        owner=frozenset({"me@corp.com"}),
        trusted_values=("me@corp.com",),
        intent=IntentRule(),
        links_budget=1,
    ),
)
RESET = {"sender": "it@corp.com", "to": ["me@corp.com"], "body": "Your code is 739201."}
NOTES = {"sender": "bob@corp.com", "to": ["me@corp.com"], "body": "Budget is 4100.50."}


def registry(sent: list[dict[str, Any]]) -> Registry:
    reg = Registry()

    @reg.tool(risk="read", tenant_scoped=False, readers_from=("sender", "to"))
    def read_inbox() -> list[dict[str, Any]]:
        """The inbox: private mail, readable by each message's sender and recipients."""
        return [RESET, NOTES]

    @reg.tool(risk="read", tenant_scoped=False)
    def fetch(url: str) -> str:
        """Fetch a web page."""
        return "see https://example.org/a and https://example.org/b"

    @reg.tool(risk="write", tenant_scoped=False)
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append({"to": to, "body": body})
        return "sent"

    return reg


def gate_on(backend: Backend, sent: list[dict[str, Any]]) -> Gate:
    return Gate(registry(sent), POLICY, backend.store)


def call(gate: Gate, run_id: str, n: int, tool: str, **arguments: Any) -> Any:
    return gate.call(run_id, ToolCall(call_id=f"c{n}", tool=tool, arguments=arguments))


def asked(gate: Gate, run_id: str, n: int, tool: str, **arguments: Any) -> tuple[str, ...]:
    with pytest.raises(ApprovalRequired):
        call(gate, run_id, n, tool, **arguments)
    approval = gate.approval_for(run_id, f"c{n}")
    assert approval is not None
    return tuple(approval.public_dict()["reasons"])


def test_a_private_value_goes_only_to_its_readers_even_after_a_restart(
    backend: Backend,
) -> None:
    sent: list[dict[str, Any]] = []
    gate = gate_on(backend, sent)
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, "reply to bob@corp.com about the budget")
    call(gate, run_id, 1, "read_inbox")
    call(gate, run_id, 2, "send_email", to="bob@corp.com", body="Agreed: 4100.50")
    assert sent == [{"to": "bob@corp.com", "body": "Agreed: 4100.50"}]
    # A gate opened later rebuilds the index from the store and still knows the readers.
    later = gate_on(backend, sent)
    reasons = asked(later, run_id, 3, "send_email", to="bob@corp.com", body="code 739201")
    assert any(r.startswith("readers:") and "'739201'" in r for r in reasons)
    assert len(sent) == 1


def test_a_write_the_request_does_not_ask_for_asks_and_so_does_a_repeat(
    backend: Backend,
) -> None:
    sent: list[dict[str, Any]] = []
    gate = gate_on(backend, sent)
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, "summarise my inbox")
    call(gate, run_id, 1, "read_inbox")
    reasons = asked(gate, run_id, 2, "send_email", to="me@corp.com", body="summary")
    assert any("does not ask for `send_email`" in r for r in reasons)

    other = gate.start_run(PRINCIPAL)
    gate.record_input(other, "email me@corp.com a summary of my inbox")
    call(gate, other, 1, "read_inbox")
    call(gate, other, 2, "send_email", to="me@corp.com", body="summary")
    later = gate_on(backend, sent)  # the repeat is noticed from the ledger too
    reasons = asked(later, other, 3, "send_email", to="me@corp.com", body="summary")
    assert any("the same call already ran in this run (call c2)" in r for r in reasons)


def test_an_allow_list_decides_the_tools_of_a_request(backend: Backend) -> None:
    sent: list[dict[str, Any]] = []
    gate = gate_on(backend, sent)
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, "email me@corp.com what is new", tools=["read_inbox", "fetch"])
    call(gate, run_id, 1, "read_inbox")
    reasons = asked(gate, run_id, 2, "send_email", to="me@corp.com", body="news")
    assert any("does not ask for `send_email`" in r for r in reasons)
    assert asked(gate_on(backend, sent), run_id, 3, "send_email", to="me@corp.com", body="x")


def test_links_are_followed_on_listed_hosts_within_the_budget(backend: Backend) -> None:
    gate = gate_on(backend, [])
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, "what is on https://example.com/start")
    call(gate, run_id, 1, "fetch", url="https://example.com/start")
    call(gate, run_id, 2, "fetch", url="example.org/a")  # followed: scheme-less, listed host
    reasons = asked(gate, run_id, 3, "fetch", url="https://example.org/b")  # budget of 1 used
    assert any("egress: argument 'url'" in r for r in reasons)


def test_record_input_keeps_its_allow_list_apart_from_the_text(backend: Backend) -> None:
    gate = gate_on(backend, [])
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(ConfigurationError, match="tools="):
        gate.record_input(run_id, "hello", source="allowed_tools")
    with pytest.raises(ConfigurationError, match="tool names"):
        gate.record_input(run_id, "hello", tools=[""])
