"""A governed call's span and metrics, read back from the OpenTelemetry SDK's in-memory
exporter and reader: the GenAI tool-execution attributes, tether's facts, the events of each
verdict, and no sensitive value anywhere."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from tests.telemetry.conftest import Recorded, dumped
from tether import Gate, Policy, Principal, Registry, Risk, telemetry
from tether.core.budget import Budget
from tether.core.verdicts import Verdict
from tether.errors import ApprovalRequired, Denied, OutcomeUnknown, ToolFailed
from tether.gate.plan import ToolCall
from tether.identity import add_identity, authenticate
from tether.store import SQLiteStore

PRINCIPAL = Principal(subject="agent-1", tenant="acme", scopes=frozenset())
SECRET = "hunter2-do-not-show"
CREDENTIAL = "tth_" + "a1B2c3D4e5F6g7H8i9J0kLmN"  # looks like one of tether's own


def build(tmp_path: Path) -> tuple[Gate, SQLiteStore]:
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "state": "shipped"}

    @registry.tool(risk=Risk.READ, sensitive_fields=["pin"])
    def login(user: str, password: str, pin: str, note: str) -> dict[str, Any]:
        """Sign in somewhere (its result echoes what it was given)."""
        return {"user": user, "echo": f"{password} {pin} {note}", "token": CREDENTIAL}

    @registry.tool(risk=Risk.READ)
    def flaky(order_id: str) -> str:
        """Always fails."""
        raise RuntimeError("the upstream said no")

    @registry.tool(risk=Risk.READ, timeout_s=0.05)
    def hang(order_id: str) -> str:
        """Outlives its timeout: whether it acted is unknown."""
        time.sleep(0.2)
        return "late"

    @registry.tool(risk=Risk.WRITE)
    def refund(order_id: str, amount: int) -> dict[str, Any]:
        """Refund an order."""
        return {"refunded": amount}

    @registry.tool(risk=Risk.ADMIN)
    def wipe(order_id: str) -> str:
        """Wipe an order."""
        return "wiped"

    tiers = {Risk.READ: Verdict.ALLOW, Risk.WRITE: Verdict.ASK, Risk.ADMIN: Verdict.DENY}
    policy = Policy(version="shop-1", approvers=frozenset({"finance-1"}), tiers=tiers)
    store = SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}")
    return Gate(registry, policy, store), store


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    built, store = build(tmp_path)
    yield built
    store.close()


def events(span: Any) -> list[str]:
    return [e.name for e in span.events]


def test_an_allowed_call_is_an_execute_tool_span_with_tethers_facts(
    otel: Recorded, gate: Gate
) -> None:
    run = gate.start_run(PRINCIPAL, budget=Budget(max_steps=10, max_cost=5))
    outcome = gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
    span = otel.span("execute_tool lookup")
    a = dict(span.attributes or {})
    assert span.kind is SpanKind.INTERNAL
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.name"] == "lookup"
    assert a["gen_ai.tool.call.id"] == "c1"
    assert a["gen_ai.tool.type"] == "function"
    assert a["gen_ai.conversation.id"] == run
    assert a["gen_ai.tool.description"] == "Look an order up."
    assert a["tether.verdict"] == "allow"
    assert a["tether.policy.version"] == "shop-1"
    assert a["tether.risk"] == "read"
    assert a["tether.operation_key"] == outcome.operation_key
    assert a["tether.effect.status"] == "committed"
    assert a["tether.budget.remaining"] == 5
    assert a["tether.budget.steps_remaining"] == 9
    assert a["tether.outcome"] == "ran"
    assert "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a
    assert events(span) == ["dispatched", "settled"]
    assert span.status.status_code is StatusCode.UNSET


def test_a_replayed_call_says_so(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"})
    gate.call(run, call)
    gate.call(run, call)
    first, again = otel.spans("execute_tool lookup")
    assert (first.attributes or {})["tether.effect.status"] == "committed"
    assert (again.attributes or {})["tether.effect.status"] == "replayed"
    assert (again.attributes or {})["tether.verdict"] == "replay"
    assert "dispatched" not in events(again)


def test_a_denied_call_has_a_denied_event_and_the_reason(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    with pytest.raises(Denied):
        gate.call(run, ToolCall(call_id="c1", tool="wipe", arguments={"order_id": "A"}))
    a = dict(otel.span("execute_tool wipe").attributes or {})
    assert a["tether.verdict"] == "deny"
    assert a["tether.refusal"] == "PolicyDenied"
    assert a["tether.outcome"] == "refused"
    reasons = a["tether.policy.reasons"]
    assert isinstance(reasons, tuple) and any("admin" in str(r) for r in reasons)
    assert events(otel.span("execute_tool wipe")) == ["denied"]


def test_a_failing_tool_is_an_error_span_with_its_effect_failed(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    with pytest.raises(ToolFailed):
        gate.call(run, ToolCall(call_id="c1", tool="flaky", arguments={"order_id": "A"}))
    span = otel.span("execute_tool flaky")
    a = dict(span.attributes or {})
    assert a["tether.effect.status"] == "failed"
    assert a["error.type"] == "ToolFailed"
    assert span.status.status_code is StatusCode.ERROR
    assert events(span) == ["dispatched", "settled"]


def test_asked_then_granted_shows_the_approval_and_its_wait(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool="refund", arguments={"order_id": "A", "amount": 3})
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(run, call)
    approval_id = asked.value.approval_id
    _, token = add_identity(gate.store, "finance-1", "approver", now=time.time(), tenants=["acme"])
    gate.approve(approval_id, authenticate(gate.store, token, "approver"))
    gate.call(run, call)

    waiting, ran = otel.spans("execute_tool refund")
    w = dict(waiting.attributes or {})
    assert w["tether.verdict"] == "ask" and w["tether.approval.id"] == approval_id
    assert w["tether.outcome"] == "waiting" and w["tether.risk"] == "write"
    assert events(waiting) == ["asked"]
    r = dict(ran.attributes or {})
    assert r["tether.verdict"] == "allow_after_approval"
    assert r["tether.approval.id"] == approval_id
    assert r["tether.approval.approver"] == "finance-1"
    assert events(ran) == ["granted", "dispatched", "settled"]

    wait = otel.span("tether.approval refund")
    a = dict(wait.attributes or {})
    assert a["tether.approval.decision"] == "approved"
    assert a["tether.approval.approver"] == "finance-1"
    approval = gate.store.list_approvals()[0]
    assert wait.start_time == int(approval.created_at * 1e9)
    assert wait.end_time == int((approval.decided_at or 0) * 1e9)
    # One derived context ties the three together: the wait span's trace, and the links of
    # the call that asked and the call that ran under the grant.
    derived = telemetry.approval_context(approval_id)
    assert wait.context is not None and wait.context.trace_id == derived.trace_id
    for span in (waiting, ran):
        assert [link.context.trace_id for link in span.links] == [derived.trace_id]
    assert "tth_" not in "".join(dumped(s) for s in otel.spans())


# The pin as a value of its own: a span's nanosecond timestamps hold any four digits now and
# then ("1796326110943212540"), which is no leak.
PIN = r"(?<!\d)4321(?!\d)"


def test_no_argument_or_result_value_enters_a_span_unless_the_tool_is_opted_in(
    otel: Recorded, gate: Gate
) -> None:
    run = gate.start_run(PRINCIPAL)
    arguments = {"user": "ann", "password": SECRET, "pin": "4321", "note": f"key {CREDENTIAL}"}
    gate.call(run, ToolCall(call_id="c1", tool="login", arguments=arguments))
    plain = dumped(otel.span("execute_tool login"))
    assert "ann" not in plain and SECRET not in plain and not re.search(PIN, plain)
    assert "tth_" not in plain

    telemetry.capture(["login"])
    try:
        gate.call(run, ToolCall(call_id="c2", tool="login", arguments=arguments))
    finally:
        telemetry.capture([])
    opted = [s for s in otel.spans("execute_tool login") if s is not None][-1]
    a = dict(opted.attributes or {})
    assert '"user":"ann"' in str(a["gen_ai.tool.call.arguments"])  # opted in: shown, masked
    assert "[REDACTED]" in str(a["gen_ai.tool.call.result"])
    everything = "".join(dumped(s) for s in otel.spans()) + otel.metrics_json()
    for value in (SECRET, CREDENTIAL, "tth_"):
        assert value not in everything, value
    assert not re.search(PIN, everything)


def test_metrics_count_calls_time_the_gate_apart_and_follow_approvals(
    otel: Recorded, gate: Gate
) -> None:
    run = gate.start_run(PRINCIPAL)
    gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
    with pytest.raises(Denied):
        gate.call(run, ToolCall(call_id="c2", tool="wipe", arguments={"order_id": "A"}))
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(
            run, ToolCall(call_id="c3", tool="refund", arguments={"order_id": "A", "amount": 1})
        )
    gate.deny(asked.value.approval_id, "finance-1", reason="no")
    m = otel.metrics()
    calls = {
        (p["gen_ai.tool.name"], p["tether.verdict"], p["tether.outcome"]): v
        for p, v in m["tether.calls"]
    }
    assert calls == {
        ("lookup", "allow", "ran"): 1,
        ("wipe", "deny", "refused"): 1,
        ("refund", "ask", "waiting"): 1,
    }
    durations = {p["gen_ai.tool.name"]: v for p, v in m["tether.gate.duration"]}
    assert durations["lookup"][0] == 1 and 0 < durations["lookup"][1] < 1.0
    assert m["tether.approvals.requested"] == [({"gen_ai.tool.name": "refund"}, 1)]
    decided = m["tether.approvals.decided"]
    assert decided == [({"gen_ai.tool.name": "refund", "tether.approval.decision": "denied"}, 1)]
    ((_, (count, _total)),) = m["tether.approvals.time_to_decision"]
    assert count == 1
    assert "tether.approval refund" in [s.name for s in otel.spans()]


def test_the_gate_time_excludes_the_tools(otel: Recorded, tmp_path: Path) -> None:
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def slow(n: int) -> int:
        time.sleep(0.2)
        return n

    with SQLiteStore(f"sqlite:///{tmp_path / 'slow.db'}") as store:
        gate = Gate(registry, Policy(version="p"), store)
        gate.call(
            gate.start_run(PRINCIPAL), ToolCall(call_id="c1", tool="slow", arguments={"n": 1})
        )
    span = otel.span("execute_tool slow")
    assert (span.end_time or 0) - (span.start_time or 0) >= 0.2e9  # the span covers the tool
    ((_, (count, seconds)),) = otel.metrics()["tether.gate.duration"]
    assert count == 1 and seconds < 0.1  # the gate's own time does not


def test_with_no_provider_nothing_is_recorded_and_the_gate_is_unchanged(
    tmp_path: Path,
) -> None:
    telemetry.use()  # the global providers: none is configured in the test process
    assert not telemetry.active()
    gate, store = build(tmp_path)
    try:
        run = gate.start_run(PRINCIPAL)
        out = gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
        assert out.status.value == "committed"
    finally:
        store.close()


def test_a_timed_out_call_is_unsettled_with_its_effect_unknown(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    with pytest.raises(OutcomeUnknown):
        gate.call(run, ToolCall(call_id="c1", tool="hang", arguments={"order_id": "A"}))
    span = otel.span("execute_tool hang")
    a = dict(span.attributes or {})
    assert a["tether.effect.status"] == "unknown" and a["tether.outcome"] == "unsettled"
    assert span.status.status_code is StatusCode.ERROR


def test_acall_is_traced_the_same_and_the_tools_own_spans_nest_under_it(
    otel: Recorded, tmp_path: Path
) -> None:
    import asyncio

    registry = Registry()
    inner = otel.provider.get_tracer("tool")

    @registry.tool(risk=Risk.READ)
    async def fetch(url: str) -> str:
        """Fetch a page."""
        with inner.start_as_current_span("GET page"):
            await asyncio.sleep(0)
        return "page"

    with SQLiteStore(f"sqlite:///{tmp_path / 'async.db'}") as store:
        gate = Gate(registry, Policy(version="p"), store)
        run = gate.start_run(PRINCIPAL)
        call = ToolCall(call_id="a1", tool="fetch", arguments={"url": "https://example.com"})
        asyncio.run(gate.acall(run, call))
    span = otel.span("execute_tool fetch")
    child = otel.span("GET page")
    assert child.parent is not None and span.context is not None
    assert child.parent.span_id == span.context.span_id
    assert (span.attributes or {})["tether.effect.status"] == "committed"
    assert "example.com" not in dumped(span)


WITHOUT_OTEL = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from tether import Gate, Policy, Principal, Registry, telemetry
from tether.gate.plan import ToolCall
from tether.store import MemoryStore
registry = Registry()
@registry.tool
def lookup(order_id: str) -> str:
    return order_id
gate = Gate(registry, Policy(version="p"), MemoryStore())
run = gate.start_run(Principal(subject="a", tenant="t", scopes=frozenset()))
out = gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
print(out.status.value)
print(telemetry.active(), "opentelemetry" in sys.modules)
"""


def test_without_the_package_the_gate_runs_and_nothing_is_recorded() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["committed", "False", "False"]


def test_an_edit_is_a_decision_its_wait_a_span(otel: Recorded, gate: Gate) -> None:
    run = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool="refund", arguments={"order_id": "A", "amount": 9})
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(run, call)
    edited = gate.edit(asked.value.approval_id, "finance-1", {"order_id": "A", "amount": 5})
    wait = dict(otel.span("tether.approval refund").attributes or {})
    assert wait["tether.approval.decision"] == "edited"
    assert wait["tether.approval.id"] == asked.value.approval_id
    assert wait["tether.approval.approver"] == "finance-1"
    decided = otel.metrics()["tether.approvals.decided"]
    assert decided == [({"gen_ai.tool.name": "refund", "tether.approval.decision": "edited"}, 1)]
    assert edited.replaces == asked.value.approval_id
