"""The workflow side: governed calls, and approvals as durable waits.

Inside a workflow (import it within ``workflow.unsafe.imports_passed_through()``; it needs
only ``temporalio`` and this package's ``shapes``)::

    @workflow.defn
    class Refund:
        def __init__(self) -> None:
            self.tools = GovernedCalls()          # registers the approval signal

        @workflow.run
        async def run(self, order: str) -> str:
            answer = await self.tools.call("refund", {"order": order})
            return answer.text                    # ran, or the refusal the model reads

``call`` picks the call's id in the workflow (``workflow.uuid4()``, deterministic on replay,
or the ``key`` you give) and runs the governed activity with it. When the gate asks a human,
the activity returns at once (no worker is held) and the workflow waits, durably, on a
``wait_condition`` for the ``tether.approval_decided`` signal naming that approval, with the
approval's expiry as its timeout (a workflow timer). Then it runs the activity again with
the same call id: the gate, not the signal, decides. A grant bound to this exact call runs it
once; a denial or an expiry is a refusal; a signal with no decision behind it (forged, or
early) finds the approval still pending, and the workflow waits again until its expiry.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from tether.adapters.temporal.shapes import ACTIVITY, APPROVAL_SIGNAL, CallAnswer, CallRequest
from tether.extras import missing

try:
    from temporalio import workflow
    from temporalio.common import RetryPolicy
except ModuleNotFoundError as e:  # pragma: no cover - exercised without the extra
    raise missing("temporal", "tether.adapters.temporal", e) from e

__all__ = ["GovernedCalls"]

EXPIRY_GRACE_S = 1.0  # past the expiry before asking again, so the gate sees it expired


class GovernedCalls:
    """Governed tool calls of one workflow; make it in the workflow's ``__init__``."""

    def __init__(
        self,
        *,
        activity: str = ACTIVITY,
        start_to_close_timeout: timedelta = timedelta(seconds=60),
        heartbeat_timeout: timedelta | None = timedelta(seconds=10),
        retry_policy: RetryPolicy | None = None,
        task_queue: str | None = None,
    ) -> None:
        self.activity = activity
        self.start_to_close_timeout = start_to_close_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.retry_policy = retry_policy
        self.task_queue = task_queue
        self.woken: set[str] = set()  # approvals a signal said were decided
        self.waits = 0  # how many times the workflow waited on an approval
        workflow.set_signal_handler(APPROVAL_SIGNAL, self._wake)

    def _wake(self, approval_id: str) -> None:
        self.woken.add(str(approval_id))

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        tool_version: str | None = None,
    ) -> CallAnswer:
        """Propose one call; the gate's answer once it is no longer waiting: ran or refused.

        ``key`` names the call yourself (unique in the workflow id, across its runs): a
        call made under the same key after a reset or a continue-as-new is the same call,
        replayed from the ledger rather than sent again."""
        request = CallRequest(
            tool=tool,
            arguments=dict(arguments or {}),
            call_id=key or str(workflow.uuid4()),
            tool_version=tool_version,
        )
        while True:
            answer = await workflow.execute_activity(
                self.activity,
                request,
                result_type=CallAnswer,
                start_to_close_timeout=self.start_to_close_timeout,
                heartbeat_timeout=self.heartbeat_timeout,
                retry_policy=self.retry_policy,
                task_queue=self.task_queue,
            )
            assert isinstance(answer, CallAnswer)
            if answer.kind != "waiting":
                return answer
            await self._wait_for(answer)

    async def _wait_for(self, answer: CallAnswer) -> None:
        """Until a signal names the approval or it expires: a durable wait, no worker held."""
        self.waits += 1
        approval = answer.approval_id
        left = answer.expires_at - workflow.now().timestamp() + EXPIRY_GRACE_S
        # On the timeout (expired) the activity, run again, hears it from the gate.
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: approval in self.woken, timeout=timedelta(seconds=max(left, 0.0))
            )
        self.woken.discard(approval)  # a later wait needs a later signal
