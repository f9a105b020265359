"""Durable agent runs: the model loop whose every tool call goes through the gate.

The model gets the conversation and the registry's tool schemas; each proposed call goes
through ``Gate.call``; results come back as tool messages; a message without tool calls ends
the run. Everything a resume needs is in the store, one small row per message and per step,
plus a few counters in the run's checkpoint — never the whole history again (which would make
long runs quadratic). A resume in any process reloads the conversation and continues:

- a model turn whose answer was stored is never asked again;
- a tool call whose effect was recorded is replayed from the ledger, never run again;
- a call waiting for a human is matched to its approval by the call's id, never by position.

A run is driven by one worker at a time, under a lease in the run row; a second worker trying
the same run gets ``RunConflict``. Approvals are decided inline by an ``Approver`` callback,
or asynchronously: the run persists what it waits for, becomes ``awaiting_approval`` and the
process may exit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tether.approvals import Approval, ApprovalStatus
from tether.budget import Budget
from tether.crash import crash_point
from tether.digest import canonical_json
from tether.errors import (
    ApprovalDenied,
    ApprovalRequired,
    BudgetExceeded,
    Denied,
    InvalidArguments,
    ModelError,
    OperationConflict,
    OutcomeUnknown,
    RunConflict,
    RunStateError,
    Signal,
    StaleState,
    TetherError,
    ToolFailed,
)
from tether.gate import Gate, ToolCall
from tether.lifecycle import RunStatus, lease_held, worker_name
from tether.limits import argument_problems
from tether.models import Message, Model, ModelToolCall
from tether.policy import Principal
from tether.reconcile import Reconciled, Settlement, reconcile_run
from tether.screening import redact, scrub, secret_values
from tether.state import RunState
from tether.store.base import RunRecord, StepRecord, Store, Tx

# Given the pending approval, the approver's answer: True approves, False denies.
Approver = Callable[[Approval], bool]


@dataclass(frozen=True)
class Step:
    """One recorded step of a run (a model turn, a tool call, an approval...), as shown."""

    index: int
    kind: str
    detail: str


@dataclass
class RunResult:
    """Where a run stands after it was driven: finished, or waiting for approvals."""

    run_id: str
    status: str
    messages: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    final: str = ""
    approvals: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "final": self.final,
            "approvals": self.approvals,
            "steps": [{"index": s.index, "kind": s.kind, "detail": s.detail} for s in self.steps],
        }


@dataclass
class _Progress:
    """What one drive appends; written in small transactions as it goes."""

    messages: list[Message]
    turn: int


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

    def begin(self, run_id: str, user_input: str) -> None:
        """Write the opening of the conversation into a run made with ``Gate.start_run``."""
        first = [Message(role="system", content=self.system)] if self.system else []
        first.append(Message(role="user", content=user_input))
        with self.store.transaction() as tx:
            record = _run(tx, run_id)
            state = RunState.load(record)
            if state.extra.get("messages"):
                raise RunStateError(f"run {run_id} already has a conversation; resume it instead")
            extra = {**state.extra, **self.metadata, "turns": 0, "messages": 0, "steps": 0}
            for m in first:
                extra["messages"] += 1
                tx.append_message(run_id, extra["messages"], canonical_json(m.to_dict()))
            tx.update_run(replace(record, checkpoint_json=replace(state, extra=extra).dump()))

    def resume(self, run_id: str) -> RunResult:
        """Continue a run from its checkpoint, in this process.

        Effects a previous worker left unsettled (it died between ``dispatched`` and the
        outcome) are reconciled first; one that cannot be leaves the run
        ``awaiting_reconciliation``."""
        self._claim(run_id)
        heartbeat = _Heartbeat(self.store, run_id, self.worker, self.lease_s, self.clock)
        heartbeat.start()
        try:
            self.reconciled = reconcile_run(self.gate, run_id)
            if any(r.settlement is Settlement.UNRESOLVED for r in self.reconciled):
                return self._finish(run_id, RunStatus.AWAITING_RECONCILIATION)
            return self._drive(run_id)
        except (TetherError, Signal):
            # Store trouble, a lost lease: the run can be resumed once it clears.
            self._release(run_id)
            raise
        except Exception as e:
            # A bug would raise again at every resume, leaving the run "running" with
            # nothing that can move it: fail it, saying why.
            self._fail(run_id, e)
            raise RunStateError(
                f"run {run_id} failed on an internal error ({e!r}); it is marked failed "
                "with that reason (see `tether runs show`): start a new run, and please "
                "report the bug"
            ) from e
        except BaseException:
            self._release(run_id)
            raise
        finally:
            heartbeat.stop()

    def _fail(self, run_id: str, error: Exception) -> None:
        try:
            turn = int(self.gate.run_state(run_id).extra.get("turns", 0))
            self._record(run_id, steps=[("error", f"internal error: {error!r}"[:2000])], turn=turn)
            self._finish(run_id, RunStatus.FAILED)
        except Exception:
            self._release(run_id)  # the store itself is failing: leave it to recovery

    # -- leases ------------------------------------------------------------------------------
    def _claim(self, run_id: str) -> None:
        now = self.clock()
        try:
            with self.store.transaction() as tx:
                self._claim_in(tx, run_id, now)
        except StaleState as e:  # another worker claimed it between our read and our write
            raise RunConflict(f"run {run_id} was claimed by another worker") from e
        crash_point("runs.after_claim")

    def _claim_in(self, tx: Tx, run_id: str, now: float) -> None:
        record = tx.lock_run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}; see `tether runs list`")
        status = RunStatus(record.status)
        if not RunState.load(record).extra.get("messages"):
            raise RunStateError(
                f"run {run_id} has no conversation: it was started with Gate.start_run and is "
                "driven call by call by its own code, so there is nothing here to resume"
            )
        if status is RunStatus.RUNNING and record.lease_owner == self.worker:
            return  # claimed for us already (a worker takes the lease as it picks the run)
        if status.finished:
            raise RunStateError(f"run {run_id} is already {status.value}; nothing to resume")
        if lease_held(record, self.worker, now):
            raise RunConflict(
                f"run {run_id} is being driven by {record.lease_owner} (lease until "
                f"{record.lease_expires_at:.0f}); wait for it, or for its lease to expire"
            )
        tx.update_run(
            replace(
                record,
                status=RunStatus.RUNNING.value,
                lease_owner=self.worker,
                lease_expires_at=now + self.lease_s,
                updated_at=now,
            )
        )
        tx.append_audit(
            "run_claimed",
            at=now,
            run_id=run_id,
            actor=self.worker,
            data={"previous_status": status.value},
        )

    def create_queued(self, user_input: str, principal: Principal, **options: Any) -> str:
        """Persist a new run for a worker to pick up (``tether run --enqueue``)."""
        run_id = self.create(user_input, principal, **options)
        now = self.clock()
        with self.store.transaction() as tx:
            record = _run(tx, run_id)
            tx.update_run(replace(record, status=RunStatus.QUEUED.value, updated_at=now))
            tx.append_audit("run_queued", at=now, run_id=run_id, data={})
        return run_id

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
            record = _run(tx, run_id)
            messages = [Message.from_dict(json.loads(b)) for b in tx.messages(run_id)]
        turn = int(RunState.load(record).extra.get("turns", 0))
        tools = self.gate.registry.openai_tools()
        while True:
            last = messages[-1]
            open_turn = _open_turn(messages)
            if open_turn is not None:
                waiting = self._answer_calls(run_id, messages, open_turn, turn - 1)
                if any(w.startswith(_UNSETTLED) for w in waiting):
                    return self._finish(run_id, RunStatus.AWAITING_RECONCILIATION)
                if waiting:
                    return self._finish(run_id, RunStatus.AWAITING_APPROVAL, approvals=waiting)
                continue
            if last.role == "assistant" and not last.tool_calls:
                crash_point("runs.before_finish")
                return self._finish(run_id, RunStatus.COMPLETED, final=last.content)
            if turn >= self.max_turns:
                self._record(
                    run_id,
                    steps=[("error", f"no final answer after {self.max_turns} turns")],
                    turn=turn,
                )
                return self._finish(run_id, RunStatus.FAILED)
            try:
                reply = self.model.complete(messages, tools)
            except ModelError as e:
                self._record(run_id, steps=[("error", f"model: {e}")], turn=turn)
                return self._finish(run_id, RunStatus.FAILED)
            reply = _storable(reply)
            crash_point("runs.after_model_reply")
            steps = [] if reply.tool_calls else [("final", reply.content)]
            self._record(run_id, messages=[reply], steps=steps, turn=turn, turns=turn + 1)
            crash_point("runs.after_turn_commit")
            turn += 1
            messages.append(reply)

    def _answer_calls(
        self, run_id: str, messages: list[Message], turn_message: Message, turn: int
    ) -> list[str]:
        """Answer every open call of the turn that can be answered; return the approval ids
        still waiting. Siblings that need no approval are answered before the run waits."""
        # Only the messages after the turn can answer it (scanning them all would make every
        # step cost more than the last).
        start = len(messages) - 1
        while messages[start] is not turn_message:
            start -= 1
        answered = {m.tool_call_id for m in messages[start + 1 :] if m.role == "tool"}
        waiting: list[str] = []
        for tc in turn_message.tool_calls:
            if tc.id in answered:
                continue
            steps: list[tuple[str, str]] = []
            reply = self._answer(run_id, tc, steps)
            if isinstance(reply, str):
                waiting.append(reply)
                self._record(run_id, steps=steps, turn=turn)
                continue
            self._record(run_id, messages=[reply], steps=steps, turn=turn)
            crash_point("runs.after_tool_message")
            messages.append(reply)
        return waiting

    def _answer(
        self, run_id: str, tc: ModelToolCall, steps: list[tuple[str, str]]
    ) -> Message | str:
        """The tool message answering ``tc``, or the id of the approval it waits for."""
        if tc.parse_error is not None:
            steps.append(("tool_error", f"{tc.name}: {tc.parse_error}"))
            return _error(tc, "invalid_arguments", message=tc.parse_error)
        call = ToolCall(call_id=tc.id, tool=tc.name, arguments=dict(tc.arguments))
        shown = _Shown(self.gate, tc.name, tc.arguments)
        note = ""
        approval = self.gate.approval_for(run_id, tc.id)
        if approval is not None and approval.status is ApprovalStatus.EDITED:
            edited = self._edited(approval)
            call = ToolCall(call_id=edited.call_id, tool=tc.name, arguments=dict(edited.arguments))
            approval = edited
            shown = _Shown(self.gate, tc.name, edited.arguments)
            note = f"[arguments edited by {edited.approver}: {shown.arguments}]\n"
        if approval is not None:
            if approval.status is ApprovalStatus.PENDING:
                return approval.approval_id
            if approval.status is ApprovalStatus.EXPIRED:
                steps.append(("approval_expired", tc.name))
                return _error(tc, "approval_expired", approval_id=approval.approval_id)
            if approval.status is ApprovalStatus.APPROVED:
                steps.append(("approval_granted", f"{tc.name} by {approval.approver}"))
        try:
            try:
                outcome = self.gate.call(run_id, call)
            except ApprovalRequired as signal:
                steps.append(("approval_required", f"{tc.name}({shown.arguments})"))
                if self.approver is None:
                    return signal.approval_id
                self._decide_inline(signal.approval_id, tc, steps)
                outcome = self.gate.call(run_id, call)
        except ApprovalDenied as e:
            steps.append(("approval_denied", tc.name + (f": {e.reason}" if e.reason else "")))
            return _error(tc, "approval_denied", reason=e.reason)
        except (Denied, InvalidArguments, BudgetExceeded, OperationConflict, ToolFailed) as e:
            # Error messages quote what they reject, secrets included: scrub before they are
            # stored as a step or shown to the model.
            message = shown.scrub(str(e))
            steps.append(("tool_error", f"{tc.name}: {message}"))
            return _error(tc, type(e).__name__, message=message)
        except OutcomeUnknown as e:
            # Never guessed, never retried here: the run stops until the effect is settled
            # (by reconciliation once this call's worker is gone, or by a human).
            steps.append(("outcome_unknown", f"{tc.name}: {e}"))
            return f"{_UNSETTLED}{e.operation_key}"
        steps.append(("tool_call", f"{tc.name}({shown.arguments}) -> {outcome.text}"))
        return Message(role="tool", content=note + outcome.text, tool_call_id=tc.id)

    def _decide_inline(
        self, approval_id: str, tc: ModelToolCall, steps: list[tuple[str, str]]
    ) -> None:
        assert self.approver is not None and self.approver_id is not None
        with self.store.read() as tx:
            pending = tx.get_approval(approval_id)
        assert pending is not None
        if self.approver(pending):
            self.gate.approve(approval_id, self.approver_id)
            steps.append(("approval_granted", tc.name))
        else:
            self.gate.deny(approval_id, self.approver_id)

    def _edited(self, approval: Approval) -> Approval:
        with self.store.read() as tx:
            edited = tx.get_approval(approval.replaced_by or "")
        if edited is None:
            raise RunStateError(
                f"approval {approval.approval_id} was edited but its edit is missing"
            )
        return edited

    # -- persistence -------------------------------------------------------------------------
    def _record(
        self,
        run_id: str,
        *,
        messages: tuple[Message, ...] | list[Message] = (),
        steps: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
        turn: int,
        turns: int | None = None,
    ) -> None:
        """Append messages and steps and renew the lease, in one transaction (I6: the write is
        a compare-and-swap on the run, and only the lease holder may make it)."""
        now = self.clock()
        with self.store.transaction() as tx:
            record = self._held(tx, run_id)
            state = RunState.load(record)
            extra = dict(state.extra)
            for m in messages:
                extra["messages"] = extra.get("messages", 0) + 1
                tx.append_message(run_id, extra["messages"], canonical_json(m.to_dict()))
            for kind, detail in steps:
                extra["steps"] = extra.get("steps", 0) + 1
                tx.append_step(
                    run_id,
                    StepRecord(seq=extra["steps"], turn=turn, kind=kind, detail=detail, at=now),
                )
            if turns is not None:
                extra["turns"] = turns
            tx.update_run(
                replace(
                    record,
                    checkpoint_json=replace(state, extra=extra).dump(),
                    lease_expires_at=now + self.lease_s,
                    updated_at=now,
                )
            )

    def _held(self, tx: Tx, run_id: str) -> RunRecord:
        record = _run(tx, run_id)
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
    ) -> RunResult:
        now = self.clock()
        with self.store.transaction() as tx:
            record = self._held(tx, run_id)
            if status is RunStatus.AWAITING_APPROVAL and not any(
                a.status is ApprovalStatus.PENDING for a in tx.approvals_for_run(run_id)
            ):
                # Decided while this worker was still answering the turn's other calls: nobody
                # will queue it later, so queue it now rather than wait for nothing.
                status = RunStatus.QUEUED
            tx.update_run(
                replace(
                    record,
                    status=status.value,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
            )
            tx.append_audit(
                f"run_{status.value}",
                at=now,
                run_id=run_id,
                actor=self.worker,
                data={"approvals": approvals or []},
            )
        return load_result(self.store, run_id)


_UNSETTLED = "unsettled:"


def _storable(reply: Message) -> Message:
    """The model's reply as it can be stored: a call whose arguments no JSON can hold
    (thousands of levels deep, NaN, non-string keys) keeps its id and name but carries the
    problem as a parse error, which the model is answered with, instead of arguments that
    would break the write of the conversation itself."""
    if not any(argument_problems(tc.arguments) for tc in reply.tool_calls):
        return reply
    calls = []
    for tc in reply.tool_calls:
        problems = argument_problems(tc.arguments)
        error = "; ".join(problems)[:500]
        calls.append(ModelToolCall(id=tc.id, name=tc.name, parse_error=error) if problems else tc)
    return replace(reply, tool_calls=tuple(calls))


class _Shown:
    """A call's arguments as a run's steps may show them: sensitive fields and
    credential-looking values masked (steps are printed by `tether runs show`)."""

    def __init__(self, gate: Gate, tool: str, arguments: Mapping[str, Any]) -> None:
        known = gate.registry.find(tool)
        fields = known.manifest.sensitive_fields if known is not None else frozenset()
        try:
            self.arguments = canonical_json(redact(dict(arguments), fields)[0])
            self.secrets = secret_values(arguments, fields)
        except (ValueError, TypeError, RecursionError):
            # Arguments that are not JSON at all: the gate refuses them; show nothing.
            self.arguments, self.secrets = "(arguments that are not JSON)", []

    def scrub(self, text: str) -> str:
        return str(redact(scrub(text, self.secrets))[0])


def _open_turn(messages: list[Message]) -> Message | None:
    """The last model turn, if some of its tool calls have no answer yet."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            answered = {m.tool_call_id for m in messages[i + 1 :] if m.role == "tool"}
            if any(tc.id not in answered for tc in messages[i].tool_calls):
                return messages[i]
            return None
    return None


