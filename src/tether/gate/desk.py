"""Recording human decisions on approvals: approve, deny, edit, and expiry.

The checks themselves are pure (``approvals.check_decider``); this module does the store I/O,
each decision in one transaction with its audit entry. It needs no app: who may decide was
written into the request from the policy in force when it was made, so the command line can
record a decision without loading the agent's code. When a policy *is* at hand (the gate),
it must still be the version the request was made under.

Who decides is an ``Identity``: the command line only ever passes one it authenticated from a
credential. A plain name is accepted from in-process code (``Gate.approve(id, "reviewer-5")``),
which is trusted as the program itself is, and is recorded as decided ``via`` "code".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tether.core.approvals import (
    REQUEST_SEAL,
    Approval,
    ApprovalStatus,
    CallBinding,
    check_decider,
    decide_request,
    grant_payload,
    request_payload,
)
from tether.core.lifecycle import RunStatus
from tether.core.principal import Identity
from tether.core.screening import screen_arguments, scrub, secret_values
from tether.core.verdicts import Verdict
from tether.crash import crash_point
from tether.errors import (
    ApprovalInvalid,
    ApprovalStateError,
    CredentialRefused,
    InvalidArguments,
    PolicyDenied,
    RunNotFound,
)
from tether.evidence.keys import AuditKeys
from tether.gate.state import RunState, new_id
from tether.identity import identity_of, live_credential
from tether.policy.rules import Policy, decide
from tether.store.base import Store, Tx
from tether.telemetry.spans import approval_decided, approval_edited, approval_expired
from tether.tools.limits import argument_problems
from tether.tools.registry import Registry, Tool
from tether.tools.tenancy import fill_tenant


def approval_audit(approval: Approval) -> dict[str, Any]:
    data = approval.to_dict()
    data.pop("arguments")  # the digest binds them; the values may hold secrets
    # The entry is authenticated on its own; the seals add nothing to read.
    data.pop("seal")
    data.pop("request_seal", None)
    return data


def as_approver(approver: Identity | str) -> Identity:
    """The identity deciding: as authenticated, or trusted code that named itself."""
    if isinstance(approver, str):
        return Identity.trusted(approver)
    if approver.kind != "approver":
        raise CredentialRefused(
            f"{approver.name}'s credential is a {approver.kind}'s; deciding approvals needs "
            "an approver credential",
            reasons=("not an approver credential",),
        )
    return approver


def live_identity(tx: Tx, who: Identity) -> Identity:
    """``who`` as its credential stands now, read in the deciding transaction: a credential
    revoked (or changed) since ``who`` was authenticated decides nothing, however long a
    process has held the ``Identity``. Trusted code that named itself has no credential to
    re-read and stays as named."""
    if who.credential_id is None:
        if who.via != "code":
            raise CredentialRefused(
                f"{who.name} has no credential; decisions need an approver credential",
                reasons=("no credential",),
            )
        return who
    record = live_credential(tx, who.credential_id, who.name, "approver")
    return identity_of(record, via=who.via)


def check_identity(
    approval: Approval, who: Identity, authorized: frozenset[str], now: float
) -> None:
    check_decider(
        approval,
        approver=who.name,
        authorized=authorized,
        now=now,
        tenant_allowed=who.allows_tenant(approval.tenant),
    )


def request_sealed(keys: AuditKeys, approval: Approval) -> bool:
    """Whether ``approval``'s request (who may decide which call, for whom, until when) is
    as tether stored it: its request seal verifies. A missing seal does not."""
    return keys.verify_seal(REQUEST_SEAL, request_payload(approval), approval.request_seal)


def seal_grant(store: Store, approval: Approval) -> Approval:
    """``approval`` with the store key's seal over what it grants: the gate honours a grant
    only with it, so a row set to "approved" by hand (with SQL, without the key) is not one."""
    return replace(approval, seal=store.keys.seal("grant", grant_payload(approval)))


def expire(tx: Tx, approval: Approval, now: float) -> Approval:
    expired = replace(approval, status=ApprovalStatus.EXPIRED)
    tx.update_approval(expired, ApprovalStatus.PENDING)
    tx.append_audit(
        "approval_expired", at=now, run_id=approval.run_id, data=approval_audit(expired)
    )
    approval_expired(expired, now)
    return expired


def load_for_decision(
    tx: Tx, approval_id: str, now: float, policy: Policy | None
) -> Approval | ApprovalStateError:
    """The pending approval to decide, or the error to raise once the transaction commits
    (an expiry found on the way is recorded, not rolled back)."""
    approval = tx.get_approval(approval_id)
    if approval is None:
        raise ApprovalStateError(
            f"no approval {approval_id}; list pending ones with `tether approvals list`"
        )
    # The run's row first, as its driver and the gate take it (then the run's audit head):
    # a driver pausing the run reads its approvals under this lock, so it either sees this
    # decision or has set the run awaiting_approval before ``queue_if_decided`` looks.
    tx.lock_run(approval.run_id)
    if not request_sealed(tx.keys, approval):
        # Who may decide (or which call, for whom, until when) was edited in the row, or
        # the request never went through tether: nobody's decision on it counts.
        raise ApprovalInvalid(
            f"approval {approval.approval_id}'s request is not as tether made it (its row was "
            "edited outside tether, or its seal is missing), so no decision on it is "
            "accepted; run `tether audit verify` and propose the call again"
        )
    if approval.status is ApprovalStatus.PENDING and now > approval.expires_at:
        expire(tx, approval, now)
        return ApprovalStateError(
            f"approval {approval_id} expired; the call must be proposed again"
        )
    if policy is not None and approval.policy_version != policy.version:
        raise ApprovalStateError(
            f"approval {approval_id} was requested under policy {approval.policy_version}, "
            f"but policy {policy.version} is in force; the call must be proposed again"
        )
    return approval


def authorized_for(approval: Approval, policy: Policy | None) -> frozenset[str]:
    if policy is not None:
        return policy.approvers_for(approval.tool)
    return frozenset(approval.approvers)


def decide_approval(
    store: Store,
    approval_id: str,
    approver: Identity | str,
    *,
    approve: bool,
    now: float,
    reason: str | None = None,
    policy: Policy | None = None,
) -> Approval:
    """Approve or deny a pending approval as ``approver``; raises if they may not."""
    who = as_approver(approver)
    with store.transaction() as tx:
        found = load_for_decision(tx, approval_id, now, policy)
        if isinstance(found, ApprovalStateError):
            # The expiry was recorded; raise once it has committed.
            raise_after: ApprovalStateError | None = found
        else:
            raise_after = None
            decided = _decide(
                tx, store, found, live_identity(tx, who), approve, now, reason, policy
            )
    if raise_after is not None:
        raise raise_after
    approval_decided(decided)  # its wait as a span and the metrics (tether.telemetry)
    if approve:
        crash_point("approval.after_grant_commit")
    return decided


def _decide(
    tx: Tx,
    store: Store,
    found: Approval,
    who: Identity,
    approve: bool,
    now: float,
    reason: str | None,
    policy: Policy | None,
) -> Approval:
    decided = decide_request(
        found,
        approve=approve,
        approver=who.name,
        authorized=authorized_for(found, policy),
        now=now,
        reason=reason,
        tenant_allowed=who.allows_tenant(found.tenant),
        approver_credential=who.credential_id,
    )
    if approve:
        decided = seal_grant(store, decided)
    tx.update_approval(decided, ApprovalStatus.PENDING)
    tx.append_audit(
        "approval_granted" if approve else "approval_denied",
        at=now,
        run_id=found.run_id,
        actor=who.name,
        data={**approval_audit(decided), "via": who.via, "reason": reason},
    )
    queue_if_decided(tx, found.run_id, now)
    return decided


def queue_if_decided(tx: Tx, run_id: str, now: float) -> None:
    """A run waiting for approvals becomes ``queued`` once none is pending: any worker (or
    ``tether runs resume``) may then pick it up."""
    run = tx.lock_run(run_id)
    if run is None or run.status != RunStatus.AWAITING_APPROVAL:
        return
    if any(a.status is ApprovalStatus.PENDING for a in tx.approvals_for_run(run_id)):
        return
    tx.update_run(replace(run, status=RunStatus.QUEUED.value, updated_at=now))
    tx.append_audit("run_queued", at=now, run_id=run_id, data={"why": "approvals decided"})


def latest_approval(store: Store, run_id: str, call_id: str, now: float) -> Approval | None:
    """The latest approval for a call, marked expired first if its time has passed."""
    with store.read() as tx:
        found = tx.find_approval(run_id, call_id)
    if found is None or found.status is not ApprovalStatus.PENDING or now <= found.expires_at:
        return found
    with store.transaction() as tx:
        current = tx.find_approval(run_id, call_id)
        if current is None or current.status is not ApprovalStatus.PENDING:
            return current
        return expire(tx, current, now)


def edit_approval(
    store: Store,
    registry: Registry,
    policy: Policy,
    approval_id: str,
    approver: Identity | str,
    arguments: dict[str, Any],
    *,
    now: float,
    reason: str | None = None,
) -> Approval:
    """An approver's edit of a pending call: the original becomes ``edited``, and a new
    approval, already granted by the editor, binds the edited call (a new call id and
    digest). The edited arguments must pass the tool's schema and the policy again."""
    who = as_approver(approver)
    with store.transaction() as tx:
        found = load_for_decision(tx, approval_id, now, policy)
        if isinstance(found, ApprovalStateError):
            raise_after = found
        else:
            edit = Edit(registry, policy, live_identity(tx, who), arguments, reason)
            edited = _edit(tx, store, edit, found, now)
    if isinstance(found, ApprovalStateError):
        raise raise_after
    approval_edited(found, edited)  # a decision too: its wait as a span, and the metrics
    return edited


