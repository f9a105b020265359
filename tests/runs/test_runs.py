"""Durable runs: the model loop, approvals decided inline or later in another process, edits,
expiry, parallel calls matched by id, leases, and a checkpoint that stays small.

Every test that drives a Gate or a Runner runs on both stores; "another process" is a new
Gate and Runner (and, on SQLite, a new store object on the same file)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tether import (
    ApprovalStatus,
    Gate,
    Message,
    ModelToolCall,
    Policy,
    Principal,
    Registry,
    Risk,
    ScriptedModel,
    Store,
)
from tether.compat import run_with_approval
from tether.core.lifecycle import RunStatus
from tether.errors import (
    ApprovalStateError,
    ApproverNotAuthorized,
    InvalidArguments,
    ModelError,
    PolicyDenied,
    RunConflict,
    RunStateError,
    StaleState,
)
from tether.evidence.audit import CHAINS
from tether.policy.constraints import Constraint, ToolRule
from tether.runs.runner import Runner, RunResult, load_result

USER = Principal(subject="user-42", tenant="acme", scopes=frozenset({"ticket:write"}))
REVIEWER = "reviewer-5"
TTL = 60.0


def make_policy(*, approvers: frozenset[str] = frozenset({REVIEWER})) -> Policy:
    return Policy(
        version="p1",
        approvers=approvers,
        approval_ttl_s=TTL,
        tools={
            "refund": ToolRule(constraints=(Constraint(argument="amount", op="<=", value=100),))
        },
    )


@dataclass
class World:
    """The outside system the tools act on: a log of every handler invocation."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)

    def record(self, tool: str, **arguments: Any) -> dict[str, Any]:
        self.calls.append((tool, arguments))
        hook = self.hooks.get(tool)
        if hook is not None:
            hook()
        return {"tool": tool, **arguments, "ok": True}

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.calls if name == tool)

    def arguments(self, tool: str) -> list[dict[str, Any]]:
        return [args for name, args in self.calls if name == tool]


def make_registry(world: World) -> Registry:
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def lookup(ticket_id: str) -> dict[str, Any]:
        """Read a ticket."""
        return world.record("lookup", ticket_id=ticket_id)

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close(ticket_id: str) -> dict[str, Any]:
        """Close a ticket."""
        return world.record("close", ticket_id=ticket_id)

    @registry.tool(risk=Risk.WRITE)
    def refund(ticket_id: str, amount: int) -> dict[str, Any]:
        """Refund a ticket."""
        return world.record("refund", ticket_id=ticket_id, amount=amount)

    return registry


@dataclass
class Env:
    kind: str
    tmp_path: Path
    store: Store
    backend: Backend
    now: list[float] = field(default_factory=lambda: [1000.0])
    world: World = field(default_factory=World)
    opened: list[Store] = field(default_factory=list)

    def clock(self) -> float:
        return self.now[0]

    def gate(self, store: Store | None = None, policy: Policy | None = None) -> Gate:
        return Gate(
            make_registry(self.world),
            policy or make_policy(),
            store or self.store,
            clock=self.clock,
        )

    def runner(
        self,
        turns: Sequence[Any] | None = None,
        *,
        gate: Gate | None = None,
        model: Any = None,
        **options: Any,
    ) -> Runner:
        chosen = model if model is not None else ScriptedModel(list(turns or []))
        return Runner(gate or self.gate(), chosen, **options)

    def other_store(self) -> Store:
        """The store as another process sees it: a new connection to the same data."""
        return self.backend.open()

    def other_process(self, policy: Policy | None = None) -> Gate:
        return self.gate(self.other_store(), policy)


@pytest.fixture
def env(backend: Backend, tmp_path: Path) -> Env:
    return Env(kind=backend.kind, tmp_path=tmp_path, store=backend.store, backend=backend)


def call(call_id: str, name: str, **arguments: Any) -> ModelToolCall:
    return ModelToolCall(id=call_id, name=name, arguments=arguments)


def kinds(result: RunResult) -> list[str]:
    return [s.kind for s in result.steps]


def tool_messages(result: RunResult) -> dict[str | None, str]:
    return {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}


def audit_kinds(store: Store) -> list[str]:
    return [e.kind for e in store.audit_entries() if e.chain != CHAINS]


def checkpoint(store: Store, run_id: str) -> str:
    with store.read() as tx:
        record = tx.get_run(run_id)
    assert record is not None
    return record.checkpoint_json


def run_record(store: Store, run_id: str) -> Any:
    with store.read() as tx:
        record = tx.get_run(run_id)
    assert record is not None
    return record


def run_inputs(store: Store, run_id: str) -> list[tuple[str, str]]:
    with store.read() as tx:
        return tx.inputs(run_id)


def intact(store: Store) -> bool:
    return store.verify_audit().intact


