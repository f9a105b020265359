"""Values JSON or the database cannot hold — an integer of more than 4,300 digits, a lone
surrogate — are refused as arguments before anything is written, and as a tool's result they
are recorded as a committed effect with a note, never left ``dispatched`` (the tool ran: its
outcome must not be lost). On every store."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.conftest import Backend
from tether.core.ledger import EffectStatus
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.errors import Denied, InvalidArguments
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.tools.registry import Registry, Risk


def huge() -> int:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return int("9" * 5000)
    finally:
        sys.set_int_max_str_digits(old)


def gate_on(backend: Backend, ran: list[str]) -> tuple[Gate, str]:
    registry = Registry()
    returns: dict[str, Any] = {"surrogate": "a\ud800b", "huge": huge()}

    @registry.tool(risk=Risk.READ)
    def echo(x: Any = None) -> Any:
        """Echo."""
        ran.append("echo")
        return x

    @registry.tool(risk=Risk.READ)
    def answer(kind: str) -> Any:
        """Answer with a value that cannot be stored."""
        ran.append(kind)
        return returns[kind]

    gate = Gate(registry, Policy(version="p1"), backend.store)
    return gate, gate.start_run(Principal(subject="u", tenant="t"))


@pytest.mark.parametrize(
    "arguments",
    [{"x": huge()}, {"x": "a\ud800"}, {"x": {"a\udc00": 1}}],
    ids=["huge integer", "lone surrogate", "surrogate key"],
)
def test_unstorable_arguments_are_refused_before_anything_is_written(
    backend: Backend, arguments: dict[str, Any]
) -> None:
    ran: list[str] = []
    gate, run_id = gate_on(backend, ran)
    with pytest.raises(InvalidArguments):
        gate.call(run_id, ToolCall(call_id="c1", tool="echo", arguments=arguments))
    assert ran == []
    assert backend.store.list_effects(run_id) == []
    assert backend.store.verify_audit().intact


@pytest.mark.parametrize("kind", ["surrogate", "huge"])
def test_an_unstorable_result_is_recorded_with_a_note_never_lost(
    backend: Backend, kind: str
) -> None:
    ran: list[str] = []
    gate, run_id = gate_on(backend, ran)
    call = ToolCall(call_id="c1", tool="answer", arguments={"kind": kind})
    outcome = gate.call(run_id, call)
    assert outcome.status is EffectStatus.COMMITTED
    assert any("could not be recorded" in flag for flag in outcome.flags), outcome.flags
    (effect,) = backend.store.list_effects(run_id)
    assert effect.status is EffectStatus.COMMITTED
    assert gate.call(run_id, call).replayed  # asked again: the ledger answers, no second run
    assert ran == [kind]
    assert backend.store.verify_audit().intact


@pytest.mark.parametrize("limit", [10, None], ids=["refused by the schema", "denied"])
def test_a_huge_argument_is_recorded_capped_with_its_digest(
    backend: Backend, limit: int | None
) -> None:
    from tether.policy.constraints import ToolRule
    from tether.tools.registry import Manifest

    schema: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "string"}}}
    if limit is not None:
        schema["properties"]["x"]["maxLength"] = limit
    registry = Registry()
    registry.add(Manifest(name="put", parameters=schema, risk=Risk.READ), lambda **_: "ok")
    rules = {} if limit is not None else {"put": ToolRule(verdict=Verdict.DENY)}
    gate = Gate(registry, Policy(version="p1", tools=rules), backend.store)
    run_id = gate.start_run(Principal(subject="u", tenant="t"))
    big = "x" * 10_000_000
    with pytest.raises((Denied, InvalidArguments)) as refused:
        gate.call(run_id, ToolCall(call_id="c1", tool="put", arguments={"x": big}))
    assert len(str(refused.value)) < 2_000  # what the model reads is capped too
    entries = list(backend.store.audit_entries())
    assert max(len(e.body) for e in entries) < 70_000, [len(e.body) for e in entries]
    assert backend.store.verify_audit().intact
