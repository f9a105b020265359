"""The governed activity: one Temporal activity whose body is the gate.

``Governor(gate, principal).activities`` goes into a ``temporalio.worker.Worker``. Each call
a workflow makes through it (``GovernedCalls.call``, or ``workflow.execute_activity(
"tether.call", CallRequest(...))``) is judged and, if allowed, run by ``Gate.call``, and the
gate's one answer (``tether.gate.answer``) comes back as a ``CallAnswer``: ran, refused (the
text the model may read), waiting (on which approval). Nothing is decided here.

Identity: the tether run is the workflow id (one run per workflow, across its runs); the call
is ``CallRequest.call_id``, chosen in the workflow, so each of Temporal's retries of one
activity is the same call, and two calls the workflow makes are two. The operation key
``run_id:call_id:tool:version`` reaches a tool that takes an ``operation_key`` parameter.

Retries: Temporal runs an activity at least once, so a retry may find its call already in
the ledger. Committed (the first attempt's worker died after recording it, before reporting
to Temporal): the recorded outcome is replayed, nothing runs. Dispatched and never settled
(the worker died while the tool ran): the outcome is unknown, so the call is not sent again
blindly; the tool's ``reconcile(operation_key)`` asks the outside system (it happened: the
result is recorded and replayed; it did not: the call is sent again under the same key).
A tool with no reconciler leaves the effect unknown for a human (``tether effects resolve``)
and the activity fails retryably, so Temporal's retry policy tries again later, holding no
worker meanwhile, and the attempt after the human's word replays or re-sends.

The gate's store transactions and the tool run in a thread (``asyncio.to_thread``) while the
activity heartbeats (when the activity has a heartbeat timeout), so a worker that dies is
noticed by Temporal within that timeout, and a PostgreSQL round trip never blocks the worker's
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tether.adapters.temporal.shapes import ACTIVITY, CallAnswer, CallRequest
from tether.core.budget import Budget
from tether.core.principal import Principal
from tether.errors import AlreadyExists, RunConflict, StoreError, TetherError
from tether.extras import missing
from tether.gate.answer import Answer, Ran, Refused, Unsettled, Waiting, answer
from tether.gate.pipeline import Gate, ToolCall
from tether.runs.reconcile import Settlement, reconcile_effect

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError
except ModuleNotFoundError as e:  # pragma: no cover - exercised without the extra
    raise missing("temporal", "tether.adapters.temporal", e) from e

__all__ = ["Governor", "call_id_for", "run_id_for"]

UNSETTLED_ERROR = "TetherOutcomeUnknown"  # the ApplicationError type of an unsettled call
KNOWN_RUNS = 4096


def run_id_for(info: activity.Info) -> str:
    """The tether run of the activity's workflow: its workflow id."""
    if not info.workflow_id:
        raise ApplicationError(
            "tether's governed activity runs inside a workflow (its run is the workflow id); "
            "this activity was started on its own",
            type="ConfigurationError",
            non_retryable=True,
        )
    return info.workflow_id


def call_id_for(request: CallRequest, info: activity.Info) -> str:
    """The call's id in the run: the workflow's, else the activity's place in its run."""
    return request.call_id or f"{info.workflow_run_id}/{info.activity_id}"


PrincipalFor = Callable[[activity.Info], Principal]