# -- the loop ------------------------------------------------------------------------------------
def test_a_reply_without_tool_calls_completes_the_run(env: Env) -> None:
    model = ScriptedModel(["Hello."])
    result = env.runner(model=model, system="be nice").start("hi", USER)
    assert result.status == "completed"
    assert result.final == "Hello."
    assert kinds(result) == ["final"]
    assert [m.role for m in result.messages] == ["system", "user", "assistant"]
    assert len(model.calls) == 1
    assert result.approvals == []
    assert run_record(env.store, result.run_id).lease_owner is None
    assert intact(env.store)


def test_tool_results_are_fed_back_as_tool_messages(env: Env) -> None:
    model = ScriptedModel([[call("c-1", "lookup", ticket_id="T-1")], "T-1 is open."])
    result = env.runner(model=model).start("look at T-1", USER)
    assert result.status == "completed"
    assert result.final == "T-1 is open."
    assert kinds(result) == ["tool_call", "final"]
    assert env.world.arguments("lookup") == [{"ticket_id": "T-1"}]
    answer = tool_messages(result)["c-1"]
    assert json.loads(answer)["ticket_id"] == "T-1"
    # The model's second turn saw the tool message answering its call.
    second = model.calls[1]
    assert second[-1].role == "tool" and second[-1].tool_call_id == "c-1"
    assert second[-1].content == answer


def test_max_turns_ends_the_run_failed_with_an_error_step(env: Env) -> None:
    model = ScriptedModel([[call(f"c-{i}", "lookup", ticket_id=f"T-{i}")] for i in range(10)])
    result = env.runner(model=model, max_turns=3).start("loop forever", USER)
    assert result.status == "failed"
    assert result.final == ""
    assert kinds(result) == ["tool_call", "tool_call", "tool_call", "error"]
    assert "3 turns" in result.steps[-1].detail
    assert len(model.calls) == 3
    assert env.world.count("lookup") == 3
    with pytest.raises(RunStateError, match="failed"):
        env.runner(model=model, max_turns=3).resume(result.run_id)
    assert intact(env.store)


def test_a_model_error_fails_the_run_with_an_error_step(env: Env) -> None:
    class Broken:
        def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> Message:
            raise ModelError("provider said 500")

    result = env.runner(model=Broken()).start("hi", USER)
    assert result.status == "failed"
    assert kinds(result) == ["error"]
    assert "provider said 500" in result.steps[0].detail
    assert intact(env.store)


def test_the_run_is_running_and_leased_while_it_is_driven(env: Env) -> None:
    seen: list[tuple[str, str | None]] = []
    runner = env.runner([[call("c-1", "lookup", ticket_id="T-1")], "done"], worker="w-1")
    run_id = runner.create("go", USER)
    assert run_record(env.store, run_id).status == "running"

    def observe() -> None:
        record = run_record(env.store, run_id)
        seen.append((record.status, record.lease_owner))

    env.world.hooks["lookup"] = observe
    result = runner.resume(run_id)
    assert seen == [("running", "w-1")]
    assert result.status == "completed"
    record = run_record(env.store, run_id)
    assert (record.status, record.lease_owner, record.lease_expires_at) == ("completed", None, None)
    assert "run_completed" in audit_kinds(env.store)


