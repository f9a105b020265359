"""The gate: the one pipeline every tool call passes (DESIGN section 1).

One transaction reads what the call needs (``Tx.call_view``), ``tether.gate.plan`` judges it
(pure: the step order is written there, once) and ``apply`` writes the plan's rows and audit
entries. A refusal is raised only after the transaction recording it commits, so a rejected
call leaves an intact audit trail and no half-written effect. An admitted call has
``dispatched`` durable before its tool is called with the operation key; the outcome is
recorded in a second transaction.

The module is long because the gate's public methods (start_run, call, acall, ask_if_needed,
approve, deny, edit) share one class and the provenance index it keeps; the decisions themselves
live in plan, settle and desk.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.budget import Budget
from tether.core.digest import sha256_hex
from tether.core.ledger import EffectStatus
from tether.core.lifecycle import RunStatus
from tether.core.principal import Identity, Principal
from tether.core.runseal import PRINCIPAL_SEAL, sealed_identity
from tether.crash import crash_point
from tether.errors import (
    ApprovalRequired,
    ApprovalStateError,
    CallInFlight,
    ConfigurationError,
    InternalError,
    OutcomeUnknown,
    Signal,
    TetherError,
)
from tether.gate.apply import apply, load_run
from tether.gate.desk import decide_approval, edit_approval, latest_approval
from tether.gate.dispatch import (
    ainvoke,
    in_flight,
    invoke,
    loop_running,
    start_running,
    stop_running,
)
from tether.gate.edits import edit_note, edited_call, is_the_requested_call
from tether.gate.indexes import TOOLS_SOURCE, learn, rebuild_index
from tether.gate.plan import (
    Admit,
    Ask,
    Outcome,
    Plan,
    Replay,
    ToolCall,
    plan_call,
)
from tether.gate.settle import settle
from tether.gate.state import RunState, checkpoint, new_id, sealed
from tether.gate.traced import asked, planned, returned, traced_acall, traced_call
from tether.policy.provenance import ProvenanceIndex
from tether.policy.rules import Policy
from tether.store.base import Store, Tx
from tether.store.rows import RunRecord
from tether.telemetry.otel import active as telemetry_active
from tether.tools.registry import Registry

if TYPE_CHECKING:
    from tether.policy.flow import FlowPolicy

__all__ = ["Gate", "Outcome", "ToolCall"]

Clock = Callable[[], float]
MAX_INDEXED_RUNS = 256  # runs whose provenance index a gate keeps in memory
EventListener = Callable[[dict[str, Any]], None]


class Gate:
    """The pipeline every tool call passes; see the module docstring for its steps."""

    def __init__(
        self,
        registry: Registry,
        policy: Policy | None,
        store: Store,
        *,
        clock: Clock = time.time,
    ) -> None:
        if policy is not None:
            policy.check_against(registry.manifests())
        self.registry = registry
        self.policy = policy
        self.store = store
        self.clock = clock
        self._listeners: list[EventListener] = []
        # Per run, what it has seen (tether.policy.provenance), for a policy with flow rules: kept
        # for the most recent runs, rebuilt from the store for any other (bounded memory).
        self._flow: FlowPolicy | None = policy.flow if policy is not None else None
        self._indexes: OrderedDict[str, ProvenanceIndex] = OrderedDict()
        self._indexes_lock = threading.Lock()

    def subscribe(self, listener: EventListener) -> None:
        """Receive each ``tool_effect_resolved`` event after its transaction commits."""
        self._listeners.append(listener)

    @property
    def policy_version(self) -> str:
        return self.policy.version if self.policy is not None else ""

    # -- runs --------------------------------------------------------------------------------
    def start_run(
        self,
        principal: Principal,
        *,
        budget: Budget | None = None,
        run_id: str | None = None,
        status: str = RunStatus.RUNNING.value,
    ) -> str:
        run_id = run_id or new_id("run")
        now = self.clock()
        budget = budget or Budget()
        keys = self.store.keys
        state = sealed(
            RunState(
                principal=principal,
                budget=budget,
                effects=0,
                principal_seal=keys.seal(
                    PRINCIPAL_SEAL, sealed_identity(run_id, principal, budget)
                ),
            ),
            run_id,
            keys,
        )
        record = RunRecord(
            run_id=run_id,
            state_version=1,
            status=status,
            principal_id=principal.subject,
            tenant_id=principal.tenant,
            policy_version=self.policy_version,
            checkpoint_json=state.dump(),
            created_at=now,
            updated_at=now,
        )
        with self.store.transaction() as tx:
            tx.insert_run(record)
            tx.append_audit(
                "run_started",
                at=now,
                run_id=run_id,
                actor=principal.subject,
                data={"principal": principal.to_dict(), "budget": state.budget.to_dict()},
            )
        if self._flow is not None:
            self._remember(run_id, ProvenanceIndex(self._flow.trusted_values))
        return run_id

    def run_state(self, run_id: str) -> RunState:
        with self.store.read() as tx:
            return RunState.load(load_run(tx, run_id))

    def record_input(
        self,
        run_id: str,
        text: str,
        *,
        source: str = "user",
        tools: Iterable[str] | None = None,
    ) -> None:
        """Record trusted input to a run: the user's request (or a later user message). The
        data-flow policy trusts argument values found in it, and takes it as what the user
        asked for (the intent rule); tool output it trusts for neither. ``tools``: an
        allow-list the application declares for this request (the tools it may call once
        untrusted output is in the run), instead of reading the tools from the words. Durable,
        so a run resumed in another process knows it too. Adapters call this with the
        user's messages; ``tether.runs.runner`` does it for the opening request."""
        if not isinstance(text, str) or not text:
            raise ConfigurationError("record_input needs the user's text (a non-empty string)")
        if source == TOOLS_SOURCE:
            raise ConfigurationError(
                f"record_input: source {TOOLS_SOURCE!r} is reserved; pass the list as tools="
            )
        allowed = None if tools is None else sorted(set(tools))
        if allowed is not None and not all(isinstance(t, str) and t for t in allowed):
            raise ConfigurationError("record_input: tools= takes tool names (strings)")
        with self.store.transaction() as tx:
            load_run(tx, run_id)
            now = self.clock()
            tx.append_input(run_id, source, text, now)
            if allowed is not None:
                tx.append_input(run_id, TOOLS_SOURCE, json.dumps(allowed), now)
        if self._flow is not None:
            with self._indexes_lock:
                index = self._indexes.get(run_id)
            if index is not None:
                index.add_trusted(text, user=True)
                if allowed is not None:
                    index.allow_tools(allowed)

    def provenance(self, run_id: str) -> ProvenanceIndex:
        """What the run has seen, as the data-flow policy judges its calls by (read-only use:
        the gate feeds it). Built from the store if this process does not have it."""
        with self.store.read() as tx:
            return self._index_in(tx, run_id, None)

    def _index_in(self, tx: Tx, run_id: str, effect_count: int | None) -> ProvenanceIndex:
        """The run's index, rebuilt from the transaction's rows when this process has none or
        another process has dispatched calls of the run since (its effect count moved)."""
        with self._indexes_lock:
            index = self._indexes.get(run_id)
            if index is not None:
                self._indexes.move_to_end(run_id)
        if index is not None and (effect_count is None or index.effects == effect_count):
            return index
        assert self._flow is not None
        index = rebuild_index(tx, run_id, self._flow, self.registry)
        self._remember(run_id, index)
        return index

    def _remember(self, run_id: str, index: ProvenanceIndex) -> None:
        with self._indexes_lock:
            self._indexes[run_id] = index
            while len(self._indexes) > MAX_INDEXED_RUNS:
                self._indexes.popitem(last=False)

    # -- the pipeline ------------------------------------------------------------------------
    def call(self, run_id: str, call: ToolCall) -> Outcome:
        """Judge and, if allowed, run one call. Raises a ``Denied`` or a signal otherwise.

        An ``async def`` tool is run to completion on an event loop of its own
        (``asyncio.run``); from a thread that runs an event loop, use ``acall``."""
        if telemetry_active():  # a span and metrics per call (tether.gate.traced)
            return traced_call(self.registry, run_id, call, lambda: self._call(run_id, call))
        return self._call(run_id, call)

    def _call(self, run_id: str, call: ToolCall) -> Outcome:
        started = time.perf_counter()
        if loop_running():
            tool = self.registry.find(call.tool)
            if tool is not None and tool.is_async:
                raise ConfigurationError(
                    f"tool '{call.tool}' is async and this thread runs an event loop, so "
                    "Gate.call cannot wait for it here; use `await gate.acall(...)`"
                )
        admitted = self._admit(run_id, call)
        if isinstance(admitted, Outcome):
            return admitted
        plan, index = admitted
        raw: Any = None
        error: BaseException | None = None
        try:
            raw = invoke(plan.tool, plan.arguments, plan.effect.operation_key)
        except (KeyboardInterrupt, GeneratorExit):
            stop_running(plan.effect.operation_key)  # interrupted: left dispatched, unmarked
            raise
        except BaseException as e:  # SystemExit and the like too: the call failed, recorded so
            error = e
        try:
            return self._settle(plan, started, index, raw, error)
        finally:
            stop_running(plan.effect.operation_key)

    async def acall(self, run_id: str, call: ToolCall) -> Outcome:
        """``call`` for an asyncio caller: the same plan, writes, audit entries, outcome,
        replay and exceptions, with the tool awaited on the caller's own event loop — no
        thread hop on the way in or back.

        The store's two transactions run synchronously on the loop's thread (on SQLite well
        under a millisecond each). A caller whose store may block for longer (PostgreSQL over
        a network) and whose loop must not wait can run the synchronous path in a worker
        thread instead: ``await anyio.to_thread.run_sync(gate.call, run_id, call)``.

        How the tool runs: an ``async def`` handler is awaited (with the manifest's
        ``timeout_s``, under ``asyncio.wait_for``); a synchronous handler is called directly
        on the loop's thread, or, if it has a ``timeout_s``, in the gate's tool thread while
        the loop waits. A timeout is recorded as ``unknown`` exactly as ``call`` records it
        (the tool may have acted). If the awaiting task is cancelled while the tool runs, the
        effect is recorded as ``unknown`` too (the gate cannot tell whether it acted) and the
        cancellation goes on; shield the call if its outcome must be waited for."""
        if telemetry_active():
            return await traced_acall(
                self.registry, run_id, call, lambda: self._acall(run_id, call)
            )
        return await self._acall(run_id, call)

    async def _acall(self, run_id: str, call: ToolCall) -> Outcome:
        import asyncio

        started = time.perf_counter()
        admitted = self._admit(run_id, call)
        if isinstance(admitted, Outcome):
            return admitted
        plan, index = admitted
        raw: Any = None
        error: BaseException | None = None
        key = plan.effect.operation_key
        try:
            raw = await ainvoke(plan.tool, plan.arguments, key)
        except asyncio.CancelledError as e:
            # Recorded as unknown; the caller asked for the cancellation, so that goes on.
            try:
                with contextlib.suppress(OutcomeUnknown):
                    self._settle(plan, started, index, None, e)
            finally:
                stop_running(key)
            raise
        except (KeyboardInterrupt, GeneratorExit):
            stop_running(key)
            raise
        except BaseException as e:  # SystemExit and the like too: the call failed
            error = e
        try:
            return self._settle(plan, started, index, raw, error)
        finally:
            stop_running(key)

    def _admit(self, run_id: str, call: ToolCall) -> tuple[Admit, ProvenanceIndex | None] | Outcome:
        """Steps 0-7: judge the call and record the plan in one transaction. An admitted
        call comes back with ``dispatched`` durable; a replay as its recorded outcome; any
        other verdict is raised after its transaction commits."""
        now = self.clock()
        marked: str | None = None
        try:
            with self.store.transaction() as tx:
                plan, index = self._plan(tx, run_id, call, now)
                apply(tx, run_id, now, plan.writes)
                if isinstance(plan, Admit):
                    marked = plan.effect.operation_key
                    start_running(marked)  # before the commit: no reader sees it unmarked
                    crash_point("gate.before_dispatch_commit")
        except (TetherError, Signal):
            if marked is not None:
                stop_running(marked)
            raise
        except Exception as e:
            if marked is not None:
                stop_running(marked)
            # A bug, not a verdict: the transaction rolled back, so nothing was dispatched.
            raise InternalError(
                f"tether could not judge call {call.call_id} ('{call.tool}'): {e!r}; nothing "
                "was dispatched or recorded — this is a bug, please report it"
            ) from e
        except BaseException:
            if marked is not None:
                stop_running(marked)
            raise
        planned(plan)  # its facts onto the call's span, if one is traced
        if isinstance(plan, Admit):
            crash_point("gate.after_dispatch_commit")
            if index is not None and plan.fresh:
                index.effects += 1
                followed = any(label.followed for label in plan.decision.provenance)
                effect = plan.effect
                index.note_call(
                    effect.tool_name, effect.argument_digest, effect.call_id, followed=followed
                )
            return plan, index
        if isinstance(plan, Replay):
            effect = plan.effect
            if effect.status is EffectStatus.DISPATCHED and in_flight(effect.operation_key):
                # Another resume in this process is running it: not unknown, just not done.
                raise CallInFlight(effect.tool_name, effect.operation_key)
            if plan.error is not None:
                raise plan.error
            assert plan.outcome is not None
            if index is not None:
                return self._marked(plan.outcome, plan.effect.call_id, plan.effect.tool_name)
            return plan.outcome
        raise plan.signal if isinstance(plan, Ask) else plan.error

    def _plan(
        self, tx: Tx, run_id: str, call: ToolCall, now: float
    ) -> tuple[Plan, ProvenanceIndex | None]:
        """The planner's verdict on ``call`` from one read of the run, and the run's
        provenance index when the policy has flow rules (the one place both are made)."""
        view = tx.call_view(run_id, call.call_id)
        note = ""
        original = view.approval
        if (
            original is not None
            and original.status is ApprovalStatus.EDITED
            and view.effect is None
            and view.run is not None
        ):
            edited = tx.get_approval(original.replaced_by or "")
            state = RunState.load(view.run)
            if edited is not None and is_the_requested_call(original, call, state, self.registry):
                # The approver's edit answers this call: the edited one is judged and runs.
                note = edit_note(original, edited, self.registry)
                call = edited_call(edited)
                view = tx.call_view(run_id, call.call_id)
        index = None
        if self._flow is not None and view.run is not None:
            index = self._index_in(tx, run_id, view.effect_count)
        plan = plan_call(
            call,
            view,
            run_id=run_id,
            registry=self.registry,
            policy=self.policy,
            seals=self.store.keys,
            now=now,
            mint=new_id,
            provenance=index,
        )
        if note and isinstance(plan, Admit):
            plan = replace(plan, note=note)
        elif note and isinstance(plan, Replay) and plan.outcome is not None:
            plan = replace(plan, outcome=replace(plan.outcome, text=note + plan.outcome.text))
        return plan, index

    def _marked(self, outcome: Outcome, call_id: str, tool_name: str) -> Outcome:
        """A replayed outcome marked as its first dispatch was, if its tool is untrusted."""
        flow = self._flow
        assert flow is not None
        known = self.registry.find(tool_name)
        if known is not None and flow.output_trust(known.manifest)[0]:
            return outcome
        return replace(
            outcome, text=self._mark(outcome.text, outcome.operation_key, call_id, tool_name)
        )

    def _mark(self, text: str, operation_key: str, call_id: str, tool_name: str) -> str:
        """Untrusted output delimited for the model, its boundary derived from the operation
        key (so a replay is marked exactly as the first dispatch was)."""
        from tether.policy.flow import mark_untrusted

        assert self._flow is not None
        boundary = sha256_hex(operation_key)[:12]
        return mark_untrusted(text, call_id, tool_name, boundary, self._flow.marking)

    def ask_if_needed(self, run_id: str, call: ToolCall) -> ApprovalRequired | None:
        """Judge ``call`` without running it, for frameworks that ask before they call: if
        the gate would ask a human, record the request exactly as ``call`` would and return
        its signal; on any other verdict (allow, a grant to use, a replay, a refusal) write
        nothing and return None — ``call`` acts on it when the framework calls the tool.

        Judged first in a read transaction (no write lock, nothing to commit): the common
        answer, "it would not ask", writes nothing. Only an ask is judged again in a write
        transaction, which records the request from what it reads itself (another writer may
        have recorded it, or a decision, in between)."""
        now = self.clock()
        with self.store.read() as tx:
            plan, _ = self._plan(tx, run_id, call, now)
        if not isinstance(plan, Ask):
            return None
        with self.store.transaction() as tx:
            plan, _ = self._plan(tx, run_id, call, now)
            if not isinstance(plan, Ask):
                return None
            apply(tx, run_id, now, plan.writes)
        asked(self.registry, run_id, call, plan)  # a span for the asking, if traced
        return plan.signal

    def _settle(
        self,
        admitted: Admit,
        started: float,
        index: ProvenanceIndex | None,
        raw: Any,
        error: BaseException | None,
    ) -> Outcome:
        """Steps 9-10, after the tool was called with its key (step 8, in ``call`` and
        ``acall``): ``settle`` says what happened (pure), this records it."""
        crash_point("gate.after_tool_return")
        returned()
        # From here on nothing may raise before the outcome is recorded: the tool has run.
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        done = settle(admitted, raw, error, self.clock(), latency_ms)
        effect = done.effect
        try:
            with self.store.transaction() as tx:
                tx.update_effect(effect, EffectStatus.DISPATCHED)
                if done.refund or done.added_bytes:
                    record = load_run(tx, effect.run_id)
                    state = RunState.load(record)
                    budget = (
                        state.budget.refund(admitted.tool.manifest.cost)
                        if done.refund
                        else state.budget.add_bytes(done.added_bytes)
                    )
                    after = checkpoint(state, budget, run_id=effect.run_id, seals=self.store.keys)
                    tx.write_checkpoint(record, after, done.at)
                tx.append_audit(
                    "tool_effect_resolved",
                    at=done.at,
                    run_id=effect.run_id,
                    actor=admitted.actor,
                    data=done.event,
                    redactions=done.redactions,
                )
        except (TetherError, Signal):
            raise
        except Exception as e:
            # The tool ran, but its outcome is not recorded: the effect stays ``dispatched``
            # (durable), so recovery reconciles it rather than anyone guessing.
            raise InternalError(
                f"the outcome of {effect.operation_key} could not be recorded ({e!r}); the "
                "effect stays dispatched until `tether recover` reconciles it"
            ) from e
        crash_point("gate.after_outcome_commit")
        for listener in self._listeners:
            listener(done.event)
        if done.failure is not None:
            raise done.failure from done.failure.__cause__
        outcome = done.outcome
        if index is not None and self._flow is not None and done.result_json is not None:
            # What the model will read of this output, it may act on: the index learns it
            # from the value as recorded (redacted), exactly what a rebuild reads back.
            tool = admitted.tool
            trusted = learn(
                index,
                self._flow,
                tool,
                effect.call_id,
                tool.name,
                done.safe_value,
                done.result_json,
                done.screen_flags,
            )
            if not trusted:
                text = self._mark(outcome.text, effect.operation_key, effect.call_id, tool.name)
                outcome = replace(outcome, text=text)
        return outcome

    # -- human decisions ---------------------------------------------------------------------
    def approve(
        self, approval_id: str, approver: Identity | str, *, reason: str | None = None
    ) -> Approval:
        """Grant a pending approval. ``approver`` is an authenticated ``Identity`` (see
        ``tether.identity.authenticate``) or, for trusted in-process code, a name."""
        return self._decide(approval_id, approver, approve=True, reason=reason)

    def deny(
        self, approval_id: str, approver: Identity | str, *, reason: str | None = None
    ) -> Approval:
        """Deny a pending approval; ``reason`` is fed back to the model."""
        return self._decide(approval_id, approver, approve=False, reason=reason)

    def _decide(
        self, approval_id: str, approver: Identity | str, *, approve: bool, reason: str | None
    ) -> Approval:
        if self.policy is None:
            raise ApprovalStateError("no policy is loaded, so no one is authorised to approve")
        return decide_approval(
            self.store,
            approval_id,
            approver,
            approve=approve,
            now=self.clock(),
            reason=reason,
            policy=self.policy,
        )

    def edit(
        self,
        approval_id: str,
        approver: Identity | str,
        arguments: Mapping[str, Any],
        *,
        reason: str | None = None,
    ) -> Approval:
        """Replace a pending call's arguments as an approver: a new proposal with its own
        digest, judged by the policy again, approved by the editor. Returns the new approval."""
        if self.policy is None:
            raise ApprovalStateError("no policy is loaded, so no one is authorised to edit")
        return edit_approval(
            self.store,
            self.registry,
            self.policy,
            approval_id,
            approver,
            dict(arguments),
            now=self.clock(),
            reason=reason,
        )

    def approval_for(self, run_id: str, call_id: str) -> Approval | None:
        """The latest approval requested for a call (expired first if its time is up)."""
        return latest_approval(self.store, run_id, call_id, self.clock())
