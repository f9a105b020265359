"""What a LangGraph resume value says: one decision per pending approval, by approval id
(never by position), checked for shape here and against tether's record by the governor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus

__all__ = ["DECISION_TYPES", "RESUME_HINT", "Decision", "already_recorded", "parse_decision"]

DECISION_TYPES = ("approve", "deny", "edit")
RESUME_HINT = (
    "resume with Command(resume={approval_id: decision}), one decision per pending approval: "
    "{'type': 'approve'}, {'type': 'deny', 'message': '...'} or "
    "{'type': 'edit', 'arguments': {...}}"
)


@dataclass(frozen=True)
class Decision:
    """One resume decision, checked against tether's record of the approval it names."""

    approval_id: str
    kind: str  # one of DECISION_TYPES
    message: str | None = None
    arguments: dict[str, Any] | None = None


def parse_decision(approval_id: str, raw: Any) -> Decision:
    kind = raw.get("type") if isinstance(raw, Mapping) else None
    if kind not in DECISION_TYPES:
        raise ValueError(
            f"the decision for {approval_id} must be a dict whose 'type' is one of "
            f"{', '.join(DECISION_TYPES)}, not {raw!r}"
        )
    assert isinstance(raw, Mapping)
    message = raw.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError(f"the decision for {approval_id} has a 'message' that is not text")
    arguments = raw.get("arguments")
    if kind == "edit" and not isinstance(arguments, Mapping):
        raise ValueError(f"the edit of {approval_id} needs 'arguments': a dict of new arguments")
    return Decision(
        approval_id=approval_id,
        kind=kind,
        message=message,
        arguments=dict(arguments) if isinstance(arguments, Mapping) else None,
    )


def already_recorded(approval: Approval, decision: Decision, known: Mapping[str, Approval]) -> bool:
    """Whether ``decision`` is what tether already recorded: the same resume value seen
    again (LangGraph replays it when it re-runs the node; a second resumer sends it too)."""
    if decision.kind == "approve":
        return approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.USED)
    if decision.kind == "deny":
        return approval.status is ApprovalStatus.DENIED
    edited = known.get(approval.replaced_by or "")
    return (
        approval.status is ApprovalStatus.EDITED
        and edited is not None
        and dict(edited.arguments) == decision.arguments
    )