def test_messages_and_steps_are_rows_of_their_own(env: Env) -> None:
    result = env.runner(
        [[call("c-1", "lookup", ticket_id="T-SECRETIVE-1")], "the answer is 42"]
    ).start("look at T-SECRETIVE-1", USER)
    with env.store.read() as tx:
        messages = tx.messages(result.run_id)
        steps = tx.steps(result.run_id)
    assert [json.loads(m)["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [s.kind for s in steps] == ["tool_call", "final"]
    assert [s.seq for s in steps] == [1, 2]
    cp = json.loads(checkpoint(env.store, result.run_id))
    assert (cp["messages"], cp["steps"], cp["turns"]) == (4, 2, 2)
    text = checkpoint(env.store, result.run_id)
    assert "SECRETIVE" not in text and "the answer is 42" not in text
    assert load_result(env.store, result.run_id).messages == result.messages


def test_the_checkpoint_stays_small_over_fifty_turns(env: Env) -> None:
    turns: list[Any] = [
        [call(f"c-{i}", "lookup", ticket_id=f"T-{i}-" + "x" * 200)] for i in range(50)
    ]
    turns.append("all looked at")
    sizes: dict[int, int] = {}
    versions: list[int] = []
    inner = ScriptedModel(turns)

    class Watching:
        def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> Message:
            record = run_record(env.store, "run-long")
            turn = sum(1 for m in messages if m.role == "assistant")
            sizes[turn] = len(record.checkpoint_json)
            versions.append(record.state_version)
            return inner.complete(messages, tools)

    runner = env.runner(model=Watching(), max_turns=60)
    runner.create("look at everything", USER, run_id="run-long")
    result = runner.resume("run-long")
    assert result.status == "completed"
    assert len(result.messages) == 1 + 50 * 2 + 1
    with env.store.read() as tx:
        assert len(tx.messages("run-long")) == 102
        assert len(tx.steps("run-long")) == 51
    # ~200 bytes of new history per turn, but the checkpoint only grows by counter digits.
    assert abs(sizes[50] - sizes[5]) < 40, sizes
    assert "xxxx" not in checkpoint(env.store, "run-long")
    # Every write is a compare-and-swap that bumps the version.
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_a_write_with_a_stale_state_version_loses(env: Env) -> None:
    runner = env.runner(["done"])
    run_id = runner.create("hi", USER)
    stale = run_record(env.store, run_id)
    result = runner.resume(run_id)
    assert result.status == "completed"
    fresh = run_record(env.store, run_id)
    assert fresh.state_version > stale.state_version
    with pytest.raises(StaleState), env.store.transaction() as tx:
        tx.update_run(replace(stale, status="running"))
    assert run_record(env.store, run_id) == fresh
    assert intact(env.store)


# -- inline approvals ----------------------------------------------------------------------------
def test_an_inline_approver_approves_the_call(env: Env) -> None:
    asked: list[str] = []

    def approver(approval: Any) -> bool:
        asked.append(approval.tool)
        return True

    runner = env.runner(
        [[call("c-1", "close", ticket_id="T-1")], "closed"],
        approver=approver,
        approver_id=REVIEWER,
    )
    result = runner.start("close T-1", USER)
    assert result.status == "completed"
    assert asked == ["close"]
    assert kinds(result) == ["approval_required", "approval_granted", "tool_call", "final"]
    assert env.world.arguments("close") == [{"ticket_id": "T-1"}]
    [approval] = env.store.list_approvals(run_id=result.run_id)
    assert (approval.status, approval.approver) == (ApprovalStatus.USED, REVIEWER)


def test_an_inline_approver_denies_the_call(env: Env) -> None:
    runner = env.runner(
        [[call("c-1", "close", ticket_id="T-1")], "could not"],
        approver=lambda approval: False,
        approver_id=REVIEWER,
    )
    result = runner.start("close T-1", USER)
    assert result.status == "completed"
    assert env.world.count("close") == 0
    assert kinds(result) == ["approval_required", "approval_denied", "final"]
    assert json.loads(tool_messages(result)["c-1"]) == {"error": "approval_denied", "tool": "close"}
    assert intact(env.store)


def test_an_inline_approver_needs_an_approver_id(env: Env) -> None:
    with pytest.raises(ValueError, match="approver_id"):
        env.runner(["x"], approver=lambda approval: True)


def test_run_with_approval_drives_an_existing_run(env: Env) -> None:
    gate = env.gate()
    run_id = gate.start_run(USER)
    model = ScriptedModel([[call("c-1", "close", ticket_id="T-1")], "closed"])
    result = run_with_approval(
        model, gate, run_id, "close T-1", approver=lambda a: True, approver_id=REVIEWER
    )
    assert result.status == "completed"
    assert env.world.count("close") == 1


# -- asynchronous approvals ----------------------------------------------------------------------
def test_a_run_waits_for_approval_and_resumes_in_another_process(env: Env) -> None:
    first = env.runner(
        [[call("c-1", "lookup", ticket_id="T-1")], [call("c-2", "close", ticket_id="T-1")], "x"]
    )
    result = first.start("close T-1", USER)
    assert result.status == "awaiting_approval"
    assert kinds(result) == ["tool_call", "approval_required"]
    [approval_id] = result.approvals
    pending = env.store.list_approvals(ApprovalStatus.PENDING)
    assert [a.approval_id for a in pending] == [approval_id]
    assert pending[0].call_id == "c-2" and dict(pending[0].arguments) == {"ticket_id": "T-1"}
    record = run_record(env.store, result.run_id)
    assert (record.status, record.lease_owner) == ("awaiting_approval", None)
    assert env.world.count("close") == 0

    # Decided in one process, resumed in another, with a brand-new model.
    env.other_process().approve(approval_id, REVIEWER)
    model = ScriptedModel(
        [[call("c-1", "lookup", ticket_id="T-1")], [call("c-2", "close", ticket_id="T-1")], "done"]
    )
    resumed = env.runner(model=model, gate=env.other_process()).resume(result.run_id)
    assert resumed.status == "completed"
    assert resumed.final == "done"
    assert kinds(resumed) == [
        "tool_call",
        "approval_required",
        "approval_granted",
        "tool_call",
        "final",
    ]
    # Only the turn after the approved call was asked; nothing ran twice.
    assert len(model.calls) == 1
    assert env.world.count("lookup") == 1
    assert env.world.count("close") == 1
    assert env.store.list_approvals(ApprovalStatus.PENDING) == []
    assert intact(env.store)


def test_a_denial_reason_is_fed_back_to_the_model(env: Env) -> None:
    model = ScriptedModel([[call("c-1", "close", ticket_id="T-1")], "ok, not closing"])
    result = env.runner(model=model).start("close T-1", USER)
    [approval_id] = result.approvals
    denied = env.other_process().deny(approval_id, REVIEWER, reason="customer still waiting")
    assert denied.status is ApprovalStatus.DENIED
    model2 = ScriptedModel([[call("c-1", "close", ticket_id="T-1")], "ok, not closing"])
    resumed = env.runner(model=model2, gate=env.other_process()).resume(result.run_id)
    assert resumed.status == "completed"
    expected = {"error": "approval_denied", "tool": "close", "reason": "customer still waiting"}
    assert json.loads(tool_messages(resumed)["c-1"]) == expected
    assert json.loads(model2.calls[-1][-1].content) == expected
    assert kinds(resumed) == ["approval_required", "approval_denied", "final"]
    assert "customer still waiting" in resumed.steps[1].detail
    assert env.world.count("close") == 0
    assert "approval_denied" in audit_kinds(env.store)
    assert intact(env.store)


@pytest.mark.parametrize("approved", ["c-1", "c-2"])
@pytest.mark.parametrize("approve_first", [True, False])
def test_parallel_calls_are_decided_by_approval_id(
    env: Env, approved: str, approve_first: bool
) -> None:
    turns: list[Any] = [
        [call("c-1", "close", ticket_id="T-1"), call("c-2", "close", ticket_id="T-2")],
        "done",
    ]
    result = env.runner(turns).start("close T-1 and T-2", USER)
    assert result.status == "awaiting_approval"
    assert len(result.approvals) == 2
    gate = env.other_process()
    ids = {c: gate.approval_for(result.run_id, c) for c in ("c-1", "c-2")}
    assert all(a is not None for a in ids.values())
    assert sorted(a.approval_id for a in ids.values() if a) == sorted(result.approvals)
    denied = "c-2" if approved == "c-1" else "c-1"
    approved_id = ids[approved].approval_id  # type: ignore[union-attr]
    denied_id = ids[denied].approval_id  # type: ignore[union-attr]

    def decide(which: str) -> None:
        if which == approved:
            gate.approve(approved_id, REVIEWER)
        else:
            gate.deny(denied_id, REVIEWER, reason="wrong ticket")

    order = [approved, denied] if approve_first else [denied, approved]
    decide(order[0])
    # One decision is in: the run answers that call and keeps waiting for the other.
    middle = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert middle.status == "awaiting_approval"
    assert middle.approvals == [approved_id if order[1] == approved else denied_id]
    assert list(tool_messages(middle)) == [order[0]]

    decide(order[1])
    final = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert final.status == "completed"
    answers = tool_messages(final)
    assert set(answers) == {"c-1", "c-2"}
    ticket = {"c-1": "T-1", "c-2": "T-2"}
    assert json.loads(answers[approved])["ticket_id"] == ticket[approved]
    assert json.loads(answers[denied]) == {
        "error": "approval_denied",
        "tool": "close",
        "reason": "wrong ticket",
    }
    # The denied call never ran; the approved one ran once.
    assert env.world.arguments("close") == [{"ticket_id": ticket[approved]}]
    assert kinds(final).count("approval_granted") == 1
    assert kinds(final).count("approval_denied") == 1
    assert intact(env.store)


@pytest.mark.parametrize("approved", ["c-1", "c-2"])
@pytest.mark.parametrize("approve_first", [True, False])
def test_parallel_decisions_are_matched_to_their_calls_not_positions(
    env: Env, approved: str, approve_first: bool
) -> None:
    turns: list[Any] = [
        [call("c-1", "close", ticket_id="T-1"), call("c-2", "close", ticket_id="T-2")],
        "done",
    ]
    result = env.runner(turns).start("close T-1 and T-2", USER)
    gate = env.other_process()
    by_call = {a.call_id: a.approval_id for a in env.store.list_approvals(run_id=result.run_id)}
    assert sorted(by_call.values()) == sorted(result.approvals)
    denied = "c-2" if approved == "c-1" else "c-1"
    decisions: list[Callable[[], object]] = [
        lambda: gate.approve(by_call[approved], REVIEWER),
        lambda: gate.deny(by_call[denied], REVIEWER, reason="wrong ticket"),
    ]
    for decide in decisions if approve_first else decisions[::-1]:
        decide()
    model = ScriptedModel(turns)
    final = env.runner(model=model, gate=env.other_process()).resume(result.run_id)
    assert final.status == "completed"
    answers = tool_messages(final)
    ticket = {"c-1": "T-1", "c-2": "T-2"}
    assert json.loads(answers[approved])["ticket_id"] == ticket[approved]
    assert json.loads(answers[denied]) == {
        "error": "approval_denied",
        "tool": "close",
        "reason": "wrong ticket",
    }
    assert env.world.arguments("close") == [{"ticket_id": ticket[approved]}]
    # The model heard both answers, each under its own call id.
    heard = {m.tool_call_id: m.content for m in model.calls[-1] if m.role == "tool"}
    assert heard == answers
    assert intact(env.store)


@pytest.mark.parametrize("close_first", [True, False])
def test_siblings_without_approval_are_answered_before_the_run_waits(
    env: Env, close_first: bool
) -> None:
    pair = [call("c-close", "close", ticket_id="T-1"), call("c-look", "lookup", ticket_id="T-1")]
    turns: list[Any] = [pair if close_first else pair[::-1], "done"]
    result = env.runner(turns).start("look and close", USER)
    assert result.status == "awaiting_approval"
    assert env.world.count("lookup") == 1
    assert list(tool_messages(result)) == ["c-look"]
    assert sorted(kinds(result)) == ["approval_required", "tool_call"]
    # The answer is durable: another process reads it back.
    assert list(tool_messages(load_result(env.other_store(), result.run_id))) == ["c-look"]
    env.other_process().approve(result.approvals[0], REVIEWER)
    done = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert done.status == "completed"
    assert set(tool_messages(done)) == {"c-look", "c-close"}
    assert (env.world.count("lookup"), env.world.count("close")) == (1, 1)


def test_an_expired_approval_is_answered_to_the_model_as_expired(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "close", ticket_id="T-1")], "too late"]
    result = env.runner(turns).start("close T-1", USER)
    [approval_id] = result.approvals
    env.now[0] += TTL + 1
    model = ScriptedModel(turns)
    resumed = env.runner(model=model, gate=env.other_process()).resume(result.run_id)
    assert resumed.status == "completed"
    assert json.loads(tool_messages(resumed)["c-1"]) == {
        "error": "approval_expired",
        "tool": "close",
        "approval_id": approval_id,
    }
    assert kinds(resumed) == ["approval_required", "approval_expired", "final"]
    assert [a.approval_id for a in env.store.list_approvals(ApprovalStatus.EXPIRED)] == [
        approval_id
    ]
    assert env.world.count("close") == 0
    with pytest.raises(ApprovalStateError):
        env.gate().approve(approval_id, REVIEWER)
    assert "approval_expired" in audit_kinds(env.store)
    assert intact(env.store)


