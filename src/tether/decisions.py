"""Recording human decisions on approvals: approve, deny, edit, and expiry.

The checks themselves are pure (``approvals.check_decider``); this module does the store I/O,
each decision in one transaction with its audit entry. It needs no app: who may decide was
written into the request from the policy in force when it was made, so the command line can
record a decision without loading the agent's code. When a policy *is* at hand (the gate),
it must still be the version the request was made under.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tether.approvals import Approval, ApprovalStatus, check_decider
from tether.crash import crash_point
from tether.errors import ApprovalStateError
from tether.policy import Policy
from tether.store.base import Store, Tx


def approval_audit(approval: Approval) -> dict[str, Any]:
    data = approval.to_dict()
    data.pop("arguments")  # the digest binds them; the values may hold secrets
    return data


def expire(tx: Tx, approval: Approval, now: float) -> Approval:
    expired = replace(approval, status=ApprovalStatus.EXPIRED)
    tx.update_approval(expired, ApprovalStatus.PENDING)
    tx.append_audit(
        "approval_expired", at=now, run_id=approval.run_id, data=approval_audit(expired)
    )
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
    approver: str,
    *,
    approve: bool,
    now: float,
    reason: str | None = None,
    policy: Policy | None = None,
) -> Approval:
    """Approve or deny a pending approval as ``approver``; raises if they may not."""
    with store.transaction() as tx:
        found = load_for_decision(tx, approval_id, now, policy)
        if isinstance(found, ApprovalStateError):
            # The expiry was recorded; raise once it has committed.
            raise_after: ApprovalStateError | None = found
        else:
            raise_after = None
            check_decider(
                found, approver=approver, authorized=authorized_for(found, policy), now=now
            )
            decided = replace(
                found,
                status=ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED,
                approver=approver,
                decision="approve" if approve else "deny",
                reason=reason,
                decided_at=now,
            )
            tx.update_approval(decided, ApprovalStatus.PENDING)
            tx.append_audit(
                "approval_granted" if approve else "approval_denied",
                at=now,
                run_id=found.run_id,
                actor=approver,
                data={**approval_audit(decided), "reason": reason},
            )
            queue_if_decided(tx, found.run_id, now)
    if raise_after is not None:
        raise raise_after
    if approve:
        crash_point("approval.after_grant_commit")
    return decided


def queue_if_decided(tx: Tx, run_id: str, now: float) -> None:
    """A run waiting for approvals becomes ``queued`` once none is pending: any worker (or
    ``tether runs resume``) may then pick it up."""
    run = tx.lock_run(run_id)
    if run is None or run.status != "awaiting_approval":
        return
    if any(a.status is ApprovalStatus.PENDING for a in tx.approvals_for_run(run_id)):
        return
    tx.update_run(replace(run, status="queued", updated_at=now))
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
