"""The gate: the one pipeline every tool call passes (DESIGN section 1).

A call is judged by pure steps (resolve, validate, screen, decide, budget), then the I/O
steps: find a grant or ask for one, write ``dispatched`` durably, call the tool with its
operation key, record the outcome. Every refusal is audited in the same transaction that
records the step it used, and raised only after that transaction commits, so a rejected call
leaves an intact audit trail and no half-written effect.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pydantic_core

from tether.approvals import Approval, ApprovalStatus, CallBinding, grant_payload, verify_grant
from tether.budget import Budget
from tether.crash import crash_point
from tether.decisions import (
    approval_audit,
    decide_approval,
    edit_approval,
    expire,
    latest_approval,
)
from tether.digest import canonical_json, evolve, sha256_hex
from tether.errors import (
    ApprovalDenied,
    ApprovalInvalid,
    ApprovalRequired,
    ApprovalStateError,
    ConfigurationError,
    Denied,
    IntegrityError,
    InternalError,
    InvalidArguments,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    Signal,
    StoreError,
    TetherError,
    ToolFailed,
)
from tether.ledger import Effect, EffectStatus, operation_key
from tether.lifecycle import RunStatus
from tether.limits import argument_problems
from tether.policy import Decision, Policy, Principal, Verdict, decide
from tether.screening import redact, screen_arguments, screen_result, scrub, secret_values
from tether.state import RunState, new_id
from tether.store.base import RunRecord, Store, Tx
from tether.tenancy import fill_tenant
from tether.tools import Registry, Tool

Clock = Callable[[], float]
EventListener = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A call the agent proposes. ``call_id`` is unique within the run."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tool_version: str | None = None


@dataclass(frozen=True)
class Result:
    """What a handler may return to name the outside system's record of the call."""

    value: Any
    external_reference: str | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    operation_key: str
    status: EffectStatus
    result: Any
    text: str
    replayed: bool
    policy_decision: str
    external_reference: str | None = None
    flags: tuple[str, ...] = ()