# -- bad decisions -------------------------------------------------------------------------------
def waiting_run(env: Env, *, gate: Gate | None = None, tool: str = "close", **args: Any) -> str:
    arguments = args or {"ticket_id": "T-1"}
    runner = env.runner([[call("c-1", tool, **arguments)], "done"], gate=gate)
    result = runner.start("do it", USER)
    assert result.status == "awaiting_approval"
    return result.approvals[0]


def test_approving_an_expired_approval_fails_and_marks_it_expired(env: Env) -> None:
    approval_id = waiting_run(env)
    env.now[0] += TTL + 1
    with pytest.raises(ApprovalStateError, match="expired"):
        env.gate().approve(approval_id, REVIEWER)
    with env.store.read() as tx:
        found = tx.get_approval(approval_id)
    assert found is not None and found.status is ApprovalStatus.EXPIRED
    assert audit_kinds(env.store).count("approval_expired") == 1
    with pytest.raises(ApprovalStateError):
        env.gate().deny(approval_id, REVIEWER, reason="x")
    assert intact(env.store)


def test_deciding_an_unknown_approval_fails(env: Env) -> None:
    waiting_run(env)
    before = audit_kinds(env.store)
    with pytest.raises(ApprovalStateError, match="no approval apr-nope"):
        env.gate().approve("apr-nope", REVIEWER)
    with pytest.raises(ApprovalStateError):
        env.gate().edit("apr-nope", REVIEWER, {"ticket_id": "T-2"})
    assert audit_kinds(env.store) == before
    assert intact(env.store)


