"""The gate's planner and its settle driven without a database: random sequences of
proposals, decisions, forgeries, expiries and tool outcomes, each plan (and each settled
outcome) checked against an oracle written here from the design (DESIGN section 1,
invariants I1, I2, I5 and the budgets), not from the planner.

The "world" below is this test's own record of rows: it applies a plan's writes the way the
design says they mean (insert, compare-and-swap update), so a plan that writes the wrong row
or skips one shows up as a divergence from the oracle on a later step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tether.core.approvals import Approval, ApprovalStatus, grant_payload
from tether.core.budget import Budget
from tether.core.digest import canonical_json, evolve, sha256_hex
from tether.core.ledger import EffectStatus
from tether.core.lifecycle import RunStatus
from tether.core.principal import Principal
from tether.core.runseal import sealed_identity
from tether.core.verdicts import Verdict
from tether.errors import (
    ApprovalDenied,
    ApprovalInvalid,
    BudgetExceeded,
    Denied,
    IntegrityError,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    RunStateError,
    ToolFailed,
)
from tether.evidence.keys import AuditKeys
from tether.gate.plan import (
    Admit,
    ApprovalWrite,
    Ask,
    AuditWrite,
    EffectWrite,
    Plan,
    Refuse,
    Replay,
    RunWrite,
    ToolCall,
    plan_call,
)
from tether.gate.settle import settle
from tether.gate.state import RunState, sealed
from tether.policy.constraints import ToolRule
from tether.policy.rules import Policy
from tether.store.rows import CallView, RunRecord
from tether.tools.registry import Manifest, Registry, Risk

RUN = "run-p"
KEYS = AuditKeys.ephemeral()
TTL = 100.0
ALICE = "alice"  # an approver the policy names
MALLORY = "mallory"  # not named by the policy
COST = {"read": 1, "write": 2, "wipe": 1}


def registry() -> Registry:
    reg = Registry()
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    reg.add(Manifest(name="read", parameters=schema, cost=COST["read"]), lambda **_: "r")
    reg.add(
        Manifest(name="write", parameters=schema, risk=Risk.WRITE, cost=COST["write"]),
        lambda **_: "w",
    )
    reg.add(
        Manifest(name="wipe", parameters=schema, risk=Risk.ADMIN, cost=COST["wipe"]),
        lambda **_: "gone",
    )
    return reg


REGISTRY = registry()
POLICY = Policy(
    version="p1",
    approvers=frozenset({ALICE}),
    tools={"wipe": ToolRule(verdict=Verdict.DENY)},
    approval_ttl_s=TTL,
)


@dataclass
class World:
    """The rows as the design says a plan's writes leave them."""

    record: RunRecord
    effects: dict[str, Any] = field(default_factory=dict)  # call_id -> Effect
    approvals: dict[str, Approval] = field(default_factory=dict)  # call_id -> latest
    audit: list[str] = field(default_factory=list)
    admitted: dict[str, Admit] = field(default_factory=dict)  # call_id -> its dispatch plan

    def view(self, call_id: str) -> CallView:
        return CallView(
            run=self.record,
            effect=self.effects.get(call_id),
            approval=self.approvals.get(call_id),
            effect_count=len(self.effects),
        )

    def apply(self, plan: Plan, now: float) -> None:
        for w in plan.writes:
            if isinstance(w, AuditWrite):
                self.audit.append(w.kind)
            elif isinstance(w, EffectWrite):
                current = self.effects.get(w.effect.call_id)
                if w.expected is None:
                    assert current is None, "an effect inserted twice for one call"
                else:
                    assert current is not None and current.status is w.expected
                self.effects[w.effect.call_id] = w.effect
            elif isinstance(w, ApprovalWrite):
                current = self.approvals.get(w.approval.call_id)
                if w.expected is not None:
                    assert current is not None
                    assert current.approval_id == w.approval.approval_id
                    assert current.status is w.expected
                self.approvals[w.approval.call_id] = w.approval
            else:
                assert isinstance(w, RunWrite)
                assert w.record.state_version == self.record.state_version
                self.record = evolve(
                    self.record,
                    state_version=self.record.state_version + 1,
                    checkpoint_json=w.checkpoint_json,
                    updated_at=now,
                )


def new_world(budget: Budget) -> World:
    principal = Principal(subject="agent", tenant="acme", scopes=frozenset())
    state = sealed(
        RunState(
            principal=principal,
            budget=budget,
            effects=0,
            principal_seal=KEYS.seal("principal", sealed_identity(RUN, principal, budget)),
        ),
        RUN,
        KEYS,
    )
    record = RunRecord(
        run_id=RUN,
        state_version=1,
        status=RunStatus.RUNNING.value,
        principal_id="agent",
        tenant_id="acme",
        policy_version=POLICY.version,
        checkpoint_json=state.dump(),
        created_at=0.0,
        updated_at=0.0,
    )
    return World(record=record)


