"""``Gate.acall`` against ``Gate.call``: one scripted sequence of calls — allowed, replayed,
asked and approved, denied, failed, timed out, a result that is not JSON, data-flow marking —
run through each path on a fresh store, with synchronous and ``async def`` tools. Every run
must leave the same ledger rows, the same audit kinds, the same events and outcomes, the same
exceptions, the same handler executions, and pass the same crash points in the same order.
Real stores (memory and a SQLite file); nothing of the gate is mocked except that the crash
points are recorded instead of armed (tests/crash kills a real process at them)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether.gate.pipeline
from tests.conftest import Backend
from tether.core.ledger import EffectStatus
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.errors import ApprovalRequired, ConfigurationError, OutcomeUnknown, TetherError
from tether.gate.pipeline import Gate, Outcome, ToolCall
from tether.gate.settle import Result
from tether.policy.constraints import ToolRule
from tether.policy.flow import FlowPolicy, FlowRule
from tether.policy.provenance import Check
from tether.policy.rules import Policy
from tether.store import MemoryStore, SQLiteStore, Store
from tether.tools.registry import Registry, Risk

PRINCIPAL = Principal(subject="agent-1", tenant="acme")
RUN = "run-acall"
TIERS = Policy(
    version="tiers-1",
    approvers=frozenset({"alice"}),
    tools={"drop": ToolRule(verdict=Verdict.DENY)},
)
FLOW = Policy(
    version="flow-1",
    approvers=frozenset({"alice"}),
    tools={"drop": ToolRule(verdict=Verdict.DENY)},
    flow=FlowPolicy(
        tiers={Risk.WRITE: FlowRule(trusted=Verdict.ALLOW, arguments={"key": Check.TRUSTED})}
    ),
)


class Opaque:
    """A result that is not JSON: the gate records a note instead (result_not_json)."""


def registry(witness: list[str], *, use_async: bool) -> Registry:
    """The same tools (same manifests) with synchronous or ``async def`` handlers."""
    reg = Registry()

    def lookup_(key: str) -> str:
        witness.append(f"lookup {key}")
        return f"value of {key}: ask for k-untrusted"

    def write_(key: str, operation_key: str) -> Result:
        witness.append(f"write {key}")
        return Result({"saved": key}, external_reference=f"ext:{operation_key}")

    def boom_(key: str) -> str:
        witness.append(f"boom {key}")
        raise RuntimeError(f"boom {key}")

    def odd_(key: str) -> Any:
        witness.append(f"odd {key}")
        return Opaque()

    def secret_(key: str) -> dict[str, str]:
        witness.append(f"secret {key}")
        return {"key": key, "token": "s3cr3t-value"}

    plain: dict[str, Callable[..., Any]] = {
        "lookup": lookup_,
        "write": write_,
        "boom": boom_,
        "odd": odd_,
        "secret": secret_,
        "drop": lookup_,
    }
    for name, fn in plain.items():
        handler = _as_async(fn) if use_async else fn
        risk = Risk.WRITE if name in ("write", "drop") else Risk.READ
        fields: dict[str, Any] = {"sensitive_fields": {"token"}} if name == "secret" else {}
        reg.tool(name=name, risk=risk, tenant_scoped=False, **fields)(handler)

    # Slower than its limit: never answers in time (and records nothing, so a thread the
    # synchronous path leaves running cannot change the witness later).
    async def slow_async(key: str) -> str:
        await asyncio.sleep(2)
        return "late"

    def slow_sync(key: str) -> str:
        time.sleep(0.5)
        return "late"

    slow = slow_async if use_async else slow_sync
    reg.tool(name="slow", risk=Risk.READ, tenant_scoped=False, timeout_s=0.05)(slow)
    return reg


def _as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    # wraps: the same name, annotations and signature, so the same manifest.
    @functools.wraps(fn)
    async def handler(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)  # a real suspension, as a network call has
        return fn(*args, **kwargs)

    return handler


# call id, tool, arguments — the script every path runs; a step that asks is approved by
# alice and sent again.
SCRIPT: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("c1", "lookup", {"key": "k1"}),
    ("c1", "lookup", {"key": "k1"}),  # replay
    ("c2", "write", {"key": "k1"}),  # tiers: asked, approved, runs; flow: trusted, allowed
    ("c2", "write", {"key": "k1"}),  # replay
    ("c3", "write", {"key": "k-untrusted"}),  # asked under both (flow: from tool output)
    ("c4", "drop", {"key": "k1"}),  # denied by a tool rule
    ("c5", "boom", {"key": "k1"}),  # failed
    ("c5", "boom", {"key": "k1"}),  # the recorded failure, not a second run
    ("c6", "slow", {"key": "k1"}),  # timed out: unknown
    ("c6", "slow", {"key": "k1"}),  # still unknown, never sent again
    ("c7", "odd", {"key": "k1"}),  # not JSON: a note is recorded
    ("c8", "secret", {"key": "k1"}),  # a sensitive field redacted
    ("c9", "nope", {"key": "k1"}),  # unknown tool
    ("c1", "write", {"key": "k1"}),  # the same call id for another tool: a conflict
)


def _outcome(o: Outcome) -> dict[str, Any]:
    return {
        "operation_key": o.operation_key,
        "status": o.status.value,
        "result": o.result,
        "text": o.text,
        "replayed": o.replayed,
        "policy_decision": o.policy_decision,
        "external_reference": o.external_reference,
        "flags": list(o.flags),
    }


def _error(e: BaseException) -> dict[str, Any]:
    shown = str(e)
    if isinstance(e, ApprovalRequired):  # its id is minted afresh
        shown = shown.replace(e.approval_id, "<approval>")
    return {"error": type(e).__name__, "message": shown}


def transcript(store: Store, policy: Policy, path: str, use_async: bool) -> dict[str, Any]:
    """Run SCRIPT through ``path`` ("call" or "acall") and return everything it left."""
    witness: list[str] = []
    gate = Gate(registry(witness, use_async=use_async), policy, store)
    events: list[dict[str, Any]] = []
    gate.subscribe(lambda e: events.append({k: v for k, v in e.items() if k != "latency_ms"}))
    gate.start_run(PRINCIPAL, run_id=RUN)
    gate.record_input(RUN, "please save k1")
    passed: list[str] = []

    async def drive() -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = []
        for call_id, tool, arguments in SCRIPT:
            call = ToolCall(call_id=call_id, tool=tool, arguments=arguments)
            for _ in range(2):  # a call that asks is approved once, then sent again
                try:
                    if path == "acall":
                        out = await gate.acall(RUN, call)
                    else:
                        out = gate.call(RUN, call)
                except ApprovalRequired as e:
                    steps.append(_error(e))
                    gate.approve(e.approval_id, "alice")
                    continue
                except TetherError as e:
                    steps.append(_error(e))
                    break
                steps.append(_outcome(out))
                break
        return steps

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tether.gate.pipeline, "crash_point", passed.append)
        # The call path: a plain thread, no loop (drive() is a coroutine only to share the
        # code; the synchronous path never awaits).
        steps = asyncio.run(drive()) if path == "acall" else _run_without_loop(drive)
    effects = [
        {
            "operation_key": e.operation_key,
            "call_id": e.call_id,
            "tool": e.tool_name,
            "status": e.status.value,
            "result_json": e.result_json,
            "result_digest": e.result_digest,
            "external_reference": e.external_reference,
            "error": e.error,
            "attempts": e.attempts,
        }
        for e in sorted(store.list_effects(RUN), key=lambda e: e.operation_key)
    ]
    audit = [(a.kind, _audit_body(a.body)) for a in store.audit_entries() if a.run_id == RUN]
    return {
        "steps": steps,
        "effects": effects,
        "audit": audit,
        "events": events,
        "witness": witness,
        "crash_points": passed,
        "run": gate.run_state(RUN).budget.to_dict(),
    }


def _run_without_loop(drive: Callable[[], Any]) -> Any:
    """Step a coroutine that never suspends (the ``call`` path) without an event loop, so
    ``Gate.call`` runs exactly as a synchronous caller's does."""
    coro = drive()
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the call path suspended: it must not await anything")