def test_deciding_an_approval_twice_fails(env: Env) -> None:
    approval_id = waiting_run(env)
    gate = env.gate()
    gate.approve(approval_id, REVIEWER)
    before = audit_kinds(env.store)
    with pytest.raises(ApprovalStateError, match="already approved"):
        gate.approve(approval_id, REVIEWER)
    with pytest.raises(ApprovalStateError, match="already approved"):
        gate.deny(approval_id, REVIEWER, reason="changed my mind")
    with pytest.raises(ApprovalStateError):
        gate.edit(approval_id, REVIEWER, {"ticket_id": "T-2"})
    assert audit_kinds(env.store) == before
    with env.store.read() as tx:
        found = tx.get_approval(approval_id)
    assert found is not None and found.status is ApprovalStatus.APPROVED
    assert intact(env.store)


def test_the_requester_cannot_approve_their_own_call(env: Env) -> None:
    # Even when the policy lists them as an approver.
    policy = make_policy(approvers=frozenset({REVIEWER, USER.subject}))
    gate = env.gate(policy=policy)
    approval_id = waiting_run(env, gate=gate)
    with pytest.raises(ApproverNotAuthorized, match="requested this call"):
        gate.approve(approval_id, USER.subject)
    with pytest.raises(ApproverNotAuthorized):
        gate.edit(approval_id, USER.subject, {"ticket_id": "T-2"})
    with env.store.read() as tx:
        found = tx.get_approval(approval_id)
    assert found is not None and found.status is ApprovalStatus.PENDING
    assert env.world.count("close") == 0
    assert intact(env.store)


