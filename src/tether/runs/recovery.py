"""Recovery of runs whose worker died, and compensation of a run's effects.

A run is recoverable when it is ``running`` but nobody holds its lease (the worker died: its
lease expired, or its process is gone), or when it waits for reconciliation. Recovering one
is resuming it under a new lease — which reconciles what the dead worker left unsettled —
so two recoverers racing for one run admit exactly one (the lease is a compare-and-swap).

A run with no conversation in tether's store (started with ``Gate.start_run`` by a framework
adapter, which keeps the conversation itself) has no driver here: its framework is. Recovery
only settles the effects such a run's dead process left ``dispatched`` or ``unknown``, through
the tool's ``reconcile`` as the runner does, and touches nothing else of the run (no model
turn, no status, no lease), so the framework's next call of the same call id replays what was
settled. Such a run holds no lease while a call is in flight, so a ``dispatched`` effect is
taken as abandoned only once no live caller can still be waiting on it: the gate records an
outcome when a tool with ``timeout_s`` times out, so after that time plus ``in_flight_s`` (for
a tool without one, after ``in_flight_s``) its caller is gone.

Compensation carries seed 003's rollback to real external effects: each committed effect
whose tool names a compensating tool is undone, newest first, and each undo is a governed call
of its own (policy, approval, ledger, audit) with the key ``undo-<call id>``. Each rollback
leaves a step on the run; one waiting for an approval names the command that continues it,
and a run whose effects are all compensated becomes ``rolled_back``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.core.approvals import ApprovalStatus
from tether.core.ledger import Effect, EffectStatus
from tether.core.lifecycle import UNDO_PREFIX, RunStatus
from tether.errors import (
    ApprovalRequired,
    Denied,
    OutcomeUnknown,
    RunConflict,
    RunNotFound,
    RunStateError,
    TetherError,
    ToolFailed,
)
from tether.gate.pipeline import Gate, ToolCall
from tether.gate.state import RunState
from tether.models import Message
from tether.runs import log as run_log
from tether.runs.leases import lease_held
from tether.runs.reconcile import UNSETTLED, Reconciled, Settlement, reconcile_effect
from tether.runs.runner import Runner
from tether.store.base import Store
from tether.store.rows import RunRecord

# How long a framework run's ``dispatched`` effect (beyond its tool's timeout) may be a call
# still in flight: a run without a conversation holds no lease that would say its caller died.
IN_FLIGHT_S = 300.0


@dataclass
class RecoveryReport:
    recovered: dict[str, str] = field(default_factory=dict)  # run id -> status after
    reconciled: Counter[str] = field(default_factory=Counter)  # settlement -> effects
    waiting_for_human: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # run id -> why
    # Runs with no conversation (a framework drives them): what each effect settled as ...
    settled_effects: dict[str, list[Reconciled]] = field(default_factory=dict)
    # ... and the keys of those dispatched too recently to tell from a call still in flight.
    in_flight: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        settled = Counter(r.settlement.value for rs in self.settled_effects.values() for r in rs)
        return {
            "runs_recovered": len(self.recovered),
            "runs": self.recovered,
            "effects_reconciled": {k: self.reconciled.get(k, 0) for k in _SETTLEMENTS},
            "runs_waiting_for_human": self.waiting_for_human,
            "skipped": self.skipped,
            "framework_effects_settled": {k: settled.get(k, 0) for k in _SETTLEMENTS},
            "settled_effects": {
                run_id: [
                    {
                        "operation_key": r.operation_key,
                        "settlement": r.settlement.value,
                        "detail": r.detail,
                    }
                    for r in rs
                ]
                for run_id, rs in self.settled_effects.items()
            },
            "in_flight": self.in_flight,
        }


_SETTLEMENTS = tuple(s.value for s in Settlement)


def recoverable(store: Store, now: float, worker: str) -> list[RunRecord]:
    """Runs nobody drives that should move: running under a dead lease, queued (new, or
    all its approvals decided), waiting for reconciliation, or waiting for its model."""
    running = [
        r for r in store.list_runs(RunStatus.RUNNING.value) if not lease_held(r, worker, now)
    ]
    return (
        running
        + store.list_runs(RunStatus.QUEUED.value)
        + store.list_runs(RunStatus.AWAITING_RECONCILIATION.value)
        + store.list_runs(RunStatus.AWAITING_MODEL.value)
    )


def recover(
    store: Store, make_runner: Callable[[], Runner], *, in_flight_s: float = IN_FLIGHT_S
) -> RecoveryReport:
    """Resume every recoverable run; report what was reconciled and what needs a human.

    A run with no conversation is not resumed (its framework drives it): only its unsettled
    effects are reconciled (see the module docstring for ``in_flight_s``)."""
    if in_flight_s < 0:
        raise ValueError(f"in_flight_s must be 0 or more seconds, not {in_flight_s}")
    report = RecoveryReport()
    probe = make_runner()
    for record in recoverable(store, probe.clock(), probe.worker):
        if not has_conversation(record):
            _settle_framework_run(probe.gate, record.run_id, report, in_flight_s)
            continue
        runner = make_runner()
        try:
            result = runner.resume(record.run_id)
        except RunConflict as e:
            report.skipped[record.run_id] = str(e)
            continue
        except RunStateError as e:  # finished meanwhile (another recoverer got there first)
            report.skipped[record.run_id] = str(e)
            continue
        report.recovered[record.run_id] = result.status
        report.reconciled.update(r.settlement.value for r in runner.reconciled)
        if result.status == RunStatus.AWAITING_RECONCILIATION.value:
            report.waiting_for_human.append(record.run_id)
    return report


def has_conversation(record: RunRecord) -> bool:
    """Whether tether keeps the run's conversation (the runner drives it), the same test
    ``Runner.resume`` makes; a framework run keeps its conversation outside tether."""
    return bool(RunState.load(record).extra.get("messages"))


def _settle_framework_run(gate: Gate, run_id: str, report: RecoveryReport, grace: float) -> None:
    """Reconcile what a framework run's dead process left unsettled, and nothing more."""
    now = gate.clock()
    settled: list[Reconciled] = []
    for effect in gate.store.list_effects(run_id):
        if effect.status not in UNSETTLED:
            continue
        if effect.status is EffectStatus.DISPATCHED and not _abandoned(gate, effect, now, grace):
            report.in_flight.setdefault(run_id, []).append(effect.operation_key)
            continue
        try:
            settled.append(reconcile_effect(gate, effect))
        except TetherError as e:
            # Its caller recorded the outcome, or another recoverer settled it, between our
            # read and our write (each transition is a compare-and-swap): nothing is lost.
            report.skipped[run_id] = f"{effect.operation_key} changed while settling it: {e}"
    if settled:
        report.settled_effects[run_id] = settled