def judge(world: World, call: ToolCall, now: float, mint: Callable[[str], str]) -> Plan:
    """The planner on this test's world, with its registry, policy and keys."""
    return plan_call(
        call,
        world.view(call.call_id),
        run_id=RUN,
        registry=REGISTRY,
        policy=POLICY,
        seals=KEYS,
        now=now,
        mint=mint,
    )


@dataclass
class Oracle:
    """What the design says must happen, kept independently of the planner's rows."""

    max_steps: int
    max_cost: int
    steps: int = 0
    spent: int = 0
    args: dict[str, tuple[str, str]] = field(default_factory=dict)  # call -> (tool, x)
    outcome: dict[str, str] = field(default_factory=dict)  # call -> dispatched/committed/...
    runs: dict[str, int] = field(default_factory=dict)  # call -> times the tool was sent
    # call -> (approval id, x, status, expires_at, approver, sealed)
    grant: dict[str, tuple[str, str, str, float, str | None, bool]] = field(default_factory=dict)
    cancelled: bool = False

    def expect(self, call: str, tool: str, x: str, now: float) -> str:
        """The plan the design demands, by name."""
        if self.cancelled:
            return "refuse:cancelled"
        if self.steps >= self.max_steps:
            return "refuse:budget"
        if tool == "wipe":
            return "refuse:policy"
        if call in self.outcome:
            if self.args[call] != (tool, x):
                return "refuse:conflict"
            status = self.outcome[call]
            if status == "absent":
                return "admit:again"
            return {"committed": "replay:ok", "failed": "replay:failed"}.get(
                status, "replay:unknown"
            )
        if self.spent + COST[tool] > self.max_cost:
            return "refuse:budget"
        if tool == "read":
            return "admit:allow"
        found = self.grant.get(call)
        if found is None:
            return "ask:new"
        _, gx, status, expires, approver, sealed = found
        if status == "pending":
            if gx != x:
                return "ask:new"  # the old request can never be used: closed, and a new one
            if now > expires:
                return "refuse:expired"  # nobody decided in time: told, never re-asked
            return "ask:same"
        if status == "expired":
            return "refuse:expired" if gx == x else "ask:new"
        if status == "denied":
            return "refuse:denied"
        # approved (a real decision or a forgery)
        if gx != x:
            return "refuse:invalid"
        if approver != ALICE or now > expires:
            return "refuse:invalid"
        if not sealed:
            return "refuse:forged"
        return "admit:granted"


CALLS = st.sampled_from(["c1", "c2"])
PROPOSE = st.tuples(
    st.just("propose"),
    CALLS,
    st.sampled_from(["read", "write", "write", "write", "wipe"]),
    st.sampled_from(["a", "a", "b"]),
)
APPROVE = st.tuples(
    st.just("approve"),
    CALLS,
    st.sampled_from([ALICE, ALICE, MALLORY]),
    st.sampled_from([True, True, False]),
)
ACTIONS = st.one_of(
    PROPOSE,
    PROPOSE,
    APPROVE,
    APPROVE,
    st.tuples(st.just("deny"), CALLS),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 30.0, 150.0])),
    st.tuples(
        st.just("outcome"), CALLS, st.sampled_from(["committed", "committed", "failed", "unknown"])
    ),
    st.tuples(st.just("absent"), CALLS),
)


def _kind(plan: Plan) -> str:
    if isinstance(plan, Admit):
        if not plan.fresh:
            return "admit:again"
        return "admit:allow" if plan.label == "allow" else "admit:granted"
    if isinstance(plan, Replay):
        if plan.outcome is not None:
            return "replay:ok"
        return "replay:failed" if isinstance(plan.error, ToolFailed) else "replay:unknown"
    if isinstance(plan, Ask):
        return "ask"
    error = plan.error
    for cls, name in (
        (BudgetExceeded, "budget"),
        (PolicyDenied, "policy"),
        (OperationConflict, "conflict"),
        (ApprovalDenied, "denied"),
        (RunStateError, "cancelled"),
    ):
        if isinstance(error, cls):
            return f"refuse:{name}"
    if isinstance(error, ApprovalInvalid) and "before anyone decided" in str(error):
        return "refuse:expired"
    if isinstance(error, ApprovalInvalid) and "seal" in str(error):
        return "refuse:forged"
    if isinstance(error, Denied):
        return "refuse:invalid"
    return f"refuse:other({error!r})"


