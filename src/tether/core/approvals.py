"""Approval requests, decisions on them, and the check that a grant binds the exact call.

A grant is never something a client hands back (a flag in client state can be forged): it is a
row in the store, found by the call it was made for, and it is honoured only if every field it
was bound to still matches the call at dispatch time (invariant I5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from json.encoder import encode_basestring as _encode_string
from typing import Any

from tether.core.digest import canonical_json, digest, sha256_hex
from tether.core.principal import TOKEN_PATTERN
from tether.core.records import Record
from tether.core.screening import CREDENTIAL_PATTERN, REDACTED, SECRET_FIELD_PATTERN, redact
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
    # Made once, with the binding: the gate needs all three for every call (the size check,
    # the effect row, the grant), and the arguments' canonical JSON is shared by the first two.
    arguments_json: str = field(init=False, repr=False, compare=False)
    argument_digest: str = field(init=False, repr=False, compare=False)
    call_digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        arguments_json = canonical_json(dict(self.arguments))
        argument_digest = "sha256:" + sha256_hex(arguments_json)
        set_field = object.__setattr__
        set_field(self, "arguments_json", arguments_json)
        set_field(self, "argument_digest", argument_digest)
        set_field(self, "call_digest", _call_digest(self, argument_digest))


def _call_digest(b: CallBinding, argument_digest: str) -> str:
    e = _encode_string
    try:
        # Canonical JSON of the dict below, spelt out (keys in sorted order, each value
        # encoded as json encodes a string): it skips building and sorting a dict.
        # tests/unit/test_approvals.py checks it against digest() of the dict.
        text = (
            f'{{"actor":{e(b.actor)},"argument_digest":{e(argument_digest)},'
            f'"call_id":{e(b.call_id)},"run_id":{e(b.run_id)},"tenant":{e(b.tenant)},'
            f'"tool":{e(b.tool)},"tool_schema_digest":{e(b.tool_schema_digest)},'
            f'"tool_version":{e(b.tool_version)}}}'
        )
    except TypeError:  # a field that is not a string: the general encoder says what it is
        return digest(
            {
                "run_id": b.run_id,
                "call_id": b.call_id,
                "tool": b.tool,
                "tool_version": b.tool_version,
                "tool_schema_digest": b.tool_schema_digest,
                "argument_digest": argument_digest,
                "tenant": b.tenant,
                "actor": b.actor,
            }
        )
    return "sha256:" + sha256_hex(text)


@dataclass(frozen=True, kw_only=True)
class Approval(Record):
    """Seed 000's approval record plus seed 004's tenant/status/expiry."""

    # In the order ``to_dict`` gives them, which is what ``tether approvals list --json``
    # prints (the stored ``record_json`` is canonical JSON, so its keys are sorted anyway).
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
    approver: str | None = None
    decision: str | None = None
    reason: str | None = None
    created_at: float
    expires_at: float
    decided_at: float | None = None
    used_at: float | None = None
    # Who may decide, as the policy in force said when the request was made: a decision
    # recorded without loading the app (the command line) is checked against this list.
    approvers: tuple[str, ...] = ()
    replaced_by: str | None = None
    replaces: str | None = None
    # The credential that decided (None: trusted in-process code named the approver).
    approver_credential: str | None = None
    # The arguments the tool's manifest marks sensitive: masked wherever the approval is
    # shown, kept in the stored record (it is the exact call a grant lets run).
    sensitive_fields: tuple[str, ...] = ()
    # The store key's seal over ``grant_payload``: a grant written straight into the
    # database, without the key, does not carry a valid one.
    seal: str | None = None
    # Where each argument's value came from, when the policy has flow rules: argument,
    # value (masked), trusted, and the call and tool it first appeared in the output of
    # (tether.policy.provenance). Values are masked when recorded: this is for people to read.
    provenance: tuple[Mapping[str, Any], ...] = ()
    # Why the policy asked, as the decision gave it.
    reasons: tuple[str, ...] = ()
    # The store key's seal over ``request_payload``, made as the request is stored: who may
    # decide it (``approvers``), for which call and tenant, until when. A decision on a
    # request whose row was edited (a name added to its approvers) is refused.
    request_seal: str | None = None

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
        sensitive_fields: Iterable[str] = (),
        provenance: tuple[Mapping[str, Any], ...] = (),
        reasons: tuple[str, ...] = (),
    ) -> Approval:
        sensitive = tuple(sorted(set(sensitive_fields)))
        return cls(
            approval_id=approval_id,
            run_id=binding.run_id,
            call_id=binding.call_id,
            actor=binding.actor,
            tenant=binding.tenant,
            tool=binding.tool,
            tool_version=binding.tool_version,
            resource=resource_of(binding.tool, binding.arguments, sensitive),
            tool_schema_digest=binding.tool_schema_digest,
            argument_digest=binding.argument_digest,
            call_digest=binding.call_digest,
            arguments=dict(binding.arguments),
            policy_version=policy_version,
            status=ApprovalStatus.PENDING,
            created_at=now,
            expires_at=now + ttl_s,
            approvers=tuple(sorted(approvers)),
            sensitive_fields=sensitive,
            provenance=provenance,
            reasons=tuple(reasons),
        )

    def to_dict(self) -> dict[str, Any]:
        """The whole record, as the store keeps it: arguments in clear. Never print this;
        ``public_dict`` is what people and logs see. Provenance and reasons appear only when
        recorded, so an approval without them has the record (and row digest) it always had."""
        data = super().to_dict()
        for name in ("provenance", "reasons", "request_seal"):
            if not data[name]:
                del data[name]
        return data

    def public_dict(self, *, reveal: bool = False) -> dict[str, Any]:
        """The record as shown: sensitive and credential-looking arguments masked (and named
        in ``redacted``), unless ``reveal`` (which the caller must have authorised)."""
        data = self.to_dict()
        data.pop("seal")
        data.pop("request_seal", None)
        if reveal:
            return {**data, "redacted": []}
        masked, redacted = mask_arguments(self.arguments, self.sensitive_fields)
        return {**data, "arguments": masked, "redacted": redacted}


def mask_arguments(
    arguments: Mapping[str, Any], sensitive_fields: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """``arguments`` with sensitive fields and credential-looking values masked, and the
    names of what was masked."""
    masked, redacted = mask_value(dict(arguments), sensitive_fields)
    return dict(masked), redacted


def mask_value(value: Any, sensitive_fields: Iterable[str] = ()) -> tuple[Any, list[str]]:
    """``screening.redact``, and tether's own tokens too (which it does not know)."""
    masked, redacted = redact(value, sensitive_fields)
    found = set(redacted)

    def walk(v: Any, name: str) -> Any:
        if isinstance(v, Mapping):
            return {k: walk(item, str(k)) for k, item in v.items()}
        if isinstance(v, list):
            return [walk(item, name) for item in v]
        if isinstance(v, str) and TOKEN_PATTERN.search(v):
            found.add(name or "(value)")
            return TOKEN_PATTERN.sub(REDACTED, v)
        return v

    return walk(masked, ""), sorted(found)


