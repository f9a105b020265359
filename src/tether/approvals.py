"""Approval requests, decisions on them, and the check that a grant binds the exact call.

A grant is never something a client hands back (a flag in client state can be forged): it is a
row in the store, found by the call it was made for, and it is honoured only if every field it
was bound to still matches the call at dispatch time (invariant I5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from tether.digest import canonical_json, digest, sha256_hex
from tether.errors import (
    ApprovalAlreadyUsed,
    ApprovalExpired,
    ApprovalInvalid,
    ApprovalStateError,
    ApproverNotAuthorized,
)


class ApprovalStatus(StrEnum):
    """Where an approval request stands; only ``approved`` lets a call run, once."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    USED = "used"
    EDITED = "edited"  # replaced by an approver's edit: a new approval for the edited call


@dataclass(frozen=True, kw_only=True)
class CallBinding:
    """Everything a grant is bound to. Its digest is the ``argument_digest``'s big brother."""

    run_id: str
    call_id: str
    tool: str
    tool_version: str
    tool_schema_digest: str
    arguments: Mapping[str, Any]
    tenant: str
    actor: str

    # Cached: the gate asks for these several times per call, and digests are not free.
    @cached_property
    def arguments_json(self) -> str:
        return canonical_json(dict(self.arguments))

    @cached_property
    def argument_digest(self) -> str:
        return "sha256:" + sha256_hex(self.arguments_json)

    @cached_property
    def call_digest(self) -> str:
        return digest(
            {
                "run_id": self.run_id,
                "call_id": self.call_id,
                "tool": self.tool,
                "tool_version": self.tool_version,
                "tool_schema_digest": self.tool_schema_digest,
                "argument_digest": self.argument_digest,
                "tenant": self.tenant,
                "actor": self.actor,
            }
        )


