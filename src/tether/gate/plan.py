"""How the gate judges one call: a pure function from what it read to a plan.

``plan_call`` takes the call and what the gate read for it in the transaction (the run, the
effect already recorded for the call, the latest approval for it, the ledger's effect count:
``CallView``) and returns one small tagged value — ``Refuse``, ``Replay``, ``Ask`` or
``Admit`` — carrying the rows and audit entries to write. ``tether.gate.pipeline`` applies them in
the same transaction and acts on the tag. Nothing here touches a store, a clock or a tool, so the
composition where invariants I1 (every call is judged), I2 (one effect per call) and I5 (a
grant is bound to the exact call) live is tested without a database
(tests/unit/test_planner.py).

The steps, in the order they run (DESIGN section 1):

0. the run exists, its principal, limits and counters match their seals (``tether.core.runseal``;
   a missing seal does not match), it is not cancelled, and a finished run takes no new call
   (its recorded calls replay, its rollback's undos run);
1. the step budget (a refused step is audited but does not count);
2. argument limits (depth, keys, numbers), before anything walks the arguments;
3. resolve the tool (version, deprecation), fill the tenant, validate the arguments;
4. screen the arguments and ask the policy, with what the run has seen if it has flow rules
   (``tether.policy.provenance``; deny ends here);
5. the ledger: an effect already recorded for this call is a conflict (it changed), a
   re-dispatch (known absent) or a replay — never a second execution;
6. the ledger's effect count matches the run's (rows removed outside tether are refused);
7. the cost and bytes budgets;
8. for an ask verdict: a denial, a pending request, a new request, or a grant verified against
   this exact call and sealed by tether;
9. admit: ``dispatched`` is written before the tool runs.

Every plan but the integrity refusals of step 0 also writes the run (its step counted).

The module is long because it is the whole before-the-tool half, steps 0-7 in their order, as
pure functions: one place to read what is checked and when.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus, CallBinding, grant_payload, verify_grant
from tether.core.budget import Budget
from tether.core.digest import evolve
from tether.core.ledger import Effect, EffectStatus, operation_key
from tether.core.lifecycle import UNDO_PREFIX, RunStatus
from tether.core.runseal import Seals
from tether.core.screening import (
    audited,
    redact,
    screen_arguments,
    screen_result,
    scrub,
    secret_values,
)
from tether.core.verdicts import Verdict
from tether.errors import (
    ApprovalDenied,
    ApprovalExpired,
    ApprovalInvalid,
    ApprovalRequired,
    Denied,
    IntegrityError,
    InvalidArguments,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    RunStateError,
    StoreError,
    TetherError,
    ToolFailed,
)
from tether.gate.desk import approval_audit
from tether.gate.state import RunState, checkpoint, seal_problem_of
from tether.policy.provenance import ProvenanceIndex
from tether.policy.rules import Decision, Policy, decide
from tether.store.rows import CallView, RunRecord
from tether.tools.limits import argument_problems
from tether.tools.registry import Registry, Tool
from tether.tools.tenancy import fill_tenant


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A call the agent proposes. ``call_id`` is unique within the run."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tool_version: str | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the agent gets back for a call that ran (or was replayed from the ledger)."""

    operation_key: str
    status: EffectStatus
    result: Any
    text: str
    replayed: bool
    policy_decision: str
    external_reference: str | None = None
    flags: tuple[str, ...] = ()


# -- writes: what a plan asks the one writer to do, in order ---------------------------------
@dataclass(frozen=True, slots=True)
class AuditWrite:
    kind: str
    data: Mapping[str, Any]
    actor: str | None
    redactions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EffectWrite:
    effect: Effect
    expected: EffectStatus | None  # None inserts the row


@dataclass(frozen=True, slots=True)
class ApprovalWrite:
    approval: Approval
    expected: ApprovalStatus | None  # None inserts the row


@dataclass(frozen=True, slots=True)
class RunWrite:
    record: RunRecord
    checkpoint_json: str


Write = AuditWrite | EffectWrite | ApprovalWrite | RunWrite