def _run_state(tx: Tx, run_id: str) -> RunState:
    record = tx.get_run(run_id)
    if record is None:
        raise RunNotFound(f"approval names run {run_id}, which does not exist")
    return RunState.load(record)


@dataclass(frozen=True)
class Edit:
    """What an approver's edit brings: the new arguments, and what judges them."""

    registry: Registry
    policy: Policy
    who: Identity
    arguments: dict[str, Any]
    reason: str | None


def _edit(tx: Tx, store: Store, edit: Edit, original: Approval, now: float) -> Approval:
    check_identity(original, edit.who, edit.policy.approvers_for(original.tool), now)
    tool = edit.registry.resolve(original.tool, original.tool_version)
    problems = argument_problems(edit.arguments)
    if problems:  # the same limits as a proposed call: an edit is one
        raise InvalidArguments(tool.name, problems)
    state = _run_state(tx, original.run_id)
    if tool.manifest.tenant_parts is not None:
        filled = fill_tenant(edit.arguments, tool.manifest.tenant_parts, state.principal.tenant)
        edit = replace(edit, arguments=filled)
    tool.validate(edit.arguments)
    flags = screen_arguments(edit.arguments)
    decision = decide(edit.policy, state.principal, tool.manifest, edit.arguments, flags)
    if decision.verdict is Verdict.DENY:
        raise PolicyDenied(tool.name, decision.reasons, decision.policy_version)
    edited = _edited_grant(store, edit, original, tool, state, now)
    tx.insert_approval(edited)
    replaced = replace(
        original,
        status=ApprovalStatus.EDITED,
        approver=edit.who.name,
        approver_credential=edit.who.credential_id,
        decision="edit",
        reason=edit.reason,
        decided_at=now,
        replaced_by=edited.approval_id,
    )
    tx.update_approval(replaced, ApprovalStatus.PENDING)
    queue_if_decided(tx, original.run_id, now)
    secrets = secret_values(edit.arguments, tool.manifest.sensitive_fields)
    tx.append_audit(
        "approval_edited",
        at=now,
        run_id=original.run_id,
        actor=edit.who.name,
        data=scrub(
            {
                "approval_id": original.approval_id,
                "replaced_by": edited.approval_id,
                "call_id": original.call_id,
                "edited_call_id": edited.call_id,
                "tool": tool.name,
                "argument_digest": original.argument_digest,
                "edited_argument_digest": edited.argument_digest,
                "decision": decision.to_dict(),
                "reason": edit.reason,
                "approver_credential": edit.who.credential_id,
                "via": edit.who.via,
            },
            secrets,
        ),
    )
    return edited


def _edited_grant(
    store: Store, edit: Edit, original: Approval, tool: Tool, state: RunState, now: float
) -> Approval:
    """The new approval for the edited call, granted (and sealed) by the editor."""
    approval_id = new_id("apr")
    binding = CallBinding(
        run_id=original.run_id,
        call_id=f"{original.call_id}~edit-{approval_id[-8:]}",
        tool=tool.name,
        tool_version=tool.manifest.version,
        tool_schema_digest=tool.manifest.schema_digest,
        arguments=edit.arguments,
        tenant=state.principal.tenant,
        actor=original.actor,
    )
    request = Approval.request(
        approval_id,
        binding,
        policy_version=edit.policy.version,
        now=now,
        ttl_s=edit.policy.approval_ttl_s,
        approvers=edit.policy.approvers_for(tool.name),
        sensitive_fields=tool.manifest.sensitive_fields,
    )
    granted = replace(
        request,
        status=ApprovalStatus.APPROVED,
        approver=edit.who.name,
        approver_credential=edit.who.credential_id,
        decision="edit",
        reason=edit.reason,
        decided_at=now,
        replaces=original.approval_id,
    )
    return seal_grant(store, granted)
