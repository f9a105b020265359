"""The three seed scenarios, reproduced on a real store with the seeds' own numbers.

``tether demo`` runs them one after the other on one store and prints what happened; the
test suite runs the same functions and asserts the numbers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from tether.compat import AgentHarness, PermissionLevel, RegisteredAction, run_with_approval
from tether.core.budget import Budget
from tether.core.principal import Principal
from tether.errors import ApprovalRequired, BudgetExceeded, UnknownToolError
from tether.gate.pipeline import Gate, ToolCall
from tether.models import Message, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy.rules import Policy
from tether.runs.cancel import complete_run
from tether.store.base import Store
from tether.tools.registry import Registry, Risk

Say = Callable[[str], None]

SUPPORT_POLICY = Policy(version="policy-3", approvers=frozenset({"reviewer-5"}))
USER_42 = Principal(
    subject="user-42", tenant="acme", scopes=frozenset({"ticket:read", "ticket:write"})
)


def _quiet(_: str) -> None:
    pass


def seed000(store: Store, say: Say = _quiet) -> dict[str, Any]:
    """An approved ``close_ticket`` replayed: the same record, one external call."""
    external_calls: dict[str, dict[str, Any]] = {}
    registry = Registry()

    @registry.tool(
        version="2",
        risk=Risk.WRITE,
        required_scope="ticket:write",
        allowed_tenants={"acme"},
        server_id="support-write",
        tenant_path="tenant",
    )
    def close_ticket(tenant: str, ticket_id: str, operation_key: str) -> dict[str, Any]:
        """Close a support ticket."""
        # The outside system deduplicates by the key tether passes, as seed 000's does.
        if operation_key not in external_calls:
            external_calls[operation_key] = {"ticket_id": ticket_id, "status": "closed"}
        return external_calls[operation_key]

    gate = Gate(registry, SUPPORT_POLICY, store)
    run_id = gate.start_run(USER_42, budget=Budget(max_steps=3), run_id=_unique("run-7"))
    call = ToolCall(
        call_id="call-9",
        tool="close_ticket",
        tool_version="2",
        arguments={"tenant": "acme", "ticket_id": "T-100"},
    )
    try:
        gate.call(run_id, call)
        raise AssertionError("close_ticket must need approval under policy-3")
    except ApprovalRequired as signal:
        say(f"  close_ticket needs approval {signal.approval_id}; reviewer-5 approves")
        gate.approve(signal.approval_id, "reviewer-5")
    first = gate.call(run_id, call)
    replayed = gate.call(run_id, call)
    say(f"  first:    {first.status.value} {first.result} ({first.policy_decision})")
    say(f"  replayed: {replayed.status.value} {replayed.result} (replayed={replayed.replayed})")
    say(f"  external calls: {len(external_calls)}  operation key: {first.operation_key}")
    complete_run(store, run_id, actor="demo")  # its code is done: it does not stay running
    return {
        "status": first.status.value,
        "result": first.result,
        "replay_identical": first.result == replayed.result and replayed.replayed,
        "external_calls": len(external_calls),
        "operation_key": first.operation_key,
    }


def seed003(store: Store, say: Say = _quiet) -> dict[str, Any]:
    """The harness: budget 50, read + write + admin spend 12, unknown action blocked,
    irreversible needs approval; then budget 5 runs out on the second write."""

    def handler(**kwargs: Any) -> dict[str, Any]:
        return {"ok": True, **kwargs}

    def harness(budget: int) -> AgentHarness:
        h = AgentHarness(budget=budget, store=store)
        for name, level, cost, text in (
            ("read_ticket", PermissionLevel.READ, 1, "Read Jira ticket"),
            ("write_draft", PermissionLevel.WRITE, 3, "Write draft fix"),
            ("create_pr", PermissionLevel.ADMIN, 8, "Open pull request"),
            ("merge_to_main", PermissionLevel.IRREVERSIBLE, 20, "Merge to main"),
        ):
            h.registry.register(RegisteredAction(name, level, cost, text, handler))
        return h

    h = harness(50)
    h.execute("read_ticket", ticket_id="BUG-101")
    h.execute("write_draft", ticket_id="BUG-101", patch="fix: add null check")
    h.execute("create_pr", ticket_id="BUG-101", title="fix: BUG-101")
    spent, remaining = h.budget.spent, h.budget.remaining
    say(f"  read + write + admin: spent {spent}, remaining {remaining}")
    blocked = ""
    try:
        h.execute("delete_all_data")
    except UnknownToolError as e:
        blocked = str(e)
        say(f"  delete_all_data: {blocked}")
    try:
        h.execute("merge_to_main", pr_id=1)
        raise AssertionError("merge_to_main must need approval")
    except ApprovalRequired as signal:
        say(f"  merge_to_main: approval required ({signal.action_name} {signal.action_args})")
        after_ask = h.budget.remaining
        h.approve_and_execute("merge_to_main", pr_id=1)
    say(f"  approved and merged: remaining {h.budget.remaining}")

    small = harness(5)
    small.execute("write_draft", ticket_id="BUG-102", patch="a")
    exhausted = ""
    try:
        small.execute("write_draft", ticket_id="BUG-102", patch="b")
    except BudgetExceeded as e:
        exhausted = str(e)
        say(f"  budget 5: {exhausted}")
    for done in (h, small):
        complete_run(store, done.run_id, actor="demo")
    return {
        "spent": spent,
        "remaining": remaining,
        "blocked": blocked,
        "remaining_while_awaiting_approval": after_ask,
        "remaining_after_merge": h.budget.remaining,
        "budget5_error": exhausted,
        "audit_intact": h.audit.verify_integrity(),
    }


def _seed004_registry() -> Registry:
    registry = Registry()

    @registry.tool(risk="readonly")
    def search(q: str) -> str:
        """Search the local corpus."""
        return f"3 passages match '{q}'"

    @registry.tool(risk="dangerous")
    def delete_run(run_id: str) -> str:
        """Permanently delete a run and what it produced."""
        return f"deleted {run_id}"

    return registry


def _seed004_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [ModelToolCall(id="c1", name="search", arguments={"q": "run_42 summary"})],
            [ModelToolCall(id="c2", name="delete_run", arguments={"run_id": "run_42"})],
            "Searched and cleaned up run_42; report follows.",
        ]
    )


def seed004(store: Store, say: Say = _quiet) -> dict[str, Any]:
    """A scripted model: search, then an approved delete_run, then the final answer; and the
    same script with the approval denied, fed back to the model as an error."""
    registry = _seed004_registry()
    policy = Policy(version="policy-4", approvers=frozenset({"reviewer-5"}))
    gate = Gate(registry, policy, store)
    principal = Principal(subject="user-42", tenant="ws_acme")

    model = _seed004_model()
    run_id = gate.start_run(principal, run_id=_unique("run-004"))
    result = run_with_approval(
        model,
        gate,
        run_id,
        "Clean up run_42 and give me a report",
        approver=lambda approval: True,
        approver_id="reviewer-5",
        system="You are a research assistant.",
    )
    for s in result.steps:
        say(f"  [{s.index}] {s.kind:<17} {s.detail}")
    say(f"  model calls: {len(model.calls)}")

    denied_model = _seed004_model()
    denied = run_with_approval(
        denied_model,
        gate,
        gate.start_run(principal, run_id=_unique("run-004-denied")),
        "Clean up run_42 and give me a report",
        approver=lambda approval: False,
        approver_id="reviewer-5",
    )
    fed_back = _tool_reply(denied.messages, "c2")
    say(f"  denied variant, fed back to the model: {fed_back}")
    return {
        "steps": [s.kind for s in result.steps],
        "model_calls": len(model.calls),
        "final": result.final,
        "denied_steps": [s.kind for s in denied.steps],
        "denied_feedback": json.loads(fed_back),
    }


def _tool_reply(messages: list[Message], call_id: str) -> str:
    return next(m.content for m in messages if m.role == "tool" and m.tool_call_id == call_id)


def _unique(prefix: str) -> str:
    # Runs are durable, so a second demo on the same file needs fresh run ids.
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# What each scenario shows, as the demo says it (the summary keeps the scenarios' names).
SHOWS = {
    "seed000": "1. Exactly once. An approved close_ticket is called twice with the same call "
    "id: the ticket service is called once, and the second call replays the recorded result.",
    "seed003": "2. Budgets and the registry. A run with a budget of 50 spends 12 on a read, a "
    "write and an admin action; an action nobody registered is blocked; an irreversible one "
    "waits for approval; with a budget of 5, the second write is refused.",
    "seed004": "3. An agent under the gate. A scripted model searches, asks to delete a run "
    "(approved by reviewer-5), and answers; asked again with the approval denied, it is told "
    "so as the call's result.",
}


def run_all(store: Store, say: Say = _quiet) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, scenario in (("seed000", seed000), ("seed003", seed003), ("seed004", seed004)):
        say(SHOWS[name])
        summary[name] = scenario(store, say)
    report = store.verify_audit()
    say(report.summary())
    summary["audit"] = {"entries": report.entries, "intact": report.intact}
    return summary
