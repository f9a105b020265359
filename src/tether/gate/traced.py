"""What the gate tells OpenTelemetry about a call: the facts of its plan, as span attributes
and events (``tether.telemetry`` owns the spans and instruments; this module knows plans).

``Gate.call`` and ``Gate.acall`` go through ``traced_call``/``traced_acall`` only when a
tracer or meter provider is configured; otherwise they take their plain path. Inside, the
pipeline reports twice: ``planned`` once the plan's transaction has committed (the verdict,
the rule, the approval, ``dispatched``), ``returned`` when the tool has returned (so the gate's
latency is measured apart from the tool's).

Nothing sensitive enters a span: no argument or result values unless the operator opts a tool
in (``tether.telemetry.capture``), and then redacted as the audit log redacts them (the
manifest's sensitive fields, names and values that look like credentials, and the call's
secret values scrubbed wherever they appear). Reasons and provenance are shown by name and
origin, never by value.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.digest import canonical_json
from tether.core.screening import redact, scrub
from tether.errors import ApprovalRequired, OutcomeUnknown, TetherError, ToolFailed
from tether.gate.plan import (
    Admit,
    ApprovalWrite,
    Ask,
    AuditWrite,
    Outcome,
    Plan,
    Refuse,
    Replay,
    RunWrite,
    ToolCall,
)
from tether.gate.state import RunState
from tether.telemetry import spans
from tether.telemetry.capture import captures
from tether.tools.registry import Registry

__all__ = ["asked", "planned", "returned", "traced_acall", "traced_call"]

REASONS_SHOWN = 8  # reasons and provenance entries a span keeps


def _start(registry: Registry, run_id: str, call: ToolCall) -> spans.CallSpan | None:
    span = spans.start_call(run_id, call.call_id, call.tool)
    known = registry.find(call.tool)
    if span is not None and known is not None:  # what the tool is, whatever the verdict
        manifest = known.manifest
        facts: dict[str, Any] = {"tether.risk": manifest.risk.value}
        if manifest.description:
            facts["gen_ai.tool.description"] = manifest.description[:200]
        span.set(facts)
    return span


def traced_call(
    registry: Registry, run_id: str, call: ToolCall, inner: Callable[[], Outcome]
) -> Outcome:
    span = _start(registry, run_id, call)
    if span is None:
        return inner()
    try:
        outcome = inner()
    except BaseException as e:
        _ended(span, e)
        raise
    _ran(span, outcome)
    return outcome


async def traced_acall(
    registry: Registry, run_id: str, call: ToolCall, inner: Callable[[], Awaitable[Outcome]]
) -> Outcome:
    span = _start(registry, run_id, call)
    if span is None:
        return await inner()
    try:
        outcome = await inner()
    except BaseException as e:
        _ended(span, e)
        raise
    _ran(span, outcome)
    return outcome


def _ran(span: spans.CallSpan, outcome: Outcome) -> None:
    facts: dict[str, Any] = {
        "tether.operation_key": outcome.operation_key,
        "tether.effect.status": "replayed" if outcome.replayed else outcome.status.value,
    }
    if outcome.replayed:
        facts["tether.verdict"] = "replay"
    span.set(facts)
    span.event("settled")  # the status is the span's tether.effect.status
    captured = span.capture
    if captured is not None:
        sensitive, secrets = captured
        value = scrub(redact(outcome.result, sensitive)[0], secrets)
        span.set({"gen_ai.tool.call.result": _text(value)})
    span.end("ran")


def _ended(span: spans.CallSpan, error: BaseException) -> None:
    if isinstance(error, ApprovalRequired):
        span.end("waiting")
    elif isinstance(error, OutcomeUnknown):
        span.set({"tether.effect.status": "unknown"})
        span.event("settled")
        span.end("unsettled", error)
    elif isinstance(error, ToolFailed):  # the tool raised, now or when it first ran
        span.set({"tether.effect.status": "failed"})
        span.event("settled")
        span.end("failed", error)
    elif span.admitted is not None:  # the tool ran; its outcome is not recorded
        span.set({"tether.effect.status": "dispatched"})
        span.end("stopped", error)
    elif isinstance(error, TetherError) and error.model_reads:
        span.end("refused")
    else:
        span.end("stopped", error)


def returned() -> None:
    """The tool has returned (or raised): the gate's own time resumes."""
    span = spans.current()
    if span is not None:
        span.returned = time.perf_counter()


def planned(plan: Plan) -> None:
    """The plan's transaction committed: its facts onto the current call's span."""
    span = spans.current()
    if span is None:
        return
    if isinstance(plan, Admit):
        _admitted(span, plan)
    elif isinstance(plan, Ask):
        _asking(span, plan)
    elif isinstance(plan, Refuse):
        _refused(span, plan)
    elif isinstance(plan, Replay):
        span.set({"tether.verdict": "replay", "tether.operation_key": plan.effect.operation_key})
    _budget(span, plan)