@dataclass(frozen=True, kw_only=True)
class Approval:
    """Seed 000's approval record plus seed 004's tenant/status/expiry."""

    approval_id: str
    run_id: str
    call_id: str
    actor: str
    tenant: str
    tool: str
    tool_version: str
    resource: str
    tool_schema_digest: str
    argument_digest: str
    call_digest: str
    arguments: Mapping[str, Any]
    policy_version: str
    status: ApprovalStatus
    created_at: float
    expires_at: float
    approver: str | None = None
    decision: str | None = None
    reason: str | None = None
    decided_at: float | None = None
    used_at: float | None = None
    # Who may decide, as the policy in force said when the request was made: a decision
    # recorded without loading the app (the command line) is checked against this list.
    approvers: tuple[str, ...] = ()
    replaced_by: str | None = None
    replaces: str | None = None

    @classmethod
    def request(
        cls,
        approval_id: str,
        binding: CallBinding,
        *,
        policy_version: str,
        now: float,
        ttl_s: float,
        approvers: frozenset[str] = frozenset(),
    ) -> Approval:
        return cls(
            approval_id=approval_id,
            run_id=binding.run_id,
            call_id=binding.call_id,
            actor=binding.actor,
            tenant=binding.tenant,
            tool=binding.tool,
            tool_version=binding.tool_version,
            resource=resource_of(binding.tool, binding.arguments),
            tool_schema_digest=binding.tool_schema_digest,
            argument_digest=binding.argument_digest,
            call_digest=binding.call_digest,
            arguments=dict(binding.arguments),
            policy_version=policy_version,
            status=ApprovalStatus.PENDING,
            created_at=now,
            expires_at=now + ttl_s,
            approvers=tuple(sorted(approvers)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "actor": self.actor,
            "tenant": self.tenant,
            "tool": self.tool,
            "tool_version": self.tool_version,
            "resource": self.resource,
            "tool_schema_digest": self.tool_schema_digest,
            "argument_digest": self.argument_digest,
            "call_digest": self.call_digest,
            "arguments": dict(self.arguments),
            "policy_version": self.policy_version,
            "status": self.status.value,
            "approver": self.approver,
            "decision": self.decision,
            "reason": self.reason,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decided_at": self.decided_at,
            "used_at": self.used_at,
            "approvers": list(self.approvers),
            "replaced_by": self.replaced_by,
            "replaces": self.replaces,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Approval:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        fields["status"] = ApprovalStatus(data["status"])
        fields["approvers"] = tuple(data.get("approvers", ()))
        return cls(**fields)


def resource_of(tool: str, arguments: Mapping[str, Any]) -> str:
    """A human label for what the call touches: ``ticket:T-100`` from ``ticket_id``."""
    for key, value in sorted(arguments.items()):
        if key.endswith("_id") and isinstance(value, str | int):
            return f"{key[:-3]}:{value}"
    return f"tool:{tool}"


def check_decider(
    approval: Approval, *, approver: str, authorized: frozenset[str], now: float
) -> None:
    """Raise unless ``approver`` may decide ``approval`` now."""
    if approval.status is not ApprovalStatus.PENDING:
        raise ApprovalStateError(
            f"approval {approval.approval_id} is already {approval.status.value}; "
            "only a pending approval can be decided"
        )
    if now > approval.expires_at:
        raise ApprovalStateError(
            f"approval {approval.approval_id} expired; the call must be proposed again"
        )
    if approver == approval.actor:
        raise ApproverNotAuthorized(
            f"{approver} requested this call and cannot approve it; ask another approver"
        )
    if approver not in authorized:
        raise ApproverNotAuthorized(
            f"{approver} is not an approver for '{approval.tool}' under policy "
            f"{approval.policy_version}; approvers are: {', '.join(sorted(authorized)) or 'none'}"
        )


def decide_request(
    approval: Approval,
    *,
    approve: bool,
    approver: str,
    authorized: frozenset[str],
    now: float,
    reason: str | None = None,
) -> Approval:
    """The approval after a human decision; refuses anything but a fresh pending request."""
    check_decider(approval, approver=approver, authorized=authorized, now=now)
    return replace(
        approval,
        status=ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED,
        approver=approver,
        decision="approve" if approve else "deny",
        reason=reason,
        decided_at=now,
    )


def verify_grant(
    approval: Approval,
    binding: CallBinding,
    *,
    policy_version: str,
    authorized: frozenset[str],
    now: float,
) -> None:
    """Raise unless ``approval`` authorises exactly this call, now (invariant I5)."""
    aid = approval.approval_id
    if approval.status is ApprovalStatus.USED:
        raise ApprovalAlreadyUsed(f"approval {aid} was already used; a grant runs one call once")
    if approval.status is not ApprovalStatus.APPROVED:
        raise ApprovalInvalid(f"approval {aid} is {approval.status.value}, not approved")
    mismatches = [
        name
        for name, granted, actual in (
            ("run", approval.run_id, binding.run_id),
            ("call", approval.call_id, binding.call_id),
            ("tool", approval.tool, binding.tool),
            ("tool version", approval.tool_version, binding.tool_version),
            ("schema digest", approval.tool_schema_digest, binding.tool_schema_digest),
            ("arguments", approval.argument_digest, binding.argument_digest),
            ("tenant", approval.tenant, binding.tenant),
            ("requester", approval.actor, binding.actor),
            ("call digest", approval.call_digest, binding.call_digest),
            ("policy version", approval.policy_version, policy_version),
        )
        if granted != actual
    ]
    if mismatches:
        raise ApprovalInvalid(
            f"approval {aid} does not bind this call ({', '.join(mismatches)} differ); "
            "the changed call needs its own approval"
        )
    if approval.approver is None or approval.approver not in authorized:
        raise ApproverNotAuthorized(f"approval {aid} was granted by someone not authorised")
    if approval.approver == approval.actor:
        raise ApproverNotAuthorized(f"approval {aid} was granted by its own requester")
    if now > approval.expires_at:
        raise ApprovalExpired(f"approval {aid} expired at {approval.expires_at:.0f}; ask again")
