"""A governed call as an OpenTelemetry span, and an approval's wait as one.

The call's span follows the GenAI conventions for tool execution: named
``execute_tool {gen_ai.tool.name}``, kind INTERNAL, with ``gen_ai.operation.name =
"execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` and the
run as ``gen_ai.conversation.id``; tether's facts go under ``tether.``. It is started as the
current span, so it nests under the caller's (the framework's agent or tool span) and the
tool's own spans nest under it.

An approval's wait crosses processes: the call that asks runs in the agent's process, the
decision is recorded by a reviewer's (the inbox, the command line), and the call that runs
under the grant may be yet another. So the wait is its own span, ``tether.approval {tool}``,
emitted by whichever process records the decision, started at the request's creation time and
ended at the decision. Its trace is derived from the approval id (``approval_context``:
sha256 of the id), and the asking call and the granted call each carry a link to that
context; any process computes the same one from the id alone, nothing is stored.
"""

from __future__ import annotations

import contextvars
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tether.core.approvals import Approval, ApprovalStatus
from tether.telemetry.otel import instruments, tracer

__all__ = [
    "CallSpan",
    "approval_context",
    "approval_decided",
    "approval_edited",
    "approval_expired",
    "approval_requested",
    "current",
    "start_call",
    "traced_run",
]

_CURRENT: contextvars.ContextVar[CallSpan | None] = contextvars.ContextVar(
    "tether_call_span", default=None
)
R = TypeVar("R")
Attributes = Mapping[str, str | bool | int | float | Sequence[str]]


def _derived(kind: str, ident: str) -> Any:
    from opentelemetry import trace

    digest = hashlib.sha256(f"tether.{kind}:{ident}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )


def approval_context(approval_id: str) -> Any:
    """The span context every process derives for ``approval_id``: the wait span's parent,
    and the target of the links from the calls that asked for it and ran under it."""
    return _derived("approval", approval_id)


def current() -> CallSpan | None:
    """The governed call being traced in this context, if any."""
    return _CURRENT.get()


class CallSpan:
    """One governed call's span while it is open, and what its metrics need at the end."""

    __slots__ = (
        "_late",
        "_scope",
        "_token",
        "admitted",
        "attributes",
        "capture",
        "returned",
        "span",
        "started",
    )

    def __init__(self, span: Any, scope: Any) -> None:
        self.span = span
        self._scope = scope
        self._token: contextvars.Token[CallSpan | None] | None = None
        self.started = time.perf_counter()
        self.admitted: float | None = None  # the tool was called (``dispatched`` durable)
        self.returned: float | None = None  # the tool returned
        self.attributes: dict[str, Any] = {}
        self._late: dict[str, Any] = {}  # set since the span started
        # The tool's sensitive fields and the call's secret values, when its values are
        # captured (``tether.telemetry.capture``): what the result is redacted with.
        self.capture: tuple[frozenset[str], tuple[str, ...]] | None = None

    def set(self, attributes: Attributes) -> None:
        # Kept here and given to the span once, at the end: the SDK checks every value it
        # is handed, so one call with all of them costs least.
        self.attributes.update(attributes)
        self._late.update(attributes)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        if self.span is not None:
            self.span.add_event(name, attributes or {})

    def link(self, context: Any, attributes: Attributes | None = None) -> None:
        if self.span is not None and hasattr(self.span, "add_link"):
            self.span.add_link(context, attributes or {})

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        """Close the span: ``outcome`` is what became of the call (ran, refused, waiting,
        unsettled, failed); ``error`` an exception that is a failure, not a verdict."""
        if self._token is not None:
            _CURRENT.reset(self._token)
        done = time.perf_counter()
        span = self.span
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            self._late["tether.outcome"] = outcome
            if error is not None:
                self._late["error.type"] = type(error).__qualname__
                span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
            span.set_attributes(self._late)
            if self._scope is not None:
                from opentelemetry import context

                context.detach(self._scope)
            span.end()
        meters = instruments()
        if meters is None:
            return
        tool_time = 0.0
        if self.admitted is not None and self.returned is not None:
            tool_time = self.returned - self.admitted
        labels = {
            "gen_ai.tool.name": str(self.attributes.get("gen_ai.tool.name", "")),
            "tether.verdict": str(self.attributes.get("tether.verdict", "none")),
            "tether.outcome": outcome,
        }
        meters.calls.add(1, labels)
        meters.gate_duration.record(max(0.0, done - self.started - tool_time), labels)


def start_call(run_id: str, call_id: str, tool: str) -> CallSpan | None:
    """Open the span of one governed call as the current span, or None if nothing records."""
    found = tracer()
    if found is None and instruments() is None:
        return None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": run_id,
        "tether.run.id": run_id,
    }
    span = scope = None
    if found is not None:
        from opentelemetry import context, trace

        span = found.start_span(
            f"execute_tool {tool}", kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        # Current for the call, so the tool's own spans nest under it (``use_span`` without
        # its generator: attach and detach a context token).
        scope = context.attach(trace.set_span_in_context(span))
    handle = CallSpan(span, scope)
    handle.attributes.update(attributes)
    handle._token = _CURRENT.set(handle)
    return handle


# -- approvals -------------------------------------------------------------------------------
def _approval_attributes(approval: Approval) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.tool.name": approval.tool,
        "gen_ai.tool.call.id": approval.call_id,
        "gen_ai.conversation.id": approval.run_id,
        "tether.run.id": approval.run_id,
        "tether.approval.id": approval.approval_id,
        "tether.approval.status": approval.status.value,
        "tether.policy.version": approval.policy_version,
    }
    if approval.approver is not None:
        attributes["tether.approval.approver"] = approval.approver
    return attributes