class _Heartbeat:
    """Renews a lease while its holder works, so a slow tool call does not let the lease
    lapse and a second worker start the same run (and re-dispatch an in-flight call)."""

    def __init__(
        self, store: Store, run_id: str, owner: str, lease_s: float, clock: Callable[[], float]
    ) -> None:
        self.store, self.run_id, self.owner = store, run_id, owner
        self.lease_s, self.clock = lease_s, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="tether-lease")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with self.store.transaction() as tx:
                    if not tx.renew_lease(self.run_id, self.owner, self.clock() + self.lease_s):
                        return  # lost it: the holder's next write will find out
            except Exception:
                continue


def load_result(store: Store, run_id: str) -> RunResult:
    """A run as stored: status, conversation, steps, and what it waits for."""
    with store.read() as tx:
        record = _run(tx, run_id)
        messages = [Message.from_dict(json.loads(b)) for b in tx.messages(run_id)]
        steps = [Step(s.turn, s.kind, s.detail) for s in tx.steps(run_id)]
    waiting = [a.approval_id for a in store.list_approvals(ApprovalStatus.PENDING, run_id=run_id)]
    final = ""
    if record.status == RunStatus.COMPLETED.value and messages:
        final = messages[-1].content
    return RunResult(
        run_id=run_id,
        status=record.status,
        messages=messages,
        steps=steps,
        final=final,
        approvals=waiting if record.status == RunStatus.AWAITING_APPROVAL.value else [],
    )


def _run(tx: Tx, run_id: str) -> RunRecord:
    record = tx.get_run(run_id)
    if record is None:
        raise RunStateError(f"no run {run_id}; see `tether runs list`")
    return record


def _error(tc: ModelToolCall, error: str, **extra: Any) -> Message:
    body = {"error": error, "tool": tc.name, **{k: v for k, v in extra.items() if v is not None}}
    return Message(role="tool", content=json.dumps(body, ensure_ascii=False), tool_call_id=tc.id)


def run_with_approval(
    model: Model,
    gate: Gate,
    run_id: str,
    user_input: str,
    *,
    approver: Approver,
    approver_id: str,
    system: str = "",
    max_steps: int = 8,
) -> RunResult:
    """Seed 004's loop: run to a final answer on an existing run, deciding approvals inline.

    ``run_id`` names a run made with ``Gate.start_run``; its conversation starts here."""
    runner = Runner(
        gate, model, system=system, max_turns=max_steps, approver=approver, approver_id=approver_id
    )
    runner.begin(run_id, user_input)
    return runner.resume(run_id)