def _abandoned(gate: Gate, effect: Effect, now: float, grace: float) -> bool:
    """Whether no live caller can still be waiting on a ``dispatched`` effect (its tool's
    timeout, after which the gate itself records an outcome, and then ``grace``, are past)."""
    tool = gate.registry.find(effect.tool_name)
    timeout = tool.manifest.timeout_s if tool is not None else None
    return now - effect.updated_at >= (timeout or 0.0) + grace


@dataclass
class RollbackReport:
    run_id: str
    compensated: list[str] = field(default_factory=list)  # operation keys undone
    waiting: list[str] = field(default_factory=list)  # approval ids an undo waits for
    not_compensable: list[str] = field(default_factory=list)  # no compensating tool
    stopped: str | None = None  # why compensation stopped early
    next: str | None = None  # what to do to continue, when it is not complete

    @property
    def complete(self) -> bool:
        return not self.waiting and self.stopped is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "compensated": self.compensated,
            "approvals": self.waiting,
            "not_compensable": self.not_compensable,
            "stopped": self.stopped,
            "complete": self.complete,
            "next": self.next,
        }


def next_command(run_id: str, call_id: str) -> str:
    """The command that continues a run once the approval of its call ``call_id`` is
    decided: an undo belongs to a rollback, which is re-run; any other call to the run."""
    if call_id.startswith(UNDO_PREFIX):
        return f"tether runs rollback {run_id}"
    return f"tether runs resume {run_id}"