def test_an_unauthorised_approver_is_refused(env: Env) -> None:
    approval_id = waiting_run(env)
    with pytest.raises(ApproverNotAuthorized, match="not an approver"):
        env.gate().approve(approval_id, "mallory")
    with pytest.raises(ApproverNotAuthorized):
        env.gate().deny(approval_id, "mallory", reason="because")
    with env.store.read() as tx:
        found = tx.get_approval(approval_id)
    assert found is not None and found.status is ApprovalStatus.PENDING
    # The run still waits and still completes once a real approver decides.
    env.gate().approve(approval_id, REVIEWER)
    result = env.runner([[call("c-1", "close", ticket_id="T-1")], "done"]).resume(found.run_id)
    assert result.status == "completed"
    assert env.world.count("close") == 1
    assert intact(env.store)


# -- edits ---------------------------------------------------------------------------------------
def test_an_edit_is_a_new_proposal_and_only_it_runs(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "close", ticket_id="T-1")], "closed"]
    result = env.runner(turns).start("close T-1", USER)
    [approval_id] = result.approvals
    gate = env.other_process()
    original = gate.approval_for(result.run_id, "c-1")
    assert original is not None
    edited = gate.edit(approval_id, REVIEWER, {"ticket_id": "T-9"}, reason="wrong ticket")
    assert edited.approval_id != approval_id
    assert edited.status is ApprovalStatus.APPROVED
    assert edited.replaces == approval_id
    assert edited.argument_digest != original.argument_digest
    assert edited.call_digest != original.call_digest
    assert dict(edited.arguments) == {"ticket_id": "T-9"}
    with env.store.read() as tx:
        replaced = tx.get_approval(approval_id)
    assert replaced is not None
    assert (replaced.status, replaced.replaced_by) == (ApprovalStatus.EDITED, edited.approval_id)
    edits = [e.record for e in env.store.audit_entries() if e.kind == "approval_edited"]
    assert len(edits) == 1

    resumed = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert resumed.status == "completed"
    assert env.world.arguments("close") == [{"ticket_id": "T-9"}]
    answer = tool_messages(resumed)["c-1"]
    assert answer.startswith(f"[arguments edited by {REVIEWER}")
    assert "T-9" in answer
    assert any(s.kind == "tool_call" and "T-9" in s.detail for s in resumed.steps)
    assert intact(env.store)


def test_an_edit_that_breaks_the_schema_changes_nothing(env: Env) -> None:
    approval_id = waiting_run(env)
    before_audit = audit_kinds(env.store)
    before = env.store.list_approvals()
    with pytest.raises(InvalidArguments, match="ticket_id"):
        env.gate().edit(approval_id, REVIEWER, {"ticket_id": 7})
    with pytest.raises(InvalidArguments):
        env.gate().edit(approval_id, REVIEWER, {"ticket_id": "T-1", "extra": True})
    assert env.store.list_approvals() == before
    assert [a.status for a in before] == [ApprovalStatus.PENDING]
    assert audit_kinds(env.store) == before_audit
    assert intact(env.store)
    # Still decidable as it was.
    assert env.gate().approve(approval_id, REVIEWER).status is ApprovalStatus.APPROVED


def test_an_edit_is_judged_by_the_policy_again(env: Env) -> None:
    approval_id = waiting_run(env, tool="refund", ticket_id="T-1", amount=50)
    before = env.store.list_approvals()
    with pytest.raises(PolicyDenied, match="amount"):
        env.gate().edit(approval_id, REVIEWER, {"ticket_id": "T-1", "amount": 500})
    assert env.store.list_approvals() == before
    assert "approval_edited" not in audit_kinds(env.store)
    edited = env.gate().edit(approval_id, REVIEWER, {"ticket_id": "T-1", "amount": 20})
    assert edited.status is ApprovalStatus.APPROVED
    assert intact(env.store)


# -- bad runs and bad models ---------------------------------------------------------------------
def test_resuming_an_unknown_or_finished_run_fails(env: Env) -> None:
    runner = env.runner(["done"])
    with pytest.raises(RunStateError, match="no run run-nope"):
        runner.resume("run-nope")
    result = runner.start("hi", USER)
    before = audit_kinds(env.store)
    with pytest.raises(RunStateError, match="completed"):
        env.runner(["done"], gate=env.other_process()).resume(result.run_id)
    assert audit_kinds(env.store) == before
    assert run_record(env.store, result.run_id).status == "completed"
    inputs = run_inputs(env.store, result.run_id)
    with pytest.raises(RunStateError, match="already has a conversation"):
        runner.begin(result.run_id, "again")
    assert run_inputs(env.store, result.run_id) == inputs  # nothing half-written
    assert intact(env.store)