# -- plans -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Refuse:
    """The call is not run; ``error`` is raised once the writes (its audit entry) commit."""

    error: BaseException
    writes: tuple[Write, ...]


@dataclass(frozen=True, kw_only=True)
class Replay:
    """The call already has an outcome: the ledger answers, the tool is not called."""

    effect: Effect
    outcome: Outcome | None  # None: the recorded outcome is a failure or unknown
    error: TetherError | None
    writes: tuple[Write, ...]


@dataclass(frozen=True, kw_only=True)
class Ask:
    """A human must decide first; ``signal`` says which approval to decide."""

    signal: ApprovalRequired
    writes: tuple[Write, ...]


@dataclass(frozen=True, kw_only=True)
class Admit:
    """``dispatched`` is written: call the tool with the effect's operation key."""

    fresh: bool  # a new effect row, not the re-dispatch of one known absent
    effect: Effect
    tool: Tool
    arguments: dict[str, Any]
    decision: Decision
    label: str  # "allow" or "allow_after_approval"
    step: int
    actor: str
    flags: tuple[str, ...]
    redactions: tuple[str, ...]
    counts_bytes: bool
    secrets: tuple[str, ...]
    writes: tuple[Write, ...]
    note: str = ""  # what the model reads above the result (an approver's edit)


Plan = Refuse | Replay | Ask | Admit


def plan_call(
    call: ToolCall,
    view: CallView,
    *,
    run_id: str,
    registry: Registry,
    policy: Policy | None,
    seals: Seals,
    now: float,
    mint: Callable[[str], str],
    provenance: ProvenanceIndex | None = None,
) -> Plan:
    """Judge one call (steps 0-9 of the module docstring). ``mint`` names a new approval;
    ``provenance`` is what the run has seen, for the policy's flow rules (read, not changed)."""
    record = view.run
    if record is None:
        missing = StoreError(f"no run {run_id}; start one with Gate.start_run or `tether run`")
        return Refuse(error=missing, writes=())
    state = RunState.load(record)
    problem = seal_problem_of(state, run_id, seals, record.checkpoint_json)
    if problem is not None:
        # Who the run acts for, its limits or its counters were edited in the row (or a
        # seal removed): trusting it could hand the agent another tenant's data, scopes it
        # was never given, steps it already spent or a call the ledger already holds.
        edited = IntegrityError(
            f"{problem}: the run row was changed outside tether, so none of its calls is "
            "judged — run `tether audit verify`"
        )
        return Refuse(error=edited, writes=())
    actor = state.principal.subject
    base: dict[str, Any] = {"call_id": call.call_id, "tool": call.tool}
    stopped = None
    if record.status == RunStatus.CANCELLED or state.cancelled:
        stopped = f"run {run_id} was cancelled; none of its calls is dispatched any more"
    elif (
        view.effect is None
        and RunStatus(record.status).finished
        and not call.call_id.startswith(UNDO_PREFIX)
    ):
        # A finished run's recorded calls still replay (a resumed graph reads them back) and
        # its rollback's undos still run; anything new would act after the run said it was
        # done, with nobody driving it to read the answer.
        stopped = f"run {run_id} is {record.status}; it takes no new calls (start a new run)"
    if stopped is not None:
        refused = RunStateError(stopped)
        return Refuse(
            error=refused, writes=(AuditWrite("call_refused", {**base, "error": stopped}, actor),)
        )
    try:
        budget = state.budget.step(call.tool)
    except TetherError as e:
        # Over the step budget: audited, and the run is not written (the step did not happen).
        return Refuse(
            error=e, writes=(AuditWrite("budget_exceeded", {**base, "error": str(e)}, actor),)
        )
    judged = _judge(
        call, view, state, budget, run_id, registry, policy, seals, now, mint, provenance
    )
    effects = state.effects
    if isinstance(judged, Admit) and judged.fresh:
        effects = (effects if effects is not None else view.effect_count) + 1
    # The step counts whatever the verdict; one write of the run per transaction. It goes
    # first: its compare-and-swap is then answered with the reads before the audit entry
    # (one round trip on a pipelined store), and no entry records a run row anyway.
    after = checkpoint(state, _budget_after(judged, budget), effects, run_id=run_id, seals=seals)
    run_write = RunWrite(record, after)
    return _with_writes(judged, (run_write, *judged.writes))


