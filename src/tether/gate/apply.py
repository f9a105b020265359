"""The one writer: a plan's rows and audit entries written in the plan's order, in the
transaction that judged it (each audit entry records the digests of the rows before it), and
the approval's notification with its request, so neither exists without the other."""

from __future__ import annotations

from tether.core.approvals import ApprovalStatus
from tether.errors import RunNotFound
from tether.gate.notify import notification_for
from tether.gate.plan import ApprovalWrite, AuditWrite, EffectWrite, Write
from tether.store.base import Tx
from tether.store.rows import RunRecord

__all__ = ["apply", "load_run"]


def load_run(tx: Tx, run_id: str) -> RunRecord:
    record = tx.get_run(run_id)
    if record is None:
        raise RunNotFound(f"no run {run_id}; start one with Gate.start_run or `tether run`")
    return record


def apply(tx: Tx, run_id: str, now: float, writes: tuple[Write, ...]) -> None:
    """The one writer: a plan's rows and audit entries, in the plan's order (each audit entry
    records the digests of the rows written before it)."""
    for write in writes:
        if isinstance(write, AuditWrite):
            tx.append_audit(
                write.kind,
                at=now,
                run_id=run_id,
                actor=write.actor,
                data=write.data,
                redactions=write.redactions,
            )
        elif isinstance(write, EffectWrite):
            if write.expected is None:
                tx.insert_effect(write.effect)
            else:
                tx.update_effect(write.effect, write.expected)
        elif isinstance(write, ApprovalWrite):
            if write.expected is None:
                tx.insert_approval(write.approval)
                if write.approval.status is ApprovalStatus.PENDING:
                    # The outbox row commits with the request or not at all; a sender
                    # delivers it later, so the call never waits on a webhook.
                    tx.enqueue_notification(notification_for(write.approval, now))
            else:
                tx.update_approval(write.approval, write.expected)
        else:
            # The record as read in this transaction: only its checkpoint and time change.
            tx.write_checkpoint(write.record, write.checkpoint_json, now)