def approval_requested(approval: Approval) -> None:
    meters = instruments()
    if meters is not None:
        meters.approvals_requested.add(1, {"gen_ai.tool.name": approval.tool})


def approval_decided(approval: Approval) -> None:
    """An approval was granted or denied (committed): its wait as a span, and the metrics."""
    decided_at = approval.decided_at if approval.decided_at is not None else time.time()
    waited = max(0.0, decided_at - approval.created_at)
    decision = "approved" if approval.status is ApprovalStatus.APPROVED else "denied"
    meters = instruments()
    if meters is not None:
        labels = {"gen_ai.tool.name": approval.tool, "tether.approval.decision": decision}
        meters.approvals_decided.add(1, labels)
        meters.time_to_decision.record(waited, labels)
    _wait_span(approval, decision, decided_at, waited)


def approval_edited(original: Approval, edited: Approval) -> None:
    """An approver replaced a pending call's arguments (``edited``: the new approval, granted
    by the editor): the original's wait ended in an edit."""
    decided_at = edited.decided_at if edited.decided_at is not None else edited.created_at
    waited = max(0.0, decided_at - original.created_at)
    meters = instruments()
    if meters is not None:
        labels = {"gen_ai.tool.name": original.tool, "tether.approval.decision": "edited"}
        meters.approvals_decided.add(1, labels)
        meters.time_to_decision.record(waited, labels)
    shown = replace(
        original,
        status=ApprovalStatus.EDITED,
        approver=edited.approver,
        decided_at=decided_at,
        replaced_by=edited.approval_id,
    )
    _wait_span(shown, "edited", decided_at, waited)


def approval_expired(approval: Approval, now: float) -> None:
    meters = instruments()
    if meters is not None:
        meters.approvals_expired.add(1, {"gen_ai.tool.name": approval.tool})
    _wait_span(approval, "expired", min(now, approval.expires_at), None)


def _wait_span(approval: Approval, decision: str, ended: float, waited: float | None) -> None:
    found = tracer()
    if found is None:
        return
    from opentelemetry import trace

    attributes = _approval_attributes(approval)
    attributes["tether.approval.decision"] = decision
    if waited is not None:
        attributes["tether.approval.wait_s"] = round(waited, 3)
    # The decider's own span (a request to the inbox, a command) is linked, not the parent:
    # the parent is the approval's derived context, which every process can name.
    links: list[Any] = []
    here = trace.get_current_span().get_span_context()
    if here.is_valid:
        links.append(trace.Link(here, {"tether.link": "decided from"}))
    parent = trace.set_span_in_context(
        trace.NonRecordingSpan(approval_context(approval.approval_id))
    )
    span = found.start_span(
        f"tether.approval {approval.tool}",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
        start_time=int(approval.created_at * 1e9),
    )
    span.add_event(
        "asked", {"tether.approval.id": approval.approval_id}, int(approval.created_at * 1e9)
    )
    span.add_event(
        "granted" if decision == "approved" else "denied" if decision == "denied" else decision,
        {"tether.approval.id": approval.approval_id},
        int(ended * 1e9),
    )
    span.end(end_time=int(ended * 1e9))


def traced_run(run_id: str, drive: Callable[[], R]) -> R:
    """A run driven by tether's own loop (``tether.runs``) as a GenAI ``invoke_agent`` span:
    its calls' spans nest under it. Each resume is one such span; the run id
    (``gen_ai.conversation.id``) ties a run's resumes together, in whatever process."""
    found = tracer()
    if found is None:
        return drive()
    from opentelemetry import trace

    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "tether",
        "gen_ai.conversation.id": run_id,
        "tether.run.id": run_id,
    }
    with found.start_as_current_span(
        "invoke_agent tether", kind=trace.SpanKind.INTERNAL, attributes=attributes
    ) as span:
        result = drive()
        status = getattr(result, "status", None)
        if isinstance(status, str):
            span.set_attribute("tether.run.status", status)
        return result
