"""A tenant named anywhere in a call's arguments — beside the declared tenant path, or inside
a free-form object — must be the principal's: checked at call time (a free-form object's keys
are only known when it arrives), on every store."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Backend
from tether.core.principal import Principal
from tether.errors import PolicyDenied
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.tools.registry import Manifest, Registry, Risk

ACME = Principal(subject="agent-1", tenant="acme")
OBJECT: dict[str, Any] = {"type": "object"}


def gate_on(backend: Backend, ran: list[dict[str, Any]]) -> tuple[Gate, str]:
    registry = Registry()

    def record(**arguments: Any) -> str:
        ran.append(arguments)
        return "ok"

    registry.add(
        Manifest(
            name="copy",
            parameters={
                "type": "object",
                "properties": {"tenant": {"type": "string"}, "target_tenant": {"type": "string"}},
            },
            tenant_path="tenant",
            risk=Risk.READ,
        ),
        record,
    )
    registry.add(
        Manifest(
            name="search",
            parameters={"type": "object", "properties": {"query": OBJECT}},
            risk=Risk.READ,
        ),
        record,
    )
    registry.add(
        Manifest(
            name="list_tenants",
            parameters={"type": "object", "properties": {"tenant": {"type": "string"}}},
            tenant_scoped=False,
            risk=Risk.READ,
        ),
        record,
    )
    gate = Gate(registry, Policy(version="p1"), backend.store)
    return gate, gate.start_run(ACME)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("copy", {"target_tenant": "globex"}),
        ("search", {"query": {"tenant": "globex"}}),
        ("search", {"query": {"filters": [{"org_id": "globex"}]}}),
    ],
    ids=["beside the declared path", "in a free-form object", "deep in a list"],
)
def test_another_tenant_anywhere_in_the_arguments_is_denied(
    backend: Backend, tool: str, arguments: dict[str, Any]
) -> None:
    ran: list[dict[str, Any]] = []
    gate, run_id = gate_on(backend, ran)
    with pytest.raises(PolicyDenied, match="names a tenant other than the principal's"):
        gate.call(run_id, ToolCall(call_id="c1", tool=tool, arguments=arguments))
    assert ran == []
    assert backend.store.verify_audit().intact


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("copy", {"target_tenant": "acme"}),
        ("search", {"query": {"tenant": "acme", "text": "invoices"}}),
        ("list_tenants", {"tenant": "globex"}),  # declared not tenant-scoped: its data
    ],
    ids=["the principal's own", "own in a free-form object", "not tenant-scoped"],
)
def test_the_principals_own_tenant_and_unscoped_tools_run(
    backend: Backend, tool: str, arguments: dict[str, Any]
) -> None:
    ran: list[dict[str, Any]] = []
    gate, run_id = gate_on(backend, ran)
    gate.call(run_id, ToolCall(call_id="c1", tool=tool, arguments=arguments))
    assert len(ran) == 1