def _admitted(span: spans.CallSpan, plan: Admit) -> None:
    manifest = plan.tool.manifest
    decision = plan.decision
    facts: dict[str, Any] = {
        "tether.verdict": plan.label,
        "tether.policy.version": decision.policy_version,
        "tether.policy.reasons": _safe(scrub(list(decision.reasons), plan.secrets)),
        "tether.tool.version": manifest.version,
        "tether.operation_key": plan.effect.operation_key,
        "gen_ai.agent.id": plan.actor,
    }
    if decision.provenance:
        facts["tether.provenance"] = [
            f"{p.argument}: {p.trust.value}"
            + ("" if p.origin is None else f" from {p.origin.tool} ({p.origin.call_id})")
            for p in decision.provenance[:REASONS_SHOWN]
        ]
    if plan.redactions:
        facts["tether.redacted"] = list(plan.redactions)
    for write in plan.writes:
        if isinstance(write, ApprovalWrite) and write.approval.status is ApprovalStatus.USED:
            _granted(span, write.approval, facts)
    if captures(manifest.name):
        safe = scrub(redact(plan.arguments, manifest.sensitive_fields)[0], plan.secrets)
        facts["gen_ai.tool.call.arguments"] = _text(safe)
        span.capture = (frozenset(manifest.sensitive_fields), plan.secrets)
    span.set(facts)
    span.event("dispatched")  # the key is the span's tether.operation_key
    span.admitted = time.perf_counter()


def _granted(span: spans.CallSpan, used: Approval, facts: dict[str, Any]) -> None:
    facts["tether.approval.id"] = used.approval_id
    if used.approver is not None:
        facts["tether.approval.approver"] = used.approver
    if used.decided_at is not None:
        facts["tether.approval.wait_s"] = round(used.decided_at - used.created_at, 3)
    span.link(spans.approval_context(used.approval_id), {"tether.link": "approval"})
    span.event(
        "granted",
        {"tether.approval.id": used.approval_id, "tether.approval.approver": used.approver or ""},
    )


def _asking(span: spans.CallSpan, plan: Ask) -> None:
    request = _requested(plan)
    facts: dict[str, Any] = {
        "tether.verdict": "ask",
        "tether.approval.id": plan.signal.approval_id,
        "tether.approval.status": "pending",
    }
    if request is not None:
        facts["tether.policy.version"] = request.policy_version
        facts["tether.policy.reasons"] = _safe(request.reasons)
        spans.approval_requested(request)
    span.set(facts)
    span.link(spans.approval_context(plan.signal.approval_id), {"tether.link": "approval"})
    span.event("asked", {"tether.approval.id": plan.signal.approval_id})


def asked(registry: Registry, run_id: str, call: ToolCall, plan: Ask) -> None:
    """``Gate.ask_if_needed`` recorded a request (frameworks that ask before they call the
    tool): the asking is a span of its own, as a ``Gate.call`` that asks is."""
    span = _start(registry, run_id, call)
    if span is not None:
        _asking(span, plan)
        span.end("waiting")


def _requested(plan: Ask) -> Approval | None:
    for write in plan.writes:
        if isinstance(write, ApprovalWrite) and write.expected is None:
            return write.approval
    return None


def _refused(span: spans.CallSpan, plan: Refuse) -> None:
    error = plan.error
    facts: dict[str, Any] = {"tether.verdict": "deny", "tether.refusal": type(error).__name__}
    for write in plan.writes:
        if isinstance(write, AuditWrite):
            facts["tether.refusal.kind"] = write.kind
            # The entry's reasons are scrubbed of the call's secrets (the error's may not be).
            decision = write.data.get("decision")
            reasons = write.data.get("reasons")
            if isinstance(decision, dict):
                reasons = decision.get("reasons", reasons)
                facts["tether.policy.version"] = str(decision.get("policy_version", ""))
            if isinstance(reasons, list) and reasons:
                facts["tether.policy.reasons"] = _safe(reasons)
            if isinstance(write.data.get("approval_id"), str):
                facts["tether.approval.id"] = write.data["approval_id"]
        elif isinstance(write, ApprovalWrite) and write.approval.status is ApprovalStatus.EXPIRED:
            spans.approval_expired(write.approval, write.approval.expires_at)
    span.set(facts)
    span.event("denied", {"tether.refusal": type(error).__name__})


def _budget(span: spans.CallSpan, plan: Plan) -> None:
    for write in plan.writes:
        if isinstance(write, RunWrite):
            state = RunState.load(replace(write.record, checkpoint_json=write.checkpoint_json))
            budget = state.budget
            facts: dict[str, Any] = {"tether.budget.steps": budget.steps}
            if budget.remaining is not None:
                facts["tether.budget.remaining"] = budget.remaining
            if budget.max_steps is not None:
                facts["tether.budget.steps_remaining"] = budget.max_steps - budget.steps
            span.set(facts)


def _safe(reasons: Any) -> list[str]:
    """Reasons as a span may keep them: credentials redacted, a few, each cut short."""
    return [str(redact(str(r))[0])[:300] for r in list(reasons)[:REASONS_SHOWN]]


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text[:4096]
