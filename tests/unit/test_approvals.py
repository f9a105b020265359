"""A call binding's digests are the digests of what it binds, however they are computed."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tether.core.approvals import CallBinding
from tether.core.digest import canonical_json, digest


def _binding(**fields: Any) -> CallBinding:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "call_id": "call-1",
        "tool": "close_ticket",
        "tool_version": "1",
        "tool_schema_digest": "sha256:abc",
        "arguments": {"ticket_id": "T-1"},
        "tenant": "acme",
        "actor": "user-1",
    }
    return CallBinding(**{**base, **fields})


def _expected_call_digest(b: CallBinding) -> str:
    return digest(
        {
            "run_id": b.run_id,
            "call_id": b.call_id,
            "tool": b.tool,
            "tool_version": b.tool_version,
            "tool_schema_digest": b.tool_schema_digest,
            "argument_digest": digest(dict(b.arguments)),
            "tenant": b.tenant,
            "actor": b.actor,
        }
    )


@given(
    run_id=st.text(),
    call_id=st.text(),
    tenant=st.text(),
    actor=st.text(),
    value=st.text() | st.integers() | st.none(),
)
def test_digests_are_those_of_the_bound_values(
    run_id: str, call_id: str, tenant: str, actor: str, value: Any
) -> None:
    b = _binding(run_id=run_id, call_id=call_id, tenant=tenant, actor=actor, arguments={"v": value})
    assert b.arguments_json == canonical_json({"v": value})
    assert b.argument_digest == digest({"v": value})
    assert b.call_digest == _expected_call_digest(b)


class Tenant(StrEnum):
    ACME = "acme"


def test_a_string_subclass_gives_the_same_digest() -> None:
    assert _binding(tenant=Tenant.ACME).call_digest == _binding(tenant="acme").call_digest


def test_every_bound_field_changes_the_call_digest() -> None:
    base = _binding()
    changed = [
        _binding(run_id="run-2"),
        _binding(call_id="call-2"),
        _binding(tool="other"),
        _binding(tool_version="2"),
        _binding(tool_schema_digest="sha256:def"),
        _binding(arguments={"ticket_id": "T-2"}),
        _binding(tenant="globex"),
        _binding(actor="user-2"),
    ]
    assert len({base.call_digest, *(b.call_digest for b in changed)}) == 9
    assert base == _binding()  # equality is the bound fields' (digests follow from them)


def test_a_field_that_is_not_a_string_still_gets_its_digest() -> None:
    b = _binding(tool_version=2)
    assert b.call_digest == _expected_call_digest(b)