class Governor:
    """The activities a Temporal worker registers so its workflows' tool calls pass ``gate``,
    in tether runs acting for ``principal`` (started on a workflow's first call).

    ``principal`` may be a function of the activity's ``Info`` (the workflow's id and type,
    its task queue): the worker's own code says who a workflow acts for, never the workflow's
    input, which whoever starts a workflow chooses. It is asked only when the run is started;
    a run keeps its sealed principal."""

    def __init__(
        self,
        gate: Gate,
        principal: Principal | PrincipalFor,
        *,
        budget: Budget | None = None,
        name: str = ACTIVITY,
    ) -> None:
        self.gate = gate
        self.principal = principal
        self.budget = budget
        self.name = name
        # Runs this process knows exist (bounded: a forgotten one is read from the store).
        self._started: OrderedDict[str, None] = OrderedDict()

        async def governed(request: CallRequest) -> CallAnswer:
            return await self.call(request)

        # A plain function, not the bound method: the SDK marks the function it registers.
        self.activities: list[Callable[..., Any]] = [activity.defn(name=name)(governed)]

    async def call(self, request: CallRequest) -> CallAnswer:
        """The activity: the gate's answer on ``request`` (see the module docstring)."""
        info = activity.info()
        run_id, call_id = run_id_for(info), call_id_for(request, info)
        proposed = ToolCall(
            call_id=call_id,
            tool=request.tool,
            arguments=dict(request.arguments),
            tool_version=request.tool_version,
        )
        judged = await self._beating(lambda: self._judge(run_id, proposed), info)
        if isinstance(judged, Unsettled):
            unsettled = judged
            judged = await self._beating(
                lambda: self._reconciled(run_id, proposed, unsettled), info
            )
        return mapped(judged, call_id)

    def _judge(self, run_id: str, proposed: ToolCall) -> Answer:
        self._ensure_run(run_id)
        try:
            return answer(lambda: self.gate.call(run_id, proposed))
        except TetherError as e:
            raise failure(e) from e

    def _reconciled(self, run_id: str, proposed: ToolCall, judged: Unsettled) -> Answer:
        """A call dispatched by an attempt whose worker is gone: what the outside system
        says happened, through the tool's reconciler; then the gate's answer again."""
        key = judged.operation_key
        with self.gate.store.read() as tx:
            effect = tx.get_effect(key)
        if effect is None:  # pragma: no cover - the gate just named it
            raise failure(judged.error)
        settled = reconcile_effect(self.gate, effect)
        if settled.settlement is Settlement.UNRESOLVED:
            raise ApplicationError(
                f"{judged.error} {settled.detail}".strip(),
                type=UNSETTLED_ERROR,
                non_retryable=False,
            )
        return self._judge(run_id, proposed)

    def _ensure_run(self, run_id: str) -> None:
        if run_id in self._started:
            self._started.move_to_end(run_id)
            return
        with self.gate.store.read() as tx:
            exists = tx.get_run(run_id) is not None
        if not exists:
            # Another worker may start it at the same instant: then it exists, as wanted.
            principal = (
                self.principal
                if isinstance(self.principal, Principal)
                else self.principal(activity.info())
            )
            with contextlib.suppress(AlreadyExists):
                self.gate.start_run(principal, budget=self.budget, run_id=run_id)
        self._started[run_id] = None
        while len(self._started) > KNOWN_RUNS:
            self._started.popitem(last=False)

    async def _beating(self, work: Callable[[], Answer], info: activity.Info) -> Answer:
        """``work`` in a thread, heartbeating meanwhile if the activity has a heartbeat
        timeout (so Temporal notices a dead worker within it, not at start-to-close).

        Cancelled (the activity timed out, or the workflow cancelled it), the activity still
        waits for the gate to finish: the call, once dispatched, runs to its recorded outcome,
        and the worker's activity slot stays taken while it does, so this worker does not
        take on more than it is running."""
        task = asyncio.ensure_future(asyncio.to_thread(work))
        timeout = info.heartbeat_timeout
        every = timeout.total_seconds() / 3 if timeout and timeout.total_seconds() else None
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=every)
                if done:
                    return task.result()
                activity.heartbeat()
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await asyncio.shield(task)
            raise


def mapped(judged: Answer, call_id: str) -> CallAnswer:
    """The gate's answer in the workflow's terms."""
    if isinstance(judged, Ran):
        outcome = judged.outcome
        return CallAnswer(
            kind="ran",
            call_id=call_id,
            text=outcome.text,
            result=outcome.result,
            operation_key=outcome.operation_key,
            replayed=outcome.replayed,
        )
    if isinstance(judged, Refused):
        return CallAnswer(
            kind="refused",
            call_id=call_id,
            text=judged.text,
            error=type(judged.error).__name__,
            reasons=list(getattr(judged.error, "reasons", ())),
        )
    if isinstance(judged, Waiting):
        return CallAnswer(
            kind="waiting",
            call_id=call_id,
            text=str(judged.signal),
            approval_id=judged.approval_id,
            expires_at=float(judged.signal.expires_at or 0.0),
        )
    raise failure(judged.error)


def failure(error: TetherError) -> ApplicationError:
    """A stop the workflow does not read as a tool result: retried by Temporal when it may
    pass (the store was unreachable, another attempt holds the call), else final."""
    retry = isinstance(error, StoreError | RunConflict)
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=not retry)