@settings(max_examples=400, deadline=None)
@given(
    actions=st.lists(ACTIONS, min_size=8, max_size=30),
    cancel_at=st.none() | st.integers(0, 30),
    max_steps=st.integers(3, 30),
    max_cost=st.integers(2, 9),
)
def test_planner_agrees_with_the_design(
    actions: list[tuple[Any, ...]], max_steps: int, max_cost: int, cancel_at: int | None
) -> None:
    world = new_world(Budget(max_steps=max_steps, max_cost=max_cost))
    oracle = Oracle(max_steps=max_steps, max_cost=max_cost)
    now = 1000.0
    ids = iter(range(10_000))

    if cancel_at is not None and cancel_at < len(actions):
        actions = [*actions[:cancel_at], ("cancel",), *actions[cancel_at:]]
    for action in actions:
        verb = action[0]
        if verb == "propose":
            _, call_id, tool, x = action
            expected = oracle.expect(call_id, tool, x, now)
            plan = judge(
                world,
                ToolCall(call_id=call_id, tool=tool, arguments={"x": x}),
                now,
                lambda prefix: f"{prefix}-{next(ids)}",
            )
            got = _kind(plan)
            event(expected)
            if expected.startswith("ask"):
                assert got == "ask", (expected, got, plan)
                signal = plan.signal  # type: ignore[union-attr]
                previous = oracle.grant.get(call_id)
                if expected == "ask:same":
                    assert previous is not None and signal.approval_id == previous[0]
                else:
                    assert previous is None or signal.approval_id != previous[0]
            else:
                assert got == expected, (expected, got, plan)
            _check_writes(plan, world)
            world.apply(plan, now)
            if isinstance(plan, Admit):
                world.admitted[call_id] = plan
            # The oracle's own bookkeeping, from the design.
            counted = expected not in ("refuse:budget", "refuse:cancelled") or (
                expected == "refuse:budget" and oracle.steps < max_steps
            )
            if counted:
                oracle.steps += 1
            if expected.startswith("admit"):
                oracle.runs[call_id] = oracle.runs.get(call_id, 0) + 1
                oracle.outcome[call_id] = "dispatched"
                if expected != "admit:again":
                    oracle.args[call_id] = (tool, x)
                    oracle.spent += COST[tool]
                if expected == "admit:granted":
                    gid, gx, _, exp, who, sealed = oracle.grant[call_id]
                    oracle.grant[call_id] = (gid, gx, "used", exp, who, sealed)
            if expected == "refuse:expired":
                gid, gx, _, exp, who, sealed = oracle.grant[call_id]
                oracle.grant[call_id] = (gid, gx, "expired", exp, who, sealed)
            if expected.startswith("ask"):
                assert isinstance(plan, Ask)
                approval = world.approvals[call_id]
                oracle.grant[call_id] = (
                    approval.approval_id,
                    x,
                    "pending",
                    approval.expires_at,
                    None,
                    False,
                )
        elif verb == "approve":
            _, call_id, who, sealed = action
            pending = world.approvals.get(call_id)
            if pending is None or pending.status is not ApprovalStatus.PENDING:
                continue
            decided = evolve(
                pending,
                status=ApprovalStatus.APPROVED,
                approver=who,
                decided_at=now,
                decision="approve",
            )
            decided = evolve(
                decided, seal=KEYS.seal("grant", grant_payload(decided)) if sealed else None
            )
            world.approvals[call_id] = decided
            gid, gx, _, exp, _, _ = oracle.grant[call_id]
            oracle.grant[call_id] = (gid, gx, "approved", exp, who, sealed)
        elif verb == "deny":
            _, call_id = action
            pending = world.approvals.get(call_id)
            if pending is None or pending.status is not ApprovalStatus.PENDING:
                continue
            world.approvals[call_id] = evolve(
                pending, status=ApprovalStatus.DENIED, approver=ALICE, decided_at=now
            )
            gid, gx, _, exp, _, _ = oracle.grant[call_id]
            oracle.grant[call_id] = (gid, gx, "denied", exp, ALICE, False)
        elif verb == "tick":
            now += action[1]
        elif verb in ("outcome", "absent"):
            call_id = action[1]
            effect = world.effects.get(call_id)
            target = {
                "committed": EffectStatus.COMMITTED,
                "failed": EffectStatus.FAILED,
                "unknown": EffectStatus.UNKNOWN,
            }.get(action[2] if verb == "outcome" else "", EffectStatus.RECONCILED_ABSENT)
            if effect is None or target not in _next(effect.status):
                continue
            admitted = world.admitted.get(call_id)
            if verb == "outcome" and effect.status is EffectStatus.DISPATCHED and admitted:
                # The after-the-tool half: what the gate's settle makes of the tool's answer.
                world.effects[call_id] = _settled(admitted, action[2], now)
            else:
                world.effects[call_id] = effect.advance(
                    target, now, result_json='"ok"' if target is EffectStatus.COMMITTED else None
                )
            oracle.outcome[call_id] = "absent" if verb == "absent" else action[2]
        elif verb == "cancel":
            world.record = evolve(world.record, status=RunStatus.CANCELLED.value)
            oracle.cancelled = True

        # Invariants that hold after every step, whatever the sequence.
        for call_id, times in oracle.runs.items():
            # I2: sent once, and again only after it was known not to have happened.
            assert times == 1 + _absences(world, call_id), f"{call_id} sent {times} times"
        state = RunState.load(world.record)
        assert state.budget.steps <= max_steps
        assert state.budget.spent <= max_cost
        assert state.budget.steps == oracle.steps
        assert state.budget.spent == oracle.spent
        assert state.effects == len(world.effects)