def resource_of(
    tool: str, arguments: Mapping[str, Any], sensitive_fields: Iterable[str] = ()
) -> str:
    """A human label for what the call touches: ``ticket:T-100`` from ``ticket_id``. It
    reaches the audit log in clear, so it never comes from a sensitive field or a value
    that looks like a credential."""
    sensitive = set(sensitive_fields)
    for key, value in sorted(arguments.items()):
        if not key.endswith("_id") or not isinstance(value, str | int):
            continue
        if key in sensitive or SECRET_FIELD_PATTERN.search(key) or _looks_secret(str(value)):
            continue
        return f"{key[:-3]}:{value}"
    return f"tool:{tool}"


def _looks_secret(value: str) -> bool:
    return bool(CREDENTIAL_PATTERN.search(value) or TOKEN_PATTERN.search(value))


def check_decider(
    approval: Approval,
    *,
    approver: str,
    authorized: frozenset[str],
    now: float,
    tenant_allowed: bool = True,
) -> None:
    """Raise unless ``approver`` (an authenticated name) may decide ``approval`` now.

    A refusal names the approver and the approval, never who the approvers are: that list is
    for an administrator to read in the policy, not for anyone who asks to learn."""
    aid = approval.approval_id
    if approval.status is not ApprovalStatus.PENDING:
        raise ApprovalStateError(
            f"approval {aid} is already {approval.status.value}; "
            "only a pending approval can be decided"
        )
    if now > approval.expires_at:
        raise ApprovalStateError(f"approval {aid} expired; the call must be proposed again")
    if approver == approval.actor:
        raise ApproverNotAuthorized(
            f"{approver} requested this call and cannot decide it; ask another approver"
        )
    if not tenant_allowed:
        raise ApproverNotAuthorized(
            f"{approver}'s credential is not valid for tenant {approval.tenant}, "
            f"so it cannot decide approval {aid}; ask an approver of that tenant"
        )
    if approver not in authorized:
        raise ApproverNotAuthorized(
            f"{approver} is not an approver for '{approval.tool}' under policy "
            f"{approval.policy_version}; ask one of the approvers the policy names"
        )


def decide_request(
    approval: Approval,
    *,
    approve: bool,
    approver: str,
    authorized: frozenset[str],
    now: float,
    reason: str | None = None,
    tenant_allowed: bool = True,
    approver_credential: str | None = None,
) -> Approval:
    """The approval after a human decision; refuses anything but a fresh pending request."""
    check_decider(
        approval, approver=approver, authorized=authorized, now=now, tenant_allowed=tenant_allowed
    )
    return replace(
        approval,
        status=ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED,
        approver=approver,
        approver_credential=approver_credential,
        decision="approve" if approve else "deny",
        reason=reason,
        decided_at=now,
    )


REQUEST_SEAL = "approval request"


def request_payload(approval: Approval) -> dict[str, Any]:
    """What a request's seal covers: everything that says who may decide which call, for
    whom, until when. Nothing a decision changes, so the seal outlives it."""
    return {
        "approval_id": approval.approval_id,
        "run_id": approval.run_id,
        "call_id": approval.call_id,
        "actor": approval.actor,
        "tenant": approval.tenant,
        "tool": approval.tool,
        "call_digest": approval.call_digest,
        "approvers": list(approval.approvers),
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "policy_version": approval.policy_version,
    }


def grant_payload(approval: Approval) -> dict[str, Any]:
    """What a grant's seal covers: the exact call, who granted it with which credential,
    when, until when, under which policy. The status is fixed at "approved": the seal
    says the grant was made, and using it (status ``used``) does not unmake that."""
    return {
        "approval_id": approval.approval_id,
        "call_digest": approval.call_digest,
        "argument_digest": approval.argument_digest,
        "status": ApprovalStatus.APPROVED.value,
        "decision": approval.decision,
        "approver": approval.approver,
        "approver_credential": approval.approver_credential,
        "decided_at": approval.decided_at,
        "expires_at": approval.expires_at,
        "policy_version": approval.policy_version,
    }


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