def test_a_queued_run_is_claimable_only_once_whole_and_never_running_before(env: Env) -> None:
    """``create_queued`` used to make the run running (with no lease: what a dead driver
    leaves, so claimable) and queue it afterwards; a worker claiming it in between drove it
    without its trusted input, and the queueing then failed on the worker's newer row."""
    runner = env.runner(["done"])
    seen: list[list[str]] = []
    record_input = runner.gate.record_input

    def watched(run_id: str, text: str, **options: Any) -> None:
        # What a worker polling now would find: not this run, whose conversation is not in.
        with env.store.read() as tx:
            seen.append([r.run_id for r in tx.claimable(1e12, 10)])
        assert run_record(env.store, run_id).status == RunStatus.QUEUED.value
        record_input(run_id, text, **options)

    runner.gate.record_input = watched  # type: ignore[method-assign]
    run_id = runner.create_queued("close ticket T-1", USER)
    assert seen == [[]]
    assert run_record(env.store, run_id).status == RunStatus.QUEUED.value
    assert run_inputs(env.store, run_id) == [("user", "close ticket T-1")]
    with env.store.read() as tx:
        assert [r.run_id for r in tx.claimable(1e12, 10)] == [run_id]
    run_kinds = [e.kind for e in env.store.audit_entries() if e.run_id == run_id]
    assert run_kinds == ["run_started", "run_queued"]
    assert runner.resume(run_id).status == "completed"
    assert intact(env.store)


def test_a_call_to_an_unknown_tool_is_fed_back_and_the_run_goes_on(env: Env) -> None:
    model = ScriptedModel(
        [
            [call("c-1", "delete_everything", scope="all")],
            [call("c-2", "lookup", ticket_id="T-1")],
            "recovered",
        ]
    )
    result = env.runner(model=model).start("go", USER)
    assert result.status == "completed"
    assert result.final == "recovered"
    assert kinds(result) == ["tool_error", "tool_call", "final"]
    body = json.loads(tool_messages(result)["c-1"])
    assert body["tool"] == "delete_everything"
    assert "not in registry" in body["message"]
    assert "not in registry" in model.calls[1][-1].content
    assert env.world.count("lookup") == 1
    assert "call_denied" in audit_kinds(env.store)
    assert intact(env.store)


def test_malformed_json_arguments_are_fed_back_and_nothing_runs(env: Env) -> None:
    broken = ModelToolCall(id="c-1", name="close", parse_error="Expecting ',' at char 17")
    model = ScriptedModel([[broken], "sorry"])
    result = env.runner(model=model).start("close T-1", USER)
    assert result.status == "completed"
    assert json.loads(tool_messages(result)["c-1"]) == {
        "error": "invalid_arguments",
        "tool": "close",
        "message": "Expecting ',' at char 17",
    }
    assert kinds(result) == ["tool_error", "final"]
    assert env.world.calls == []
    assert env.store.list_approvals() == []
    assert env.store.list_effects() == []
    assert intact(env.store)


def test_arguments_that_break_the_schema_are_fed_back(env: Env) -> None:
    model = ScriptedModel([[call("c-1", "lookup", ticket_id=7)], "sorry"])
    result = env.runner(model=model).start("look", USER)
    assert result.status == "completed"
    body = json.loads(tool_messages(result)["c-1"])
    assert body["error"] == "InvalidArguments" and body["tool"] == "lookup"
    assert kinds(result) == ["tool_error", "final"]
    assert env.world.calls == []
    assert intact(env.store)


# -- crashes, leases and races -------------------------------------------------------------------
class Crash(BaseException):
    """The process dies (a BaseException: no handler in tether mistakes it for a bug)."""


class CrashAfterEffect(Runner):
    """Dies after a tool's effect committed, before the answer was recorded; a dead process
    releases no lease."""

    def _record(self, run_id: str, **kwargs: Any) -> None:
        if any(m.role == "tool" for m in kwargs.get("messages", ())):
            raise Crash
        super()._record(run_id, **kwargs)

    def _release(self, run_id: str) -> None:
        pass