class Gate:
    """The pipeline every tool call passes; see the module docstring for its steps."""

    def __init__(
        self,
        registry: Registry,
        policy: Policy | None,
        store: Store,
        *,
        clock: Clock = time.time,
    ) -> None:
        if policy is not None:
            unanswerable = policy.asks_without_approvers(registry.manifests())
            if unanswerable:
                raise ConfigurationError(
                    f"policy {policy.version} would ask for approval of "
                    f"{', '.join(unanswerable)} but names no approver; add approvers or make "
                    "those calls allow or deny"
                )
        self.registry = registry
        self.policy = policy
        self.store = store
        self.clock = clock
        self._listeners: list[EventListener] = []

    def subscribe(self, listener: EventListener) -> None:
        """Receive each ``tool_effect_resolved`` event after its transaction commits."""
        self._listeners.append(listener)

    @property
    def policy_version(self) -> str:
        return self.policy.version if self.policy is not None else ""

    # -- runs --------------------------------------------------------------------------------
    def start_run(
        self,
        principal: Principal,
        *,
        budget: Budget | None = None,
        run_id: str | None = None,
        status: str = RunStatus.RUNNING.value,
    ) -> str:
        run_id = run_id or new_id("run")
        now = self.clock()
        budget = budget or Budget()
        state = RunState(
            principal=principal,
            budget=budget,
            effects=0,
            principal_seal=self.store.keys.seal(
                "principal", _sealed_identity(run_id, principal, budget)
            ),
        )
        record = RunRecord(
            run_id=run_id,
            state_version=1,
            status=status,
            principal_id=principal.subject,
            tenant_id=principal.tenant,
            policy_version=self.policy_version,
            checkpoint_json=state.dump(),
            created_at=now,
            updated_at=now,
        )
        with self.store.transaction() as tx:
            tx.insert_run(record)
            tx.append_audit(
                "run_started",
                at=now,
                run_id=run_id,
                actor=principal.subject,
                data={"principal": principal.to_dict(), "budget": state.budget.to_dict()},
            )
        return run_id

    def run_state(self, run_id: str) -> RunState:
        with self.store.read() as tx:
            return RunState.load(_load_run(tx, run_id))

    # -- the pipeline ------------------------------------------------------------------------
    def call(self, run_id: str, call: ToolCall) -> Outcome:
        """Judge and, if allowed, run one call. Raises a ``Denied`` or a signal otherwise."""
        started = time.perf_counter()
        now = self.clock()
        try:
            with self.store.transaction() as tx:
                verdict = self._admit(tx, run_id, call, now)
                if isinstance(verdict, _Admitted):
                    crash_point("gate.before_dispatch_commit")
        except (TetherError, Signal):
            raise
        except Exception as e:
            # A bug, not a verdict: the transaction rolled back, so nothing was dispatched.
            raise InternalError(
                f"tether could not judge call {call.call_id} ('{call.tool}'): {e!r}; nothing "
                "was dispatched or recorded — this is a bug, please report it"
            ) from e
        if isinstance(verdict, BaseException):
            raise verdict
        if isinstance(verdict, Outcome):
            return verdict
        crash_point("gate.after_dispatch_commit")
        return self._dispatch(verdict, started)

    def _admit(
        self, tx: Tx, run_id: str, call: ToolCall, now: float
    ) -> _Admitted | Outcome | BaseException:
        """Steps 1-7 in one transaction: either admitted (dispatched written), a replay, or a
        refusal to raise once the audit entry recording it has committed."""
        record = _load_run(tx, run_id)
        state = RunState.load(record)
        if state.principal_seal is not None and not self.store.keys.verify_seal(
            "principal",
            _sealed_identity(run_id, state.principal, state.budget),
            state.principal_seal,
        ):
            # Who the run acts for (and its limits) was edited in the row: trusting it could
            # hand the agent another tenant's data or scopes it was never given.
            raise IntegrityError(
                f"run {run_id}'s principal or budget limits do not match their seal: the run "
                "row was edited outside tether, so none of its calls is judged — run "
                "`tether audit verify`"
            )
        try:
            stepped = state.budget.step(call.tool)
        except TetherError as e:
            tx.append_audit(
                "budget_exceeded",
                at=now,
                run_id=run_id,
                actor=state.principal.subject,
                data={"call_id": call.call_id, "tool": call.tool, "error": str(e)},
            )
            return e
        verdict, budget = self._judge(tx, run_id, state, stepped, call, now)
        effects = state.effects
        if isinstance(verdict, _Admitted) and verdict.fresh:
            effects = effects + 1 if effects is not None else tx.count_effects(run_id)
        # The step counts whatever the verdict; one write of the run per transaction.
        tx.update_run(record, **_state_changes(state, budget, now, effects))
        return verdict

    def _judge(
        self, tx: Tx, run_id: str, state: RunState, budget: Budget, call: ToolCall, now: float
    ) -> tuple[_Admitted | Outcome | BaseException, Budget]:
        actor = state.principal.subject
        base: dict[str, Any] = {"call_id": call.call_id, "tool": call.tool}
        problems = argument_problems(call.arguments)
        if problems:
            # Refused before anything hashes, redacts or validates them: each of those walks
            # the arguments and could be made to fail in its own way.
            problems = [redact(p[:300])[0] for p in problems]
            invalid = InvalidArguments(call.tool, problems)
            tx.append_audit(
                "call_invalid",
                at=now,
                run_id=run_id,
                actor=actor,
                data={**base, "problems": problems, "error": str(invalid)},
            )
            return invalid, budget
        known = self.registry.find(call.tool)
        secrets = secret_values(call.arguments, known.manifest.sensitive_fields if known else ())

        def refuse(kind: str, error: BaseException, **data: Any) -> BaseException:
            entry = scrub({**base, **data, "error": str(error)}, secrets)
            tx.append_audit(kind, at=now, run_id=run_id, actor=actor, data=entry)
            return error

        arguments = dict(call.arguments)
        try:
            tool = self.registry.resolve(call.tool, call.tool_version)
            tenant_parts = tool.manifest.tenant_parts
            if tenant_parts is not None:
                # Never the tool's default: it may name someone else's tenant.
                arguments = fill_tenant(arguments, tenant_parts, state.principal.tenant)
            tool.validate(arguments)
        except Denied as e:
            return refuse("call_denied", e, reasons=list(e.reasons)), budget
        except InvalidArguments as e:
            return refuse("call_invalid", e, problems=e.problems), budget

        manifest = tool.manifest
        key = operation_key(run_id, call.call_id, manifest.name, manifest.version)
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
        decision = decide(self.policy, state.principal, manifest, arguments, flags)
        base.update(tool_version=manifest.version, arguments=safe_args)
        if decision.verdict is Verdict.DENY:
            denied = PolicyDenied(call.tool, decision.reasons, decision.policy_version)
            return refuse("call_denied", denied, decision=decision.to_dict()), budget

        def admit(effect: Effect, label: str, budget: Budget, *, fresh: bool) -> _Admitted:
            return _Admitted(
                fresh=fresh,
                tool=tool,
                effect=effect,
                arguments=arguments,
                decision=decision,
                label=label,
                step=budget.steps,
                actor=actor,
                flags=flags,
                redactions=tuple(redactions),
                counts_bytes=budget.max_bytes is not None,
                secrets=tuple(secrets),
            )

        # I2: the call is its identity, whatever version or key it would have now.
        existing = tx.effect_for_call(run_id, call.call_id)
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
                ), budget
            if existing.status is EffectStatus.RECONCILED_ABSENT:
                # Known not to have happened: send it again under the same key. Its grant
                # (if it needed one) was for this very operation, so it is not asked again.
                retry = existing.advance(
                    EffectStatus.DISPATCHED, now, attempts=existing.attempts + 1
                )
                tx.update_effect(retry, EffectStatus.RECONCILED_ABSENT)
                tx.append_audit(
                    "effect_redispatched",
                    at=now,
                    run_id=run_id,
                    actor=actor,
                    data={"operation_key": key, "attempt": retry.attempts},
                )
                label = "allow" if decision.verdict is Verdict.ALLOW else "allow_after_approval"
                return admit(retry, label, budget, fresh=False), budget
            return self._replay(tx, existing, tool, actor, now), budget
        if state.effects is not None and tx.count_effects(run_id) != state.effects:
            # The run says it dispatched more (or fewer) calls than the ledger holds: rows
            # were removed or added outside tether. Trusting the absence could run a call a
            # second time, so refuse until someone looks.
            mismatch = IntegrityError(
                f"run {run_id} recorded {state.effects} effects but the ledger holds "
                f"{tx.count_effects(run_id)}; effect rows were changed outside tether, so no "
                "call of this run is dispatched — run `tether audit verify`"
            )
            return refuse("ledger_mismatch", mismatch), budget

        try:
            budget.check_spend(call.tool, manifest.cost)
            budget.check_bytes(call.tool, 0 if budget.max_bytes is None else 1)
        except TetherError as e:
            return refuse("budget_exceeded", e), budget

        label = "allow"
        if decision.verdict is Verdict.ASK:
            granted = self._grant(
                tx, binding, decision, actor, now, refuse, manifest.sensitive_fields
            )
            if isinstance(granted, BaseException):
                return granted, budget
            label = "allow_after_approval"

        effect = Effect(
            operation_key=key,
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
        tx.insert_effect(effect)
        budget = budget.spend(call.tool, manifest.cost)
        tx.append_audit(
            "effect_dispatched",
            at=now,
            run_id=run_id,
            actor=actor,
            data=scrub(
                {**base, "operation_key": key, "policy_decision": label, "cost": manifest.cost},
                secrets,
            ),
            redactions=redactions,
        )
        return admit(effect, label, budget, fresh=True), budget

    def _grant(
        self,
        tx: Tx,
        binding: CallBinding,
        decision: Decision,
        actor: str,
        now: float,
        refuse: Callable[..., BaseException],
        sensitive_fields: frozenset[str] = frozenset(),
    ) -> Approval | BaseException:
        """Step 6: use a grant bound to this call, or persist a request and signal."""
        assert self.policy is not None  # an ask verdict needs a policy
        found = tx.find_approval(binding.run_id, binding.call_id)
        if found is not None and found.status is ApprovalStatus.PENDING and now > found.expires_at:
            found = expire(tx, found, now)
        if found is not None and found.status is ApprovalStatus.DENIED:
            return refuse(
                "call_denied",
                ApprovalDenied(found.approval_id, found.tool, found.approver, found.reason),
                approval_id=found.approval_id,
            )
        if (
            found is not None
            and found.status is ApprovalStatus.PENDING
            and found.call_digest == binding.call_digest
        ):
            return ApprovalRequired(
                found.approval_id, binding.tool, dict(binding.arguments), found.expires_at
            )
        if found is not None and found.status is ApprovalStatus.PENDING:
            # The same call id now carries other arguments: the old request can never be
            # used, so close it rather than leave it pending for someone to decide.
            found = expire(tx, found, now)
        if found is None or found.status is ApprovalStatus.EXPIRED:
            if not self.policy.approvers_for(binding.tool):
                # A request nobody may decide would leave the run waiting forever.
                nobody = PolicyDenied(
                    binding.tool,
                    ("the policy asks for approval but names no approver for this tool",),
                    decision.policy_version,
                )
                return refuse("call_denied", nobody, decision=decision.to_dict())
            request = Approval.request(
                new_id("apr"),
                binding,
                policy_version=decision.policy_version,
                now=now,
                ttl_s=self.policy.approval_ttl_s,
                approvers=self.policy.approvers_for(binding.tool),
                sensitive_fields=sensitive_fields,
            )
            tx.insert_approval(request)
            tx.append_audit(
                "approval_requested",
                at=now,
                run_id=binding.run_id,
                actor=actor,
                data={**approval_audit(request), "reasons": list(decision.reasons)},
            )
            return ApprovalRequired(
                request.approval_id, binding.tool, dict(binding.arguments), request.expires_at
            )
        try:
            verify_grant(
                found,
                binding,
                policy_version=decision.policy_version,
                authorized=self.policy.approvers_for(binding.tool),
                now=now,
            )
        except Denied as e:
            return refuse("call_denied", e, approval_id=found.approval_id, reasons=list(e.reasons))
        # After the binding checks, whose refusals say precisely what differs.
        if not self.store.keys.verify_seal("grant", grant_payload(found), found.seal):
            # Status "approved" without tether's seal: written into the row, not decided.
            forged = ApprovalInvalid(
                f"approval {found.approval_id} is marked approved but carries no valid seal of "
                "a decision: it was not decided through tether, so it grants nothing"
            )
            return refuse("call_denied", forged, approval_id=found.approval_id)
        used = _replace_approval(found, status=ApprovalStatus.USED, used_at=now)
        tx.update_approval(used, ApprovalStatus.APPROVED)
        return used

    def _replay(
        self, tx: Tx, effect: Effect, tool: Tool, actor: str, now: float
    ) -> Outcome | BaseException:
        tx.append_audit(
            "effect_replayed",
            at=now,
            run_id=effect.run_id,
            actor=actor,
            data={"operation_key": effect.operation_key, "status": effect.status.value},
        )
        if effect.status.took_effect:
            value = json.loads(effect.result_json) if effect.result_json is not None else None
            return Outcome(
                operation_key=effect.operation_key,
                status=effect.status,
                result=value,
                text=screen_result(value, tool.manifest.max_result_bytes).text,
                replayed=True,
                policy_decision="replay",
                external_reference=effect.external_reference,
            )
        if effect.status is EffectStatus.FAILED:
            return ToolFailed(effect.tool_name, effect.operation_key, RuntimeError(effect.error))
        return OutcomeUnknown(effect.tool_name, effect.operation_key)

    def _dispatch(self, admitted: _Admitted, started: float) -> Outcome:
        """Steps 8-10: call the tool with its key, then record what happened."""
        tool, effect = admitted.tool, admitted.effect
        failure: BaseException | None = None
        raw: Any = None
        try:
            raw = _invoke(tool, admitted.arguments, effect.operation_key)
            target = EffectStatus.COMMITTED
        except TimeoutError:
            target = EffectStatus.UNKNOWN
            failure = OutcomeUnknown(tool.name, effect.operation_key)
        except Exception as e:
            target = EffectStatus.FAILED
            detail = _safe_error(e, admitted.secrets)
            failure = ToolFailed(tool.name, effect.operation_key, e, detail=detail)
            failure.__cause__ = e
        crash_point("gate.after_tool_return")
        # From here on nothing may raise before the outcome is recorded: the tool has run.
        value, reference, problem = _recordable(raw) if failure is None else (None, None, None)
        safe_value, result_redactions = redact(value, tool.manifest.sensitive_fields)
        result_json = canonical_json(safe_value) if target is EffectStatus.COMMITTED else None
        screened = screen_result(
            safe_value if isinstance(safe_value, str) or result_json is None else result_json,
            tool.manifest.max_result_bytes,
        )
        if problem is not None:
            screened = replace(screened, flags=(*screened.flags, problem))
        now = self.clock()
        resolved = effect.advance(
            target,
            now,
            result_json=result_json,
            result_digest=None if result_json is None else "sha256:" + sha256_hex(result_json),
            external_reference=reference,
            error=problem
            if failure is None
            else _safe_error(failure.__cause__ or failure, admitted.secrets),
        )
        redactions = sorted(set(admitted.redactions) | set(result_redactions))
        event: dict[str, Any] = {
            "event": "tool_effect_resolved",
            "run_id": effect.run_id,
            "step_id": f"step-{admitted.step}",
            "call_id": effect.call_id,
            "operation_key": effect.operation_key,
            "tool": tool.name,
            "tool_version": effect.tool_version,
            "policy_version": admitted.decision.policy_version,
            "policy_decision": admitted.label,
            "effect_status": target.value,
            "result_digest": resolved.result_digest,
            "external_reference": reference,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            "redactions": redactions,
        }
        try:
            with self.store.transaction() as tx:
                tx.update_effect(resolved, EffectStatus.DISPATCHED)
                refund = target is EffectStatus.FAILED and tool.manifest.cost > 0
                if refund or (admitted.counts_bytes and target is EffectStatus.COMMITTED):
                    # A failed call did not happen, so it costs nothing (an unknown one may have).
                    record = _load_run(tx, effect.run_id)
                    state = RunState.load(record)
                    budget = (
                        state.budget.refund(tool.manifest.cost)
                        if refund
                        else state.budget.add_bytes(len(screened.text.encode()))
                    )
                    tx.update_run(record, **_state_changes(state, budget, now))
                tx.append_audit(
                    "tool_effect_resolved",
                    at=now,
                    run_id=effect.run_id,
                    actor=admitted.actor,
                    data=event,
                    redactions=redactions,
                )
        except (TetherError, Signal):
            raise
        except Exception as e:
            # The tool ran, but its outcome is not recorded: the effect stays ``dispatched``
            # (durable), so recovery reconciles it rather than anyone guessing.
            raise InternalError(
                f"the outcome of {effect.operation_key} could not be recorded ({e!r}); the "
                "effect stays dispatched until `tether recover` reconciles it"
            ) from e
        crash_point("gate.after_outcome_commit")
        for listener in self._listeners:
            listener(event)
        if failure is not None:
            raise failure from failure.__cause__
        return Outcome(
            operation_key=effect.operation_key,
            status=target,
            result=value,
            text=screened.text,
            replayed=False,
            policy_decision=admitted.label,
            external_reference=reference,
            flags=admitted.flags + tuple(f"redacted '{n}'" for n in redactions) + screened.flags,
        )

    # -- human decisions ---------------------------------------------------------------------
    def approve(self, approval_id: str, approver: str, *, reason: str | None = None) -> Approval:
        return self._decide(approval_id, approver, approve=True, reason=reason)

    def deny(self, approval_id: str, approver: str, *, reason: str | None = None) -> Approval:
        return self._decide(approval_id, approver, approve=False, reason=reason)

    def _decide(
        self, approval_id: str, approver: str, *, approve: bool, reason: str | None
    ) -> Approval:
        if self.policy is None:
            raise ApprovalStateError("no policy is loaded, so no one is authorised to approve")
        return decide_approval(
            self.store,
            approval_id,
            approver,
            approve=approve,
            now=self.clock(),
            reason=reason,
            policy=self.policy,
        )

    def edit(
        self,
        approval_id: str,
        approver: str,
        arguments: Mapping[str, Any],
        *,
        reason: str | None = None,
    ) -> Approval:
        """Replace a pending call's arguments as an approver: a new proposal with its own
        digest, judged by the policy again, approved by the editor. Returns the new approval."""
        if self.policy is None:
            raise ApprovalStateError("no policy is loaded, so no one is authorised to edit")
        return edit_approval(
            self.store,
            self.registry,
            self.policy,
            approval_id,
            approver,
            dict(arguments),
            now=self.clock(),
            reason=reason,
        )

    def approval_for(self, run_id: str, call_id: str) -> Approval | None:
        """The latest approval requested for a call (expired first if its time is up)."""
        return latest_approval(self.store, run_id, call_id, self.clock())


@dataclass(frozen=True, kw_only=True)
class _Admitted:
    fresh: bool  # a new effect row (not a re-dispatch of one known absent)
    tool: Tool
    effect: Effect
    arguments: dict[str, Any]
    decision: Decision
    label: str
    step: int
    actor: str
    flags: tuple[str, ...]
    redactions: tuple[str, ...]
    counts_bytes: bool
    secrets: tuple[str, ...] = ()


def _sealed_identity(run_id: str, principal: Principal, budget: Budget) -> dict[str, Any]:
    """What a run's principal seal covers: who it acts for and its limits (not its
    counters, which move at every step)."""
    return {
        "run_id": run_id,
        "principal": principal.to_dict(),
        "limits": [budget.max_steps, budget.max_cost, budget.max_bytes],
    }


def _load_run(tx: Tx, run_id: str) -> RunRecord:
    record = tx.get_run(run_id)
    if record is None:
        raise StoreError(f"no run {run_id}; start one with Gate.start_run or `tether run`")
    return record


def _state_changes(
    state: RunState, budget: Budget, now: float, effects: int | None = None
) -> dict[str, Any]:
    checkpoint = RunState(
        principal=state.principal,
        budget=budget,
        extra=state.extra,
        effects=state.effects if effects is None else effects,
        principal_seal=state.principal_seal,
    ).dump()
    return {"checkpoint_json": checkpoint, "updated_at": now}


def _replace_approval(approval: Approval, **changes: Any) -> Approval:
    return evolve(approval, **changes)


_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _invoke(tool: Tool, arguments: Mapping[str, Any], key: str) -> Any:
    timeout = tool.manifest.timeout_s
    if timeout is None:
        return tool.invoke(arguments, key)
    # A thread lets the gate stop waiting; it cannot stop the tool, which is exactly why a
    # timeout is recorded as "unknown" rather than "failed".
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="tether-tool")
    future = _executor.submit(tool.invoke, arguments, key)
    try:
        return future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"no answer within {timeout}s") from None


