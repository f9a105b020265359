"""Durable agent runs: the model loop whose every tool call goes through the gate.

The model gets the conversation and the registry's tool schemas; each proposed call goes
through ``Gate.call``; results come back as tool messages; a message without tool calls ends
the run. Everything a resume needs is in the store, one small row per message and per step
(``run_log``), plus a few counters in the run's checkpoint — never the whole history again
(which would make long runs quadratic). A resume in any process reloads the conversation and
continues:

- a model turn whose answer was stored is never asked again;
- a tool call whose effect was recorded is replayed from the ledger, never run again;
- a call waiting for a human is matched to its approval by the call's id, never by position.

A run is driven by one worker at a time, under a lease in the run row (``lifecycle.claim``);
a second worker trying the same run gets ``RunConflict``. Approvals are decided inline by an
``Approver`` callback, or asynchronously: the run persists what it waits for, becomes
``awaiting_approval`` and the process may exit. A run that finishes under its driver (someone
cancelled it) is left as it is: the driver stops and writes nothing more.

The module is long because the run loop (claim, drive, answer, finish) is one state machine, and
it reads best in one place; a turn's helpers live in turns.py and leases in leases.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.budget import Budget
from tether.core.ledger import EffectStatus
from tether.core.lifecycle import RunStatus
from tether.core.principal import Principal
from tether.crash import crash_point
from tether.errors import (
    ApprovalDenied,
    ApprovalExpired,
    IntegrityError,
    RunConflict,
    RunNotFound,
    RunStateError,
    StaleState,
    StoreError,
)
from tether.gate import answer as gate_answer
from tether.gate.answer import answer
from tether.gate.pipeline import Gate, ToolCall
from tether.gate.state import RunState
from tether.models import Message, Model, ModelToolCall
from tether.runs import log as run_log
from tether.runs.asking import Asking, Unanswered, _ModelBug
from tether.runs.cancel import refuse_open_calls
from tether.runs.leases import Claim, Heartbeat, claim, worker_name
from tether.runs.log import RunResult, Step, StepText, load_result
from tether.runs.reconcile import Reconciled, Settlement, reconcile_run
from tether.runs.turns import (
    Answer,
    Answered,
    Shown,
    Unsettled,
    Waiting,
    open_turn,
    tool_error,
)
from tether.store.base import Tx
from tether.store.rows import RunRecord
from tether.telemetry.spans import traced_run

__all__ = ["Approver", "RunResult", "Runner", "Step", "load_result"]

# Given the pending approval, the approver's answer: True approves, False denies.
Approver = Callable[[Approval], bool]

# Failures that say nothing about the run itself (the store is unreachable, another worker
# took the lease, the rows were edited behind tether's back): the run is left to be resumed
# once they clear, never marked failed for them.
_TRANSIENT = (StoreError, RunConflict, IntegrityError)


class _Stopped(Exception):
    """The run finished while this driver held it (it was cancelled): stop, write nothing."""


class Runner:
    """Drives runs of one agent: a model and a gate (its registry, policy and store)."""

    def __init__(
        self,
        gate: Gate,
        model: Model,
        *,
        system: str = "",
        max_turns: int = 8,
        approver: Approver | None = None,
        approver_id: str | None = None,
        worker: str | None = None,
        lease_s: float = 60.0,
        metadata: dict[str, Any] | None = None,
        asking: Asking | None = None,
    ) -> None:
        if approver is not None and approver_id is None:
            raise ValueError("an inline approver needs approver_id: who is deciding")
        self.gate = gate
        self.store = gate.store
        self.model = model
        self.system = system
        self.max_turns = max_turns
        self.approver = approver
        self.approver_id = approver_id
        self.worker = worker or worker_name()
        self.lease_s = lease_s
        self.metadata = metadata or {}
        self.asking = asking or Asking()  # retries and backoff for a model that fails
        self.reconciled: list[Reconciled] = []

    @property
    def clock(self) -> Callable[[], float]:
        return self.gate.clock

    # -- public API --------------------------------------------------------------------------
    def start(
        self,
        user_input: str,
        principal: Principal,
        *,
        budget: Budget | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Start a run and drive it until it finishes or waits for a human."""
        run_id = self.create(user_input, principal, budget=budget, run_id=run_id)
        return self.resume(run_id)

    def create(
        self,
        user_input: str,
        principal: Principal,
        *,
        budget: Budget | None = None,
        run_id: str | None = None,
    ) -> str:
        """Persist a new run without driving it (a worker will pick it up)."""
        run_id = self.gate.start_run(principal, budget=budget, run_id=run_id)
        self.begin(run_id, user_input)
        return run_id

    def begin(self, run_id: str, user_input: str, *, queued: bool = False) -> None:
        """Open the conversation of a run made with ``Gate.start_run`` (``queued``: as queued)."""
        first = [Message(role="system", content=self.system)] if self.system else []
        first.append(Message(role="user", content=user_input))
        with self.store.read() as tx:
            _no_conversation_yet(run_log.get_run(tx, run_id))
        # The trusted input first: a worker may claim the run once its conversation is in.
        self.gate.record_input(run_id, user_input)
        with self.store.transaction() as tx:
            record = run_log.get_run(tx, run_id)
            _no_conversation_yet(record)
            now, counters = self.clock(), {**self.metadata, "turns": 0}
            run_log.append(tx, record, now=now, messages=first, counters=counters)
            if queued:
                tx.append_audit("run_queued", at=now, run_id=run_id, data={})

    def create_queued(self, user_input: str, principal: Principal, **options: Any) -> str:
        """A new run for a worker to pick up (``tether run --enqueue``), queued from the start:
        made running (unleased: claimable) and queued after, a worker could claim it first."""
        run_id = self.gate.start_run(principal, status=RunStatus.QUEUED.value, **options)
        self.begin(run_id, user_input, queued=True)
        return run_id

    def resume(self, run_id: str) -> RunResult:
        """Continue a run from its checkpoint, in this process.

        Effects a previous worker left unsettled (it died between ``dispatched`` and the
        outcome) are reconciled first; one that cannot be leaves the run
        ``awaiting_reconciliation``, saying which effect it waits on. A cancelled run's
        open calls are put to the gate, which refuses them as cancelled (and audits it)."""
        try:
            claimed = self._claim(run_id)
        except RunStateError:
            refuse_open_calls(self.gate, run_id)
            raise
        heartbeat = Heartbeat(self.store, run_id, self.worker, self.lease_s, self.clock)
        heartbeat.start()
        try:
            return traced_run(run_id, lambda: self._recover_and_drive(run_id, claimed))
        except _Stopped:
            return load_result(self.store, run_id)
        except _TRANSIENT:
            if self._finished_meanwhile(run_id):
                return load_result(self.store, run_id)
            self._release(run_id)
            raise
        except Exception as e:
            if self._finished_meanwhile(run_id):
                return load_result(self.store, run_id)
            if self._in_flight(run_id):
                # The tool ran but its outcome is not recorded: recovery reconciles it.
                self._release(run_id)
                raise
            # A bug would raise again at every resume, leaving the run "running" with
            # nothing that can move it: fail it, saying why.
            if isinstance(e, _ModelBug):
                reason, fix = f"internal error: {e}", "fix the model"
            else:
                reason, fix = f"internal error: {e!r}", "please report the bug"
            self._fail(run_id, reason)
            raise RunStateError(
                f"run {run_id} failed on an {reason}; it is marked failed with that reason "
                f"(see `tether runs show`): {fix}. {self._kept(run_id)}"
            ) from e
        except BaseException:
            self._release(run_id)
            raise
        finally:
            heartbeat.stop()

    # -- claiming and recovering -------------------------------------------------------------
    def _claim(self, run_id: str) -> Claim | None:
        """Take the run's lease; None if a worker already took it for this runner."""
        now = self.clock()
        try:
            with self.store.transaction() as tx:
                claimed = self._claim_in(tx, run_id, now)
        except StaleState as e:  # another worker wrote the run between our read and our write
            raise RunConflict(f"run {run_id} was claimed by another worker") from e
        crash_point("runs.after_claim")
        return claimed

    def _claim_in(self, tx: Tx, run_id: str, now: float) -> Claim | None:
        record = tx.lock_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        if not RunState.load(record).extra.get("messages"):
            raise RunStateError(
                f"run {run_id} has no conversation: it was started with Gate.start_run and is "
                "driven call by call by its own code, so there is nothing here to resume"
            )
        if record.status == RunStatus.RUNNING.value and record.lease_owner == self.worker:
            return None  # claimed for us already (a worker takes the lease as it picks the run)
        return claim(tx, record, self.worker, now, self.lease_s, by="runner")

    def _recover_and_drive(self, run_id: str, claimed: Claim | None) -> RunResult:
        steps: list[StepText] = []
        if claimed is not None and claimed.taken_from is not None:
            steps.append(("recovered", f"{self.worker} took over from {claimed.taken_from}"))
        elif claimed is not None and claimed.previous_status is RunStatus.AWAITING_RECONCILIATION:
            steps.append(("recovered", f"{self.worker} resumed the run to reconcile its effects"))
        self.reconciled = reconcile_run(self.gate, run_id)
        for r in self.reconciled:
            detail = f"{r.operation_key}: {r.settlement.value}"
            steps.append(("reconciled", detail + (f" ({r.detail})" if r.detail else "")))
        if steps:
            self._record(run_id, steps=steps, turn=self._turn(run_id))
        unresolved = [r for r in self.reconciled if r.settlement is Settlement.UNRESOLVED]
        if unresolved:
            return self._wait_for_reconciliation(run_id, [r.operation_key for r in unresolved])
        return self._drive(run_id)

    def _wait_for_reconciliation(self, run_id: str, keys: list[str]) -> RunResult:
        steps = [
            (
                "awaiting_reconciliation",
                f"waits on effect {key}: `tether effects resolve {key} --committed|--absent`, "
                "then `tether recover`",
            )
            for key in keys
        ]
        self._record(run_id, steps=steps, turn=self._turn(run_id))
        return self._finish(run_id, RunStatus.AWAITING_RECONCILIATION, waiting_on=keys)

    def _finished_meanwhile(self, run_id: str) -> bool:
        """Whether the run finished under us (cancelled): then there is nothing to write."""
        try:
            with self.store.read() as tx:
                record = tx.get_run(run_id)
            return record is not None and RunStatus(record.status).finished
        except Exception:
            return False

    def _in_flight(self, run_id: str) -> bool:
        try:
            effects = self.store.list_effects(run_id)
        except Exception:
            return True  # the store cannot say: leave the run to recovery rather than guess
        return any(e.status is EffectStatus.DISPATCHED for e in effects)

    def _fail(self, run_id: str, reason: str) -> None:
        try:
            self._record(run_id, steps=[("error", reason[:2000])], turn=self._turn(run_id))
            self._finish(run_id, RunStatus.FAILED, reason=reason)
        except _Stopped:
            pass
        except Exception:
            self._release(run_id)  # the store itself is failing: leave it to recovery

    def _kept(self, run_id: str) -> str:
        """What a failed run leaves done, for its error message: starting it again would
        repeat these, so the message says so instead of advising a new run."""
        try:
            done = [e for e in self.store.list_effects(run_id) if e.status.took_effect]
        except Exception:
            return ""
        if not done:
            return "It committed no side effect."
        listed = ", ".join(f"{e.tool_name} ({e.operation_key})" for e in done[:5])
        more = f" and {len(done) - 5} more" if len(done) > 5 else ""
        return (
            f"It committed {len(done)} side effect{'s' if len(done) != 1 else ''}: {listed}{more}"
            "; a new run would ask for them again"
        )

    def _turn(self, run_id: str) -> int:
        return int(self.gate.run_state(run_id).extra.get("turns", 0))

    def _release(self, run_id: str) -> None:
        try:
            with self.store.transaction() as tx:
                record = tx.get_run(run_id)
                if record is not None and record.lease_owner == self.worker:
                    tx.update_run(replace(record, lease_owner=None, lease_expires_at=None))
        except Exception:
            pass

    # -- the loop ----------------------------------------------------------------------------
    def _drive(self, run_id: str) -> RunResult:
        with self.store.read() as tx:
            record = run_log.get_run(tx, run_id)
            messages = [Message.from_dict(json.loads(b)) for b in tx.messages(run_id)]
        turn = int(RunState.load(record).extra.get("turns", 0))
        tools = self.gate.registry.tool_specs()
        while True:
            last = messages[-1]
            unanswered = open_turn(messages)
            if unanswered is not None:
                pending = self._answer_calls(run_id, messages, unanswered, turn - 1)
                unsettled = [p.operation_key for p in pending if isinstance(p, Unsettled)]
                if unsettled:
                    return self._wait_for_reconciliation(run_id, unsettled)
                if pending:
                    approvals = [p.approval_id for p in pending if isinstance(p, Waiting)]
                    return self._finish(run_id, RunStatus.AWAITING_APPROVAL, approvals=approvals)
                continue
            if last.role == "assistant" and not last.tool_calls:
                crash_point("runs.before_finish")
                return self._finish(run_id, RunStatus.COMPLETED, final=last.content)
            if turn >= self.max_turns:
                return self._failed(run_id, f"no final answer after {self.max_turns} turns", turn)
            reply = self.asking.ask(self.model, messages, tools)
            if isinstance(reply, Unanswered):
                if reply.retryable:  # nothing is lost: the run waits to be asked again
                    self._record(
                        run_id, steps=[("model_unavailable", reply.reason[:2000])], turn=turn
                    )
                    return self._finish(run_id, RunStatus.AWAITING_MODEL, reason=reply.reason)
                return self._failed(run_id, reply.reason, turn)
            crash_point("runs.after_model_reply")
            steps = [] if reply.tool_calls else [("final", reply.content)]
            self._record(run_id, messages=[reply], steps=steps, turn=turn, turns=turn + 1)
            crash_point("runs.after_turn_commit")
            turn += 1
            messages.append(reply)

    def _failed(self, run_id: str, reason: str, turn: int) -> RunResult:
        self._record(run_id, steps=[("error", reason[:2000])], turn=turn)
        return self._finish(run_id, RunStatus.FAILED, reason=reason)

    def _answer_calls(
        self, run_id: str, messages: list[Message], turn_message: Message, turn: int
    ) -> list[Waiting | Unsettled]:
        """Answer every open call of the turn that can be answered; return what the others
        wait for. Siblings that need no approval are answered before the run waits."""
        # Only the messages after the turn can answer it (scanning them all would make every
        # step cost more than the last).
        start = len(messages) - 1
        while messages[start] is not turn_message:
            start -= 1
        answered = {m.tool_call_id for m in messages[start + 1 :] if m.role == "tool"}
        pending: list[Waiting | Unsettled] = []
        for tc in turn_message.tool_calls:
            if tc.id in answered:
                continue
            steps: list[StepText] = []
            match self._answer(run_id, tc, steps, turn):
                case Answered(message):
                    self._record(run_id, messages=[message], steps=steps, turn=turn)
                    crash_point("runs.after_tool_message")
                    messages.append(message)
                case Waiting() | Unsettled() as waiting:
                    self._record(run_id, steps=steps, turn=turn)
                    pending.append(waiting)
        return pending

    def _answer(self, run_id: str, tc: ModelToolCall, steps: list[StepText], turn: int) -> Answer:
        """What answers ``tc``: its tool message, or what it must wait for."""
        if tc.parse_error is not None:
            steps.append(("tool_error", f"{tc.name}: {tc.parse_error}"))
            return Answered(tool_error(tc, "invalid_arguments", message=tc.parse_error))
        call = ToolCall(call_id=tc.id, tool=tc.name, arguments=dict(tc.arguments))
        shown = Shown(self.gate, tc.name, tc.arguments)
        approval = self.gate.approval_for(run_id, tc.id)
        if approval is not None and approval.status is ApprovalStatus.EDITED:
            # The gate follows the edit; the run's steps say who changed what.
            with self.store.read() as tx:
                edited = tx.get_approval(approval.replaced_by or "")
            if edited is not None:
                replaced = f"approval {approval.approval_id} replaced by {edited.approval_id}"
                arguments = Shown(self.gate, tc.name, edited.arguments).arguments
                self._note_once(
                    run_id,
                    ("approval_edited", f"{tc.name}: {replaced} by {edited.approver}: {arguments}"),
                    key=approval.approval_id,
                    turn=turn,
                )
                approval = edited
        if approval is not None and approval.status is ApprovalStatus.PENDING:
            return Waiting(approval.approval_id)  # nothing new to ask the gate yet
        if approval is not None and approval.status in (
            ApprovalStatus.APPROVED,
            ApprovalStatus.USED,
        ):
            # Written before the call is made, in its own transaction: a worker dying
            # mid-call must not take the record of the grant with it.
            self._note_once(
                run_id,
                ("approval_granted", f"{tc.name} by {approval.approver}"),
                key=approval.approval_id,
                turn=turn,
            )
        # The gate decides (an edit followed, an expiry refused, a denial's reason); the
        # loop only turns its answer into a tool message, a pause or a stop.
        got = answer(lambda: self.gate.call(run_id, call))
        if isinstance(got, gate_answer.Waiting):
            steps.append(("approval_required", f"{tc.name}({shown.arguments})"))
            if self.approver is None:
                return Waiting(got.approval_id)
            self._decide_inline(got.approval_id, tc, steps)
            got = answer(lambda: self.gate.call(run_id, call))
            if isinstance(got, gate_answer.Waiting):
                return Waiting(got.approval_id)
        if isinstance(got, gate_answer.Refused):
            error = got.error
            if isinstance(error, ApprovalDenied):
                steps.append(
                    ("approval_denied", tc.name + (f": {error.reason}" if error.reason else ""))
                )
                return Answered(tool_error(tc, "approval_denied", reason=error.reason))
            # Error messages quote what they reject, secrets included: scrub before they are
            # stored as a step or shown to the model.
            message = shown.scrub(got.text)
            if isinstance(error, ApprovalExpired):
                steps.append(("approval_expired", tc.name))
                expired = approval.approval_id if approval is not None else None
                return Answered(tool_error(tc, "approval_expired", approval_id=expired))
            steps.append(("tool_error", f"{tc.name}: {message}"))
            return Answered(tool_error(tc, type(error).__name__, message=message))
        if isinstance(got, gate_answer.Unsettled):
            # Never guessed, never retried here: the run stops until the effect is settled
            # (by reconciliation once this call's worker is gone, or by a human).
            steps.append(("outcome_unknown", f"{tc.name}: {got.error}"))
            return Unsettled(got.operation_key)
        outcome = got.outcome
        steps.append(("tool_call", f"{tc.name}({shown.arguments}) -> {outcome.text}"))
        return Answered(Message(role="tool", content=outcome.text, tool_call_id=tc.id))

    def _decide_inline(self, approval_id: str, tc: ModelToolCall, steps: list[StepText]) -> None:
        assert self.approver is not None and self.approver_id is not None
        with self.store.read() as tx:
            pending = tx.get_approval(approval_id)
        assert pending is not None
        if self.approver(pending):
            self.gate.approve(approval_id, self.approver_id)
            steps.append(("approval_granted", f"{tc.name} by {self.approver_id}"))
        else:
            self.gate.deny(approval_id, self.approver_id)

    # -- persistence -------------------------------------------------------------------------
    def _record(
        self,
        run_id: str,
        *,
        messages: tuple[Message, ...] | list[Message] = (),
        steps: tuple[StepText, ...] | list[StepText] = (),
        turn: int,
        turns: int | None = None,
    ) -> None:
        """Append messages and steps and renew the lease, in one transaction (I6: the write is
        a compare-and-swap on the run, and only the lease holder may make it)."""
        counters = {} if turns is None else {"turns": turns}

        def write(tx: Tx, record: RunRecord, now: float) -> None:
            run_log.append(
                tx,
                record,
                now=now,
                turn=turn,
                messages=messages,
                steps=steps,
                counters=counters,
                lease_expires_at=now + self.lease_s,
            )

        self._write(run_id, write)

    def _note_once(self, run_id: str, step: StepText, *, key: str, turn: int) -> None:
        """Record ``step`` unless the step recorded last under ``key``'s kind was this one (a
        resume passing the same approval again must not repeat it)."""
        counter = f"noted_{step[0]}"

        def write(tx: Tx, record: RunRecord, now: float) -> None:
            if RunState.load(record).extra.get(counter) == key:
                return
            run_log.append(
                tx,
                record,
                now=now,
                turn=turn,
                steps=[step],
                counters={counter: key},
                lease_expires_at=now + self.lease_s,
            )

        self._write(run_id, write)

    def _write(self, run_id: str, write: Callable[[Tx, RunRecord, float], None]) -> None:
        """Run ``write`` on the run as this worker holds it, in one transaction. A run that
        finished meanwhile (cancelled) stops the drive; a lost lease is a ``RunConflict``."""
        now = self.clock()
        try:
            with self.store.transaction() as tx:
                write(tx, self._held(tx, run_id), now)
        except StaleState:
            # Someone else wrote the run between our read and our write: if it finished
            # (a cancellation), stop; otherwise another worker has it.
            if self._finished_meanwhile(run_id):
                raise _Stopped from None
            raise RunConflict(
                f"run {run_id} was written by someone else while this worker drove it"
            ) from None

    def _held(self, tx: Tx, run_id: str) -> RunRecord:
        # Locked before anything is read: ``_finish`` decides awaiting_approval from the
        # run's approvals, and a reviewer's decision committed between that read and the
        # write would find the run still running and leave it to nobody (a lost wake-up).
        record = tx.lock_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        if RunStatus(record.status).finished:
            raise _Stopped
        if record.lease_owner != self.worker:
            raise RunConflict(
                f"run {run_id} is now driven by {record.lease_owner}; this worker lost its lease"
            )
        return record

    def _finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        final: str = "",
        approvals: list[str] | None = None,
        waiting_on: list[str] | None = None,
        reason: str | None = None,
    ) -> RunResult:
        def write(tx: Tx, record: RunRecord, now: float) -> None:
            chosen = status
            if chosen is RunStatus.AWAITING_APPROVAL and not any(
                a.status is ApprovalStatus.PENDING for a in tx.approvals_for_run(run_id)
            ):
                # Decided while this worker was still answering the turn's other calls: nobody
                # will queue it later, so queue it now rather than wait for nothing.
                chosen = RunStatus.QUEUED
            tx.update_run(
                replace(
                    record,
                    status=chosen.value,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
            )
            data: dict[str, Any] = {"approvals": approvals or []}
            if waiting_on:
                data["waiting_on"] = waiting_on
            if reason is not None:
                data["reason"] = reason[:2000]
            tx.append_audit(
                f"run_{chosen.value}", at=now, run_id=run_id, actor=self.worker, data=data
            )

        with contextlib.suppress(_Stopped):  # cancelled meanwhile: its status stays
            self._write(run_id, write)
        return load_result(self.store, run_id)


def _no_conversation_yet(record: RunRecord) -> None:
    if RunState.load(record).extra.get("messages"):
        raise RunStateError(f"run {record.run_id} already has a conversation; resume it instead")