def test_a_committed_effect_is_never_run_again_after_a_crash(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "lookup", ticket_id="T-1")], "done"]
    crashing = CrashAfterEffect(env.gate(), ScriptedModel(turns), worker="w-dead", lease_s=30)
    run_id = crashing.create("go", USER)
    with pytest.raises(Crash):
        crashing.resume(run_id)
    assert env.world.count("lookup") == 1
    assert [e.status.value for e in env.store.list_effects(run_id)] == ["committed"]

    # Until the dead worker's lease expires, nobody else may drive the run.
    with pytest.raises(RunConflict, match="w-dead"):
        env.runner(turns, gate=env.other_process(), worker="w-2").resume(run_id)
    env.now[0] += 31
    model = ScriptedModel(turns)
    result = env.runner(model=model, gate=env.other_process(), worker="w-2").resume(run_id)
    assert result.status == "completed"
    assert env.world.count("lookup") == 1
    assert len(model.calls) == 1  # the stored turn was not asked again
    assert "effect_replayed" in audit_kinds(env.store)
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert intact(env.store)


def test_two_workers_resuming_one_run_exactly_one_proceeds(env: Env) -> None:
    entered, release = threading.Event(), threading.Event()
    turns: list[Any] = [[call("c-1", "lookup", ticket_id="T-1")], "done"]

    def block() -> None:
        entered.set()
        assert release.wait(10)

    env.world.hooks["lookup"] = block
    first = env.runner(turns, worker="worker-a")
    second = env.runner(turns, gate=env.other_process(), worker="worker-b")
    run_id = first.create("go", USER)
    outcome: list[Any] = []

    def drive() -> None:
        try:
            outcome.append(first.resume(run_id))
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        assert entered.wait(10)
        before = audit_kinds(env.store)
        with pytest.raises(RunConflict, match="worker-a"):
            second.resume(run_id)
        assert audit_kinds(env.store) == before
        assert run_record(env.store, run_id).lease_owner == "worker-a"
    finally:
        release.set()
        thread.join(10)
    [result] = outcome
    assert isinstance(result, RunResult), result
    assert result.status == "completed"
    assert env.world.count("lookup") == 1
    with pytest.raises(RunStateError):
        second.resume(run_id)
    assert kinds(load_result(env.store, run_id)) == ["tool_call", "final"]
    assert intact(env.store)


def test_a_worker_whose_lease_was_taken_over_gets_run_conflict(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "lookup", ticket_id="T-1")], "done"]
    runner = env.runner(turns, worker="w-1")
    run_id = runner.create("go", USER)

    def take_over() -> None:
        with env.store.transaction() as tx:
            record = tx.get_run(run_id)
            assert record is not None
            tx.update_run(replace(record, lease_owner="w-2", lease_expires_at=env.clock() + 60))

    env.world.hooks["lookup"] = take_over
    with pytest.raises(RunConflict, match="lost its lease"):
        runner.resume(run_id)
    env.world.hooks.clear()
    record = run_record(env.store, run_id)
    assert record.lease_owner == "w-2"
    # The losing worker wrote nothing after the takeover: no tool message, no step.
    assert tool_messages(load_result(env.store, run_id)) == {}
    assert load_result(env.store, run_id).steps == []
    with pytest.raises(RunConflict):
        env.runner(turns, worker="w-1").resume(run_id)

    result = env.runner(turns, gate=env.other_process(), worker="w-2").resume(run_id)
    assert result.status == "completed"
    assert env.world.count("lookup") == 1
    assert kinds(result) == ["tool_call", "final"]
    assert intact(env.store)


def test_run_status_values() -> None:
    assert {s.value for s in RunStatus} >= {"running", "awaiting_approval", "completed", "failed"}
    assert RunStatus.COMPLETED.finished and RunStatus.FAILED.finished
    assert not RunStatus.RUNNING.finished and not RunStatus.AWAITING_APPROVAL.finished


def test_run_result_to_dict(env: Env) -> None:
    result = env.runner([[call("c-1", "close", ticket_id="T-1")], "x"]).start("go", USER)
    data = result.to_dict()
    assert data["status"] == "awaiting_approval"
    assert data["approvals"] == result.approvals
    assert [s["kind"] for s in data["steps"]] == ["approval_required"]
    assert json.loads(json.dumps(data)) == data


def test_an_approval_decided_while_the_turn_is_still_answered_queues_the_run(env: Env) -> None:
    # The reviewer approves c-1 while the worker is still running its sibling c-2; when the
    # worker then suspends, nothing is pending any more, so the run must be queued, not left
    # waiting for a decision that was already made.
    decided: list[str] = []

    def approve_pending() -> None:
        for a in env.store.list_approvals():
            if a.status is ApprovalStatus.PENDING and not decided:
                env.other_process().approve(a.approval_id, REVIEWER)
                decided.append(a.approval_id)

    env.world.hooks["lookup"] = approve_pending
    turns: list[Any] = [
        [call("c-1", "close", ticket_id="T-1"), call("c-2", "lookup", ticket_id="T-2")],
        "done",
    ]
    result = env.runner(turns).start("close T-1", USER)
    assert decided, "the approval was not decided mid-turn"
    assert result.status == "queued"
    final = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert final.status == "completed"
    assert env.world.arguments("close") == [{"ticket_id": "T-1"}]
