"""A run's log: the conversation and the steps ``tether runs show`` prints, and how they are
appended.

Every transition a run makes leaves a step — calls, approvals granted, denied or edited,
recoveries, reconciliation waits, rollbacks, cancellations — so reading the steps tells the
whole story. Steps and messages are one small row each, numbered by counters in the run's
checkpoint; appending is part of the same compare-and-swap on the run row as the change it
records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.core.approvals import ApprovalStatus
from tether.core.digest import canonical_json
from tether.core.ledger import EffectStatus
from tether.core.lifecycle import RunStatus
from tether.errors import RunNotFound
from tether.gate.state import RunState
from tether.models import Message
from tether.store.base import Store, Tx
from tether.store.rows import RunRecord, StepRecord

# Effects whose outcome nobody knows yet: a run waiting for reconciliation waits on these.
_UNSETTLED = (EffectStatus.DISPATCHED, EffectStatus.UNKNOWN)


@dataclass(frozen=True)
class Step:
    """One recorded step of a run (a model turn, a tool call, an approval...), as shown."""

    index: int
    kind: str
    detail: str


@dataclass
class RunResult:
    """Where a run stands after it was driven: finished, or waiting for approvals or for an
    effect's outcome to be settled."""

    run_id: str
    status: str
    messages: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    final: str = ""
    approvals: list[str] = field(default_factory=list)
    # Operation keys of the effects an ``awaiting_reconciliation`` run waits on.
    waiting_on: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "final": self.final,
            "approvals": self.approvals,
            "waiting_on": self.waiting_on,
            "steps": [{"index": s.index, "kind": s.kind, "detail": s.detail} for s in self.steps],
        }


StepText = tuple[str, str]  # (kind, detail)


def append(
    tx: Tx,
    record: RunRecord,
    *,
    now: float,
    turn: int | None = None,
    messages: Sequence[Message] = (),
    steps: Sequence[StepText] = (),
    counters: dict[str, Any] | None = None,
    **changes: Any,
) -> RunRecord:
    """Append messages and steps to the run ``record`` (read in ``tx``) and write the run with
    ``changes`` in one compare-and-swap; ``counters`` are merged into the checkpoint's own
    small counters. Returns the row as written."""
    state = RunState.load(record)
    extra = dict(state.extra)
    for m in messages:
        extra["messages"] = extra.get("messages", 0) + 1
        tx.append_message(record.run_id, extra["messages"], canonical_json(m.to_dict()))
    at_turn = int(extra.get("turns", 0)) if turn is None else turn
    for kind, detail in steps:
        extra["steps"] = extra.get("steps", 0) + 1
        tx.append_step(
            record.run_id,
            StepRecord(seq=extra["steps"], turn=at_turn, kind=kind, detail=detail, at=now),
        )
    extra.update(counters or {})
    return tx.update_run(
        replace(record, checkpoint_json=replace(state, extra=extra).dump()),
        updated_at=now,
        **changes,
    )


def note(store: Store, run_id: str, steps: Sequence[StepText], *, now: float) -> RunRecord:
    """Record steps on a run nobody needs to hold a lease for (a rollback, a cancellation, a
    human's decision): one transaction of its own."""
    with store.transaction() as tx:
        return append(tx, get_run(tx, run_id), now=now, steps=steps)


def get_run(tx: Tx, run_id: str) -> RunRecord:
    record = tx.get_run(run_id)
    if record is None:
        raise RunNotFound(f"no run {run_id}; see `tether runs list`")
    return record


def load_result(store: Store, run_id: str) -> RunResult:
    """A run as stored: status, conversation, steps, and what it waits for."""
    with store.read() as tx:
        record = get_run(tx, run_id)
        messages = [Message.from_dict(json.loads(b)) for b in tx.messages(run_id)]
        steps = [Step(s.turn, s.kind, s.detail) for s in tx.steps(run_id)]
    status = record.status
    approvals: list[str] = []
    if status == RunStatus.AWAITING_APPROVAL.value:
        pending = store.list_approvals(ApprovalStatus.PENDING, run_id=run_id)
        approvals = [a.approval_id for a in pending]
    waiting_on: list[str] = []
    if status == RunStatus.AWAITING_RECONCILIATION.value:
        effects = store.list_effects(run_id)
        waiting_on = [e.operation_key for e in effects if e.status in _UNSETTLED]
    final = ""
    if status in (RunStatus.COMPLETED.value, RunStatus.ROLLED_BACK.value) and messages:
        final = messages[-1].content
    return RunResult(
        run_id=run_id,
        status=status,
        messages=messages,
        steps=steps,
        final=final,
        approvals=approvals,
        waiting_on=waiting_on,
    )