# Times, minted ids, and the digests of rows that hold times.
VOLATILE = {"at", "latency_ms", "approval_id", "expires_at", "created_at", "decided_at", "rows"}


def _audit_body(body: str) -> Any:
    """An audit entry's data without times and minted ids (the rest must match exactly)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, str) and value.startswith("apr-"):
            return "<approval>"
        return value

    return clean(json.loads(body))


@pytest.fixture(params=["memory", "sqlite"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []

    def make() -> Store:
        store: Store = (
            MemoryStore()
            if request.param == "memory"
            else SQLiteStore(f"sqlite:///{tmp_path}/t{len(opened)}.db")
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.mark.parametrize("policy", [TIERS, FLOW], ids=["tiers", "flow"])
def test_call_and_acall_leave_the_same_record(
    fresh_store: Callable[[], Store], policy: Policy
) -> None:
    reference = transcript(fresh_store(), policy, "call", use_async=False)
    for path, use_async in (("acall", True), ("acall", False), ("call", True)):
        got = transcript(fresh_store(), policy, path, use_async)
        for part in reference:
            assert got[part] == reference[part], (path, use_async, part)

    # What the script must have done, so the parity above compares something real.
    steps = reference["steps"]
    kinds = [s.get("error") or s["status"] for s in steps]
    assert kinds.count("ApprovalRequired") == (2 if policy is TIERS else 1)
    assert {"PolicyDenied", "ToolFailed", "OutcomeUnknown", "UnknownToolError"} <= set(kinds)
    assert "OperationConflict" in kinds
    assert [s["replayed"] for s in steps if s.get("status") == "committed"][:2] == [False, True]
    assert reference["witness"] == [
        "lookup k1",
        "write k1",
        "write k-untrusted",
        "boom k1",
        "odd k1",
        "secret k1",
    ]
    statuses = {e["call_id"]: e["status"] for e in reference["effects"]}
    assert statuses == {
        "c1": "committed",
        "c2": "committed",
        "c3": "committed",
        "c5": "failed",
        "c6": "unknown",
        "c7": "committed",
        "c8": "committed",
    }
    assert "s3cr3t-value" not in json.dumps(reference["effects"])
    assert reference["crash_points"][:3] == [
        "gate.before_dispatch_commit",
        "gate.after_dispatch_commit",
        "gate.after_tool_return",
    ]
    assert reference["crash_points"].count("gate.after_outcome_commit") == 7
    if policy is FLOW:
        lookup = steps[0]
        assert lookup["text"] != lookup["result"]  # marked as untrusted output
        assert steps[1]["text"] == lookup["text"]  # and marked again when replayed


def test_a_cancelled_acall_records_unknown_and_is_not_sent_again(backend: Backend) -> None:
    started = asyncio.Event()
    ran: list[str] = []
    reg = Registry()

    @reg.tool(risk=Risk.READ, tenant_scoped=False)
    async def hang(key: str) -> str:
        ran.append(key)
        started.set()
        await asyncio.sleep(30)
        return "late"

    gate = Gate(reg, Policy(version="p-1"), backend.store)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool="hang", arguments={"key": "k"})

    async def scenario() -> None:
        task = asyncio.create_task(gate.acall(run_id, call))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(OutcomeUnknown):  # the ledger's answer, not a second run
            await gate.acall(run_id, call)

    asyncio.run(scenario())
    assert ran == ["k"]
    [effect] = backend.store.list_effects(run_id)
    assert effect.status is EffectStatus.UNKNOWN
    kinds = [a.kind for a in backend.store.audit_entries() if a.run_id == run_id]
    assert kinds[-2:] == ["tool_effect_resolved", "effect_replayed"]


def test_call_refuses_an_async_tool_on_a_thread_running_a_loop(backend: Backend) -> None:
    reg = Registry()

    @reg.tool(risk=Risk.READ, tenant_scoped=False)
    async def ping(key: str) -> str:
        return "pong"

    gate = Gate(reg, Policy(version="p-1"), backend.store)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool="ping", arguments={"key": "k"})

    async def on_the_loop() -> Outcome:
        with pytest.raises(ConfigurationError, match="acall"):
            gate.call(run_id, call)
        assert backend.store.list_effects(run_id) == []  # refused before anything is written
        return await gate.acall(run_id, call)

    out = asyncio.run(on_the_loop())
    assert out.text == "pong" and out.status is EffectStatus.COMMITTED
    assert gate.call(run_id, call).replayed  # from a thread with no loop: the replay