def _unwrap(raw: Any) -> tuple[Any, str | None]:
    if isinstance(raw, Result):
        return raw.value, raw.external_reference
    if isinstance(raw, Mapping) and isinstance(raw.get("external_reference"), str):
        return dict(raw), raw["external_reference"]
    return raw, None


def _recordable(raw: Any) -> tuple[Any, str | None, str | None]:
    """The tool's answer as JSON (pydantic models, dataclasses, datetimes, enums, sets...),
    its external reference, and why it could not be kept, if it could not. The call has
    happened either way, so an answer that is not JSON becomes a recorded note, never an
    exception that would leave the effect ``dispatched`` and make a retry look like a
    timeout."""
    try:
        value, reference = _unwrap(raw)
        value = pydantic_core.to_jsonable_python(value)
        canonical_json(value)  # NaN, infinities and cycles fail here, not in the store
        if reference is not None and not isinstance(reference, str):
            reference = str(reference)
        return value, reference, None
    except Exception as e:
        problem = f"result could not be recorded as JSON ({type(e).__name__}: {e})"[:500]
        return {"error": "result_not_json", "detail": problem}, None, problem


def _safe_error(error: BaseException, secrets: tuple[str, ...]) -> str:
    """An exception as it may be stored and shown: arguments' secrets and anything that
    looks like a credential removed (a failing client often quotes the password it used)."""
    text = repr(error)[:2000]
    return str(redact(scrub(text, secrets))[0])
