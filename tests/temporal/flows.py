"""The workflows of the Temporal tests: one whose tool calls pass tether, one plain.

Imported by the workers' sandbox too, so only Temporal, the standard library and tether's
workflow-side module (passed through) are imported here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from tether.adapters.temporal.shapes import CallAnswer
    from tether.adapters.temporal.workflow import GovernedCalls

# A dead worker is noticed within the heartbeat timeout; retries come quickly.
HEARTBEAT = timedelta(seconds=1)
START_TO_CLOSE = timedelta(seconds=4)
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=1.5,
    maximum_interval=timedelta(seconds=1),
)


@workflow.defn(name="Governed")
class Governed:
    """Runs each step (``{"tool": ..., "arguments": ...}``) through tether, in order."""

    def __init__(self) -> None:
        self.calls = GovernedCalls(
            start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT, retry_policy=RETRY
        )

    @workflow.run
    async def run(self, steps: list[dict[str, Any]]) -> list[CallAnswer]:
        answers = []
        for step in steps:
            arguments, key = step.get("arguments", {}), step.get("key")
            answers.append(await self.calls.call(step["tool"], arguments, key=key))
        return answers

    @workflow.query
    def waits(self) -> int:
        return self.calls.waits


@workflow.defn(name="Plain")
class Plain:
    """The same payments as plain Temporal activities: no gate, no ledger."""

    @workflow.run
    async def run(self, steps: list[dict[str, Any]]) -> list[Any]:
        results = []
        for step in steps:
            results.append(
                await workflow.execute_activity(
                    "plain." + step["tool"],
                    step.get("arguments", {}),
                    start_to_close_timeout=START_TO_CLOSE,
                    heartbeat_timeout=HEARTBEAT,
                    retry_policy=RETRY,
                )
            )
        return results


@workflow.defn(name="Chain")
class Chain:
    """One governed payment per run, continuing as new until ``runs`` is 1."""

    def __init__(self) -> None:
        self.calls = GovernedCalls(
            start_to_close_timeout=START_TO_CLOSE, heartbeat_timeout=HEARTBEAT, retry_policy=RETRY
        )

    @workflow.run
    async def run(self, runs: int, paid: list[CallAnswer]) -> list[CallAnswer]:
        answer = await self.calls.call("pay", {"recipient": "ada", "amount": runs})
        if runs > 1:
            workflow.continue_as_new(args=[runs - 1, [*paid, answer]])
        return [*paid, answer]