def _judge(
    call: ToolCall,
    view: CallView,
    state: RunState,
    budget: Budget,
    run_id: str,
    registry: Registry,
    policy: Policy | None,
    seals: Seals,
    now: float,
    mint: Callable[[str], str],
    provenance: ProvenanceIndex | None = None,
) -> Plan:
    """Steps 2-9: everything after the run itself was found sound and the step counted."""
    actor = state.principal.subject
    base: dict[str, Any] = {"call_id": call.call_id, "tool": call.tool}
    problems = argument_problems(call.arguments)
    if problems:
        # Refused before anything hashes, redacts or validates them: each of those walks
        # the arguments and could be made to fail in its own way.
        problems = [redact(p[:300])[0] for p in problems]
        invalid = InvalidArguments(call.tool, problems)
        data = {**base, "problems": problems, "error": str(invalid)}
        return Refuse(error=invalid, writes=(AuditWrite("call_invalid", data, actor),))
    known = registry.find(call.tool)
    secrets = secret_values(call.arguments, known.manifest.sensitive_fields if known else ())

    def refuse(kind: str, error: BaseException, *before: Write, **data: Any) -> Refuse:
        entry = scrub({**base, **data, "error": str(error)}, secrets)
        return Refuse(error=error, writes=(*before, AuditWrite(kind, entry, actor)))

    arguments = dict(call.arguments)
    try:
        tool = registry.resolve(call.tool, call.tool_version)
        tenant_parts = tool.manifest.tenant_parts
        if tenant_parts is not None:
            # Never the tool's default: it may name someone else's tenant.
            arguments = fill_tenant(arguments, tenant_parts, state.principal.tenant)
        tool.validate(arguments)
    except Denied as e:
        return refuse("call_denied", e, reasons=list(e.reasons))
    except InvalidArguments as e:
        return refuse("call_invalid", e, problems=e.problems)

    manifest = tool.manifest
    binding = CallBinding(
        run_id=run_id,
        call_id=call.call_id,
        tool=manifest.name,
        tool_version=manifest.version,
        tool_schema_digest=manifest.schema_digest,
        arguments=arguments,
        tenant=state.principal.tenant,
        actor=actor,
    )
    safe_args, redactions = redact(arguments, manifest.sensitive_fields)
    flags = screen_arguments(arguments, size=len(binding.arguments_json.encode()))
    decision = decide(
        policy,
        state.principal,
        manifest,
        arguments,
        flags,
        provenance,
        argument_digest=binding.argument_digest,
    )
    base.update(
        tool_version=manifest.version,
        arguments=audited(safe_args, binding.arguments_json, binding.argument_digest),
    )
    if decision.verdict is Verdict.DENY:
        denied = PolicyDenied(call.tool, decision.reasons, decision.policy_version)
        return refuse("call_denied", denied, decision=decision.to_dict())

    def admit(effect: Effect, label: str, writes: tuple[Write, ...]) -> Admit:
        return Admit(
            fresh=existing is None,
            effect=effect,
            tool=tool,
            arguments=arguments,
            decision=decision,
            label=label,
            step=budget.steps,
            actor=actor,
            flags=flags,
            redactions=tuple(redactions),
            counts_bytes=budget.max_bytes is not None,
            secrets=tuple(secrets),
            writes=writes,
        )

    # I2: the call is its identity, whatever version or key it would have now.
    existing = view.effect
    if existing is not None:
        changes = existing.changes(
            tool=manifest.name,
            tool_version=manifest.version,
            schema_digest=manifest.schema_digest,
            argument_digest=binding.argument_digest,
        )
        if changes:
            conflict = OperationConflict(existing.operation_key, changes)
            return refuse(
                "operation_conflict",
                conflict,
                operation_key=existing.operation_key,
                changes=list(changes),
            )
        if existing.status is EffectStatus.RECONCILED_ABSENT:
            # Known not to have happened: send it again under the same key. Its grant (if
            # it needed one) was for this very operation, so it is not asked again.
            retry = existing.advance(EffectStatus.DISPATCHED, now, attempts=existing.attempts + 1)
            label = "allow" if decision.verdict is Verdict.ALLOW else "allow_after_approval"
            audit = {"operation_key": retry.operation_key, "attempt": retry.attempts}
            return admit(
                retry,
                label,
                (
                    EffectWrite(retry, EffectStatus.RECONCILED_ABSENT),
                    AuditWrite("effect_redispatched", audit, actor),
                ),
            )
        return _replay(existing, tool, actor)
    if state.effects is not None and view.effect_count != state.effects:
        # The run says it dispatched more (or fewer) calls than the ledger holds: rows were
        # removed or added outside tether. Trusting the absence could run a call a second
        # time, so refuse until someone looks.
        mismatch = IntegrityError(
            f"run {run_id} recorded {state.effects} effects but the ledger holds "
            f"{view.effect_count}; effect rows were changed outside tether, so no call of "
            "this run is dispatched — run `tether audit verify`"
        )
        return refuse("ledger_mismatch", mismatch)

    try:
        budget.check_spend(call.tool, manifest.cost)
        budget.check_bytes(call.tool, 0 if budget.max_bytes is None else 1)
    except TetherError as e:
        return refuse("budget_exceeded", e)

    label = "allow"
    grant_writes: tuple[Write, ...] = ()
    if decision.verdict is Verdict.ASK:
        assert policy is not None  # an ask verdict needs a policy
        granted = _grant(
            view.approval,
            binding,
            decision,
            policy,
            seals,
            now,
            mint,
            refuse,
            manifest.sensitive_fields,
        )
        if not isinstance(granted, tuple):
            return granted
        grant_writes = granted
        label = "allow_after_approval"

    effect = Effect(
        operation_key=operation_key(run_id, call.call_id, manifest.name, manifest.version),
        run_id=run_id,
        call_id=call.call_id,
        tool_name=manifest.name,
        tool_version=manifest.version,
        argument_digest=binding.argument_digest,
        schema_digest=manifest.schema_digest,
        status=EffectStatus.DISPATCHED,
        attempts=1,
        created_at=now,
        updated_at=now,
    )
    dispatched = scrub(
        {
            **base,
            "operation_key": effect.operation_key,
            "policy_decision": label,
            "cost": manifest.cost,
        },
        secrets,
    )
    return admit(
        effect,
        label,
        (
            *grant_writes,
            EffectWrite(effect, None),
            AuditWrite("effect_dispatched", dispatched, actor, tuple(redactions)),
        ),
    )