def rollback(gate: Gate, run_id: str) -> RollbackReport:
    """Compensate the run's committed effects, newest first, each as a governed call.

    Stops at the first undo that must wait for approval (or fails): undoing out of order
    could leave the outside world in a state no one intended. Calling it again after the
    approval continues; undos already done are replays, never second calls."""
    store = gate.store
    with store.read() as tx:
        record = tx.get_run(run_id)
    if record is None:
        raise RunNotFound(f"no run {run_id}; see `tether runs list`")
    if lease_held(record, "rollback", gate.clock()):
        raise RunConflict(f"run {run_id} is being driven by {record.lease_owner}; try later")
    report = _compensate(gate, run_id)
    if record.status != RunStatus.ROLLED_BACK.value:
        _record_rollback(gate, run_id, report)
    return report


def _compensate(gate: Gate, run_id: str) -> RollbackReport:
    store = gate.store
    report = RollbackReport(run_id)
    effects = [
        e
        for e in store.list_effects(run_id)
        if e.status.took_effect and not e.call_id.startswith(UNDO_PREFIX)
    ]
    for effect in reversed(effects):
        tool = gate.registry.find(effect.tool_name)
        compensation = tool.manifest.compensation if tool is not None else None
        if compensation is None:
            report.not_compensable.append(effect.operation_key)
            continue
        call = ToolCall(
            call_id=f"{UNDO_PREFIX}{effect.call_id}",
            tool=compensation,
            arguments=_arguments_of(store, effect),
        )
        try:
            gate.call(run_id, call)
        except ApprovalRequired as signal:
            report.waiting.append(signal.approval_id)
            report.next = (
                f"the undo of {effect.operation_key} ('{compensation}') waits for approval "
                f"{signal.approval_id}: approve it (`tether approvals approve "
                f"{signal.approval_id}`), then re-run `{next_command(run_id, call.call_id)}`"
            )
            return report
        except (Denied, ToolFailed, OutcomeUnknown, TetherError) as e:
            report.stopped = f"undoing {effect.operation_key}: {e}"
            report.next = (
                f"settle what stopped it, then re-run `tether runs rollback {run_id}`; undos "
                "already done are not repeated"
            )
            return report
        report.compensated.append(effect.operation_key)
    return report


def _record_rollback(gate: Gate, run_id: str, report: RollbackReport) -> None:
    """One step for this rollback; a complete one also finishes the run as ``rolled_back``
    (a run still moving keeps its status: it has effects to come)."""
    done = ", ".join(report.compensated) or "nothing"
    if report.complete:
        skipped = ", ".join(report.not_compensable)
        detail = f"compensated {done}" + (f"; nothing undoes {skipped}" if skipped else "")
        step = ("rolled_back", detail)
    elif report.waiting:
        step = ("rollback_waiting", f"compensated {done}; {report.next}")
    else:
        step = ("rollback_stopped", f"compensated {done}; stopped {report.stopped}; {report.next}")
    now = gate.clock()
    with gate.store.transaction() as tx:
        record = run_log.get_run(tx, run_id)
        changes: dict[str, Any] = {}
        if report.complete and RunStatus(record.status).finished:
            changes["status"] = RunStatus.ROLLED_BACK.value
        run_log.append(tx, record, now=now, steps=[step], **changes)
        if changes:
            tx.append_audit(
                "run_rolled_back",
                at=now,
                run_id=run_id,
                data={"compensated": report.compensated, "previous_status": record.status},
            )


def _arguments_of(store: Store, effect: Effect) -> dict[str, Any]:
    """The arguments an effect ran with: from its approval (edits included), else from the
    model's tool call in the run's conversation."""
    for approval in store.list_approvals(run_id=effect.run_id):
        if approval.call_id == effect.call_id and approval.status is ApprovalStatus.USED:
            return dict(approval.arguments)
    with store.read() as tx:
        bodies = tx.messages(effect.run_id)
    for body in bodies:
        message = Message.from_dict(json.loads(body))
        for tc in message.tool_calls:
            if tc.id == effect.call_id:
                return dict(tc.arguments)
    raise RunStateError(
        f"cannot find the arguments of {effect.operation_key}; it cannot be compensated"
    )
