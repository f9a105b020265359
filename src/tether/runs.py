"""Agent runs: the model loop whose every tool call goes through the gate (seed 004).

The model gets the conversation and the registry's tool schemas; each proposed call goes
through ``Gate.call``; results come back as tool messages; a message without tool calls ends
the run. Approvals are decided inline by an ``Approver`` callback and recorded in the store
like any other decision. Parallel calls in one turn are matched to their approvals by
approval id, never by position.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.approvals import Approval
from tether.errors import (
    ApprovalRequired,
    BudgetExceeded,
    Denied,
    InvalidArguments,
    OperationConflict,
    OutcomeUnknown,
    ToolFailed,
)
from tether.gate import Gate, ToolCall
from tether.models import Message, Model, ModelToolCall

# Given the pending approval, the approver's answer: True approves, False denies.
Approver = Callable[[Approval], bool]


@dataclass(frozen=True)
class Step:
    index: int
    kind: str
    detail: str


@dataclass
class RunResult:
    run_id: str
    messages: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    final: str = ""
    status: str = "running"


def _error_message(tc: ModelToolCall, error: str, **extra: Any) -> Message:
    content = json.dumps({"error": error, "tool": tc.name, **extra}, ensure_ascii=False)
    return Message(role="tool", content=content, tool_call_id=tc.id)


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
    """Run the model loop to a final answer, deciding approvals inline."""
    result = RunResult(run_id=run_id)
    if system:
        result.messages.append(Message(role="system", content=system))
    result.messages.append(Message(role="user", content=user_input))
    tools = gate.registry.openai_tools()

    for i in range(max_steps):
        reply = model.complete(result.messages, tools)
        result.messages.append(reply)
        if not reply.tool_calls:
            result.steps.append(Step(i, "final", reply.content))
            result.final, result.status = reply.content, "completed"
            return result
        for tc in reply.tool_calls:
            result.messages.append(_call_tool(gate, run_id, tc, i, result, approver, approver_id))

    result.steps.append(Step(max_steps, "error", f"no final answer after {max_steps} steps"))
    result.status = "failed"
    return result


def _call_tool(
    gate: Gate,
    run_id: str,
    tc: ModelToolCall,
    i: int,
    result: RunResult,
    approver: Approver,
    approver_id: str,
) -> Message:
    call = ToolCall(call_id=tc.id, tool=tc.name, arguments=dict(tc.arguments))
    try:
        try:
            outcome = gate.call(run_id, call)
        except ApprovalRequired as ar:
            result.steps.append(Step(i, "approval_required", f"{tc.name}({dict(tc.arguments)})"))
            with gate.store.read() as tx:
                pending = tx.get_approval(ar.approval_id)
            assert pending is not None
            if not approver(pending):
                gate.deny(ar.approval_id, approver_id)
                result.steps.append(Step(i, "approval_denied", tc.name))
                return _error_message(tc, "approval_denied")
            gate.approve(ar.approval_id, approver_id)
            result.steps.append(Step(i, "approval_granted", tc.name))
            outcome = gate.call(run_id, call)
    except (Denied, InvalidArguments, BudgetExceeded, OperationConflict) as e:
        result.steps.append(Step(i, "tool_error", f"{tc.name}: {e}"))
        return _error_message(tc, type(e).__name__, message=str(e))
    except (ToolFailed, OutcomeUnknown) as e:
        result.steps.append(Step(i, "tool_error", f"{tc.name}: {e}"))
        return _error_message(tc, type(e).__name__, message=str(e))
    result.steps.append(Step(i, "tool_call", f"{tc.name}({dict(tc.arguments)}) -> {outcome.text}"))
    return Message(role="tool", content=outcome.text, tool_call_id=tc.id)