def _grant(
    found: Approval | None,
    binding: CallBinding,
    decision: Decision,
    policy: Policy,
    seals: Seals,
    now: float,
    mint: Callable[[str], str],
    refuse: Callable[..., Refuse],
    sensitive_fields: frozenset[str],
) -> tuple[Write, ...] | Refuse | Ask:
    """Step 8: the writes that use a grant bound to this call, or the plan that stops here."""
    writes: tuple[Write, ...] = ()

    def expire(approval: Approval) -> Approval:
        nonlocal writes
        expired = evolve(approval, status=ApprovalStatus.EXPIRED)
        writes = (
            *writes,
            ApprovalWrite(expired, ApprovalStatus.PENDING),
            AuditWrite("approval_expired", approval_audit(expired), None),
        )
        return expired

    if found is not None and found.status is ApprovalStatus.PENDING and now > found.expires_at:
        found = expire(found)
    if found is not None and found.status is ApprovalStatus.DENIED:
        denied = ApprovalDenied(found.approval_id, found.tool, found.approver, found.reason)
        return refuse("call_denied", denied, *writes, approval_id=found.approval_id)
    if found is not None and found.status is ApprovalStatus.PENDING:
        if found.call_digest == binding.call_digest:
            waiting = ApprovalRequired(
                found.approval_id, binding.tool, dict(binding.arguments), found.expires_at
            )
            return Ask(signal=waiting, writes=writes)
        # The same call id now carries other arguments: the old request can never be used,
        # so close it rather than leave it pending for someone to decide.
        found = expire(found)
    if (
        found is not None
        and found.status is ApprovalStatus.EXPIRED
        and found.decided_at is None
        and found.call_digest == binding.call_digest
    ):
        # Nobody decided this very call in time. It is not asked again behind the model's
        # back: the model is told, and proposes it again (a new call) if it still wants it.
        expired = ApprovalExpired(
            f"approval {found.approval_id} for '{binding.tool}' expired before anyone decided "
            "it; the call did not run (propose it again, as a new call, to ask again)"
        )
        return refuse("call_denied", expired, *writes, approval_id=found.approval_id)
    approvers = policy.approvers_for(binding.tool)
    if found is None or found.status is ApprovalStatus.EXPIRED:
        if not approvers:
            # A request nobody may decide would leave the run waiting forever.
            nobody = PolicyDenied(
                binding.tool,
                ("the policy asks for approval but names no approver for this tool",),
                decision.policy_version,
            )
            return refuse("call_denied", nobody, *writes, decision=decision.to_dict())
        tool = binding.tool
        request = Approval.request(
            mint("apr"),
            binding,
            policy_version=decision.policy_version,
            now=now,
            ttl_s=policy.approval_ttl_s,
            approvers=approvers,
            sensitive_fields=sensitive_fields,
            provenance=tuple(label.to_dict() for label in decision.provenance),
            reasons=decision.reasons,
        )
        audit = {**approval_audit(request), "reasons": list(decision.reasons)}
        waiting = ApprovalRequired(
            request.approval_id, tool, dict(binding.arguments), request.expires_at
        )
        return Ask(
            signal=waiting,
            writes=(
                *writes,
                ApprovalWrite(request, None),
                AuditWrite("approval_requested", audit, binding.actor),
            ),
        )
    try:
        verify_grant(
            found,
            binding,
            policy_version=decision.policy_version,
            authorized=approvers,
            now=now,
        )
    except Denied as e:
        return refuse(
            "call_denied", e, *writes, approval_id=found.approval_id, reasons=list(e.reasons)
        )
    # After the binding checks, whose refusals say precisely what differs.
    if not seals.verify_seal("grant", grant_payload(found), found.seal):
        # Status "approved" without tether's seal: written into the row, not decided.
        forged = ApprovalInvalid(
            f"approval {found.approval_id} is marked approved but carries no valid seal of a "
            "decision: it was not decided through tether, so it grants nothing"
        )
        return refuse("call_denied", forged, *writes, approval_id=found.approval_id)
    used = evolve(found, status=ApprovalStatus.USED, used_at=now)
    return (*writes, ApprovalWrite(used, ApprovalStatus.APPROVED))