def _settled(admitted: Admit, kind: str, now: float) -> Any:
    """``settle`` on one tool answer of ``kind``, checked against the design: the effect
    moves from dispatched to what happened, a committed result is digested as recorded, a
    failure or an unknown outcome reaches the caller as its own error, a failed call is
    refunded, and the audit event names the call it settles."""
    raw, error = {
        "committed": ({"ok": admitted.arguments["x"]}, None),
        "failed": (None, RuntimeError("boom")),
        "unknown": (None, TimeoutError("no answer")),
    }[kind]
    done = settle(admitted, raw, error, now, latency_ms=1.0)
    effect = done.effect
    assert effect.operation_key == admitted.effect.operation_key
    assert effect.status.value == kind and done.outcome.status is effect.status
    if kind == "committed":
        assert done.failure is None and done.outcome.result == raw
        assert done.result_json == canonical_json(raw)
        assert effect.result_digest == "sha256:" + sha256_hex(canonical_json(raw))
    else:
        assert done.result_json is None and effect.result_digest is None
        want = ToolFailed if kind == "failed" else OutcomeUnknown
        assert isinstance(done.failure, want), done.failure
    assert done.refund == (kind == "failed" and COST[admitted.tool.name] > 0)
    assert done.event["operation_key"] == effect.operation_key
    assert done.event["effect_status"] == kind and done.event["call_id"] == effect.call_id
    return effect


def _next(status: EffectStatus) -> set[EffectStatus]:
    from tether.core.ledger import TRANSITIONS

    return set(TRANSITIONS[status])


def _absences(world: World, call_id: str) -> int:
    effect = world.effects.get(call_id)
    return 0 if effect is None else effect.attempts - 1


def _check_writes(plan: Plan, world: World) -> None:
    """What every plan writes, by the design: a refusal writes its audit entry (integrity
    refusals nothing), an admission writes ``dispatched`` and an entry after it, and no row
    is written without an audit entry after it to record its digest."""
    kinds = [type(w).__name__ for w in plan.writes]
    rows_pending = False
    for w in plan.writes:
        if isinstance(w, EffectWrite | ApprovalWrite):
            rows_pending = True
        elif isinstance(w, AuditWrite):
            rows_pending = False
    assert not rows_pending, f"rows written with no audit entry after them: {kinds}"
    if isinstance(plan, Admit):
        assert plan.effect.status is EffectStatus.DISPATCHED
        assert any(isinstance(w, EffectWrite) and w.effect is plan.effect for w in plan.writes)
        if plan.label == "allow_after_approval" and plan.fresh:
            used = [
                w
                for w in plan.writes
                if isinstance(w, ApprovalWrite) and w.approval.status is ApprovalStatus.USED
            ]
            assert len(used) == 1, "a granted call uses exactly one approval"
    if isinstance(plan, Refuse) and not isinstance(plan.error, IntegrityError):
        assert any(isinstance(w, AuditWrite) for w in plan.writes), "a refusal is audited"


def test_an_edited_principal_is_refused_with_nothing_written() -> None:
    world = new_world(Budget())
    state = RunState.load(world.record)
    forged = RunState(
        principal=Principal(subject="agent", tenant="other", scopes=frozenset()),
        budget=state.budget,
        effects=0,
        principal_seal=state.principal_seal,
    )
    world.record = evolve(world.record, checkpoint_json=forged.dump())
    refused = judge(world, ToolCall(call_id="c1", tool="read", arguments={"x": "a"}), 1.0, str)
    assert isinstance(refused, Refuse) and isinstance(refused.error, IntegrityError)
    assert refused.writes == ()


def test_a_replayed_unknown_outcome_is_not_sent_again() -> None:
    world = new_world(Budget())
    call = ToolCall(call_id="c1", tool="read", arguments={"x": "a"})
    first = judge(world, call, 1.0, str)
    assert isinstance(first, Admit)
    world.apply(first, 1.0)
    world.effects["c1"] = world.effects["c1"].advance(EffectStatus.UNKNOWN, 2.0)
    again = judge(world, call, 3.0, str)
    assert isinstance(again, Replay) and isinstance(again.error, OutcomeUnknown)
    assert not any(isinstance(w, EffectWrite) for w in again.writes)
