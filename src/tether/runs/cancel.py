"""Cancelling a run: it stops for good, and nobody is left asked to decide its calls.

Everything happens in one transaction: the run becomes ``cancelled``, every approval still
pending for it is closed (``expired``: it can never be used, and nobody should spend time
deciding it), and the audit log records the cancellation and each closed approval. A crash
leaves all of it or none.

A run being driven right now loses its lease with the cancellation: the gate refuses every
call of a cancelled run (``tether.gate.plan``, step 0) and the driver's next write sees the
run finished and stops. A tool call already sent on its way still finishes (no one can
unsend it); its effect is in the ledger like any other.

``complete_run`` is the other way a run ends from outside the runner: a run its own code or
framework drove (``Gate.start_run`` and ``Gate.call``) is marked ``completed`` when that code
is done, so it does not read ``running`` for ever. It is refused while an effect's outcome
is unknown or an approval is pending: completing would hide either.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, replace

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.ledger import EffectStatus
from tether.core.lifecycle import RunStatus
from tether.errors import ApprovalRequired, RunNotFound, RunStateError, TetherError
from tether.gate.desk import approval_audit
from tether.gate.pipeline import Gate, ToolCall
from tether.gate.state import RunState, seal_problem_of, sealed
from tether.identity import live_credential
from tether.models import Message
from tether.runs.log import append
from tether.runs.turns import open_turn
from tether.store import Store
from tether.store.base import Tx
from tether.store.rows import RunRecord


@dataclass(frozen=True)
class Cancelled:
    """The run as cancelled, and the approvals the cancellation closed."""

    run: RunRecord
    closed: tuple[Approval, ...]


def cancel_run(
    store: Store,
    run_id: str,
    *,
    actor: str,
    reason: str | None = None,
    now: float | None = None,
    credential: str | None = None,
) -> RunRecord:
    """Cancel ``run_id`` for ``actor`` (who answers for it; ``credential`` is the id of the
    credential that proved it, if any). Refuses an unknown or finished run."""
    return cancel(store, run_id, actor=actor, reason=reason, now=now, credential=credential).run


def complete_run(
    store: Store, run_id: str, *, actor: str, final: str = "", now: float | None = None
) -> RunRecord:
    """Mark ``run_id`` (driven by its own code) ``completed``, audited as ``actor``'s."""
    at = time.time() if now is None else now
    with store.transaction() as tx:
        record = tx.lock_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        status = RunStatus(record.status)
        if status.finished:
            raise RunStateError(f"run {run_id} is already {status.value}")
        open_effects = [
            e.operation_key
            for e in tx.run_effects(run_id)
            if e.status in (EffectStatus.DISPATCHED, EffectStatus.UNKNOWN)
        ]
        pending = [
            a.approval_id
            for a in tx.approvals_for_run(run_id)
            if a.status is ApprovalStatus.PENDING
        ]
        if open_effects or pending:
            waits = ", ".join([*open_effects, *pending])
            raise RunStateError(
                f"run {run_id} cannot be completed while it waits on {waits}: settle the "
                "effect (`tether effects resolve`) or decide the approval first"
            )
        done = append(
            tx,
            record,
            now=at,
            steps=[("final", final)] if final else [],
            status=RunStatus.COMPLETED.value,
            lease_owner=None,
            lease_expires_at=None,
        )
        tx.append_audit("run_completed", at=at, run_id=run_id, actor=actor, data={})
    return done


def cancel(
    store: Store,
    run_id: str,
    *,
    actor: str,
    reason: str | None = None,
    now: float | None = None,
    credential: str | None = None,
) -> Cancelled:
    """``cancel_run``, also saying which approvals it closed."""
    at = time.time() if now is None else now
    with store.transaction() as tx:
        # Locked where the backend has row locks, so a worker claiming it queues behind us
        # and then sees a finished run.
        if credential is not None:  # who cancels is checked as of now, not as of sign-in
            live_credential(tx, credential, actor)
        record = tx.lock_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        previous = RunStatus(record.status)
        if previous.finished:
            raise RunStateError(
                f"run {run_id} is already {previous.value}; only an unfinished run can be cancelled"
            )
        closed: list[Approval] = []
        for approval in tx.approvals_for_run(run_id):
            if approval.status is not ApprovalStatus.PENDING:
                continue
            expired = replace(approval, status=ApprovalStatus.EXPIRED)
            tx.update_approval(expired, ApprovalStatus.PENDING)
            # Right after the update, so that this entry records the approval's new digest.
            tx.append_audit(
                "approval_expired",
                at=at,
                run_id=run_id,
                actor=actor,
                data={**approval_audit(expired), "cause": "run_cancelled"},
            )
            closed.append(expired)
        detail = f"by {actor}" + (f": {reason}" if reason else "")
        if closed:
            detail += f"; closed {', '.join(a.approval_id for a in closed)}"
        cancelled = append(
            tx,
            with_cancelled_flag(tx, record),
            now=at,
            steps=[("cancelled", detail)],
            status=RunStatus.CANCELLED.value,
            lease_owner=None,  # whoever drove it no longer may
            lease_expires_at=None,
        )
        tx.append_audit(
            "run_cancelled",
            at=at,
            run_id=run_id,
            actor=actor,
            data={
                "previous_status": previous.value,
                "reason": reason,
                "credential_id": credential,
                "closed_approvals": [a.approval_id for a in closed],
            },
        )
    return Cancelled(cancelled, tuple(closed))


def with_cancelled_flag(tx: Tx, record: RunRecord) -> RunRecord:
    """``record`` with the cancellation in its sealed counters, so that setting the status
    column back to ``running`` does not undo it. A run whose seals already fail is not
    sealed again (that would bless the edit); the flag is set and the gate still refuses it."""
    state = RunState.load(record)
    flagged = replace(state, cancelled=True)
    if seal_problem_of(state, record.run_id, tx.keys) is None:
        flagged = sealed(flagged, record.run_id, tx.keys)
    return replace(record, checkpoint_json=flagged.dump())


def refuse_open_calls(gate: Gate, run_id: str) -> None:
    """The calls a cancelled run was waiting on, put to the gate, which refuses each as
    cancelled (and audits it): a resume of a cancelled run is answered where every other
    call is, not by the loop that found the run over."""
    with gate.store.read() as tx:
        record = tx.get_run(run_id)
        bodies = tx.messages(run_id) if record is not None else []
    if record is None or record.status != RunStatus.CANCELLED.value:
        return
    unanswered = open_turn([Message.from_dict(json.loads(b)) for b in bodies])
    seen: set[str] = set()
    for tc in unanswered.tool_calls if unanswered is not None else ():
        if tc.id in seen or tc.parse_error is not None:
            continue
        seen.add(tc.id)
        call = ToolCall(call_id=tc.id, tool=tc.name, arguments=dict(tc.arguments))
        with contextlib.suppress(TetherError, ApprovalRequired):
            gate.call(run_id, call)