def _replay(effect: Effect, tool: Tool, actor: str) -> Replay:
    audit = AuditWrite(
        "effect_replayed",
        {"operation_key": effect.operation_key, "status": effect.status.value},
        actor,
    )
    if effect.status.took_effect:
        value = json.loads(effect.result_json) if effect.result_json is not None else None
        outcome = Outcome(
            operation_key=effect.operation_key,
            status=effect.status,
            result=value,
            text=screen_result(value, tool.manifest.max_result_bytes).text,
            replayed=True,
            policy_decision="replay",
            external_reference=effect.external_reference,
        )
        return Replay(effect=effect, outcome=outcome, error=None, writes=(audit,))
    error: TetherError
    if effect.status is EffectStatus.FAILED:
        error = ToolFailed(effect.tool_name, effect.operation_key, RuntimeError(effect.error))
    else:
        error = OutcomeUnknown(effect.tool_name, effect.operation_key)
    return Replay(effect=effect, outcome=None, error=error, writes=(audit,))


def _budget_after(plan: Plan, budget: Budget) -> Budget:
    """The budget the run keeps: a fresh dispatch spends the tool's cost up front."""
    if isinstance(plan, Admit) and plan.fresh:
        return budget.spend(plan.tool.name, plan.tool.manifest.cost)
    return budget


def _with_writes(plan: Plan, writes: tuple[Write, ...]) -> Plan:
    return evolve(plan, writes=writes)
