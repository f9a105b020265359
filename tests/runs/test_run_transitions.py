"""What a run's steps and status say about what happened to it: failures that end it, approvals
granted across a recovery, reconciliation waits, edits, rollbacks and cancellations, on every
store; and an App built with the wrong kind of field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tests.runs.test_recovery import _one_write_app, approve_all, closed_run
from tests.runs.test_runs import (
    REVIEWER,
    USER,
    Crash,
    CrashAfterEffect,
    Env,
    audit_kinds,
    call,
    intact,
    kinds,
    run_record,
    tool_messages,
)
from tether.core.lifecycle import RunStatus
from tether.core.principal import Principal
from tether.demo import TicketWorld
from tether.errors import ConfigurationError, RunStateError
from tether.models import Message
from tether.models.scripted import ScriptedModel
from tether.policy.rules import Policy
from tether.runs.app import App
from tether.runs.recovery import recover, rollback
from tether.runs.runner import load_result
from tether.runs.turns import Answered, Unsettled, Waiting
from tether.store.base import Store
from tether.tools.registry import Registry


@pytest.fixture
def env(backend: Backend, tmp_path: Path) -> Env:
    return Env(kind=backend.kind, tmp_path=tmp_path, store=backend.store, backend=backend)


def audit_data(store: Store, kind: str) -> list[dict[str, Any]]:
    return [e.record.get("data", {}) for e in store.audit_entries() if e.kind == kind]


def step_details(result: Any, kind: str) -> list[str]:
    return [s.detail for s in result.steps if s.kind == kind]


# -- a run whose model or tool breaks ends failed, saying why ------------------------------------
class RaisingModel:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> Message:
        raise self.error


class GarbageModel:
    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> Any:
        return self.reply


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (RaisingModel(RuntimeError("connection reset")), "RuntimeError('connection reset')"),
        # A tether error that is not about the store: it would raise again at every resume.
        (RaisingModel(ConfigurationError("no API key")), "ConfigurationError('no API key')"),
        (GarbageModel(None), "returned a NoneType, not a Message"),
        (GarbageModel("just text"), "returned a str, not a Message"),
        (GarbageModel(Message(role="assistant", content=42)), "content of type int"),  # type: ignore[arg-type]
    ],
    ids=["raises", "raises-tether-error", "none", "text", "bad-content"],
)
def test_a_model_that_raises_or_returns_garbage_fails_the_run_with_the_reason(
    env: Env, model: Any, reason: str
) -> None:
    runner = env.runner(model=model)
    run_id = runner.create("go", USER)
    with pytest.raises(RunStateError, match="marked failed") as info:
        runner.resume(run_id)
    assert reason in str(info.value)
    result = load_result(env.store, run_id)
    assert result.status == "failed"
    [error] = step_details(result, "error")
    assert reason in error
    assert run_record(env.store, result.run_id).lease_owner is None
    [failed] = audit_data(env.store, "run_failed")
    assert reason in failed["reason"]
    with pytest.raises(RunStateError, match="already failed"):
        env.runner(["done"]).resume(result.run_id)
    assert intact(env.store)


def test_a_failure_outside_the_gates_handling_fails_the_run_with_the_reason(env: Env) -> None:
    gate = env.gate()

    def broken_listener(event: dict[str, Any]) -> None:
        raise LookupError("the metrics sink is gone")

    gate.subscribe(broken_listener)
    runner = env.runner([[call("c-1", "lookup", ticket_id="T-1")], "done"], gate=gate)
    run_id = runner.create("go", USER)
    with pytest.raises(RunStateError, match="marked failed"):
        runner.resume(run_id)
    result = load_result(env.store, run_id)
    assert result.status == "failed"
    assert "the metrics sink is gone" in step_details(result, "error")[0]
    [failed] = audit_data(env.store, "run_failed")
    assert "the metrics sink is gone" in failed["reason"]


# -- every transition leaves a step ---------------------------------------------------------------
def test_an_approval_granted_before_a_crash_is_still_in_the_steps_after_recovery(
    env: Env,
) -> None:
    turns: list[Any] = [[call("c-1", "close", ticket_id="T-1")], "closed"]
    result = env.runner(turns).start("close T-1", USER)
    [approval_id] = result.approvals
    env.other_process().approve(approval_id, REVIEWER)
    crashing = CrashAfterEffect(env.gate(), ScriptedModel(turns), worker="w-dead", lease_s=30)
    with pytest.raises(Crash):
        crashing.resume(result.run_id)
    assert env.world.count("close") == 1

    env.now[0] += 31
    resumed = env.runner(turns, gate=env.other_process(), worker="w-2").resume(result.run_id)
    assert resumed.status == "completed"
    assert env.world.count("close") == 1
    assert kinds(resumed) == [
        "approval_required",
        "approval_granted",
        "recovered",
        "tool_call",
        "final",
    ]
    assert step_details(resumed, "approval_granted") == [f"close by {REVIEWER}"]
    assert "w-2 took over from w-dead" in step_details(resumed, "recovered")[0]
    assert intact(env.store)


def test_recover_and_a_worker_record_who_took_over_from_whom(
    env: Env,
) -> None:
    turns: list[Any] = [[call("c-1", "lookup", ticket_id="T-1")], "done"]
    crashing = CrashAfterEffect(env.gate(), ScriptedModel(turns), worker="w-dead", lease_s=30)
    run_id = crashing.create("go", USER)
    with pytest.raises(Crash):
        crashing.resume(run_id)
    env.now[0] += 31
    report = recover(env.store, lambda: env.runner(turns, worker="recoverer"))
    assert report.recovered == {run_id: "completed"}
    result = load_result(env.store, run_id)
    assert step_details(result, "recovered") == ["recoverer took over from w-dead"]
    [claimed] = [d for d in audit_data(env.store, "run_claimed") if d.get("taken_from")]
    assert claimed == {"previous_status": "running", "by": "runner", "taken_from": "w-dead"}


def test_a_run_waiting_for_reconciliation_says_which_effect(backend: Backend) -> None:
    world: dict[str, Any] = {}
    app = _one_write_app(world, reconcilable=False, fail_first="timeout")
    result = app.runner(backend.store).start("charge 5", app.principal)
    assert result.status == "awaiting_reconciliation"
    [effect] = backend.store.list_effects(result.run_id)
    assert result.waiting_on == [effect.operation_key]
    assert result.to_dict()["waiting_on"] == [effect.operation_key]
    [waits] = step_details(result, "awaiting_reconciliation")
    assert effect.operation_key in waits and "tether effects resolve" in waits
    shown = load_result(backend.store, result.run_id)
    assert shown.waiting_on == [effect.operation_key]

    # A recovery that still cannot settle it says so again, and names the effect.
    report = recover(backend.store, lambda: app.runner(backend.store))
    assert report.waiting_for_human == [result.run_id]
    again = load_result(backend.store, result.run_id)
    assert again.waiting_on == [effect.operation_key]
    assert kinds(again)[-3:] == ["recovered", "reconciled", "awaiting_reconciliation"]
    assert "unresolved" in step_details(again, "reconciled")[0]


def test_an_edit_names_the_approval_that_replaced_the_old_one(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "close", ticket_id="T-1")], "closed"]
    result = env.runner(turns).start("close T-1", USER)
    [old] = result.approvals
    new = env.other_process().edit(old, REVIEWER, {"ticket_id": "T-9"}).approval_id
    resumed = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert resumed.status == "completed"
    [edited] = step_details(resumed, "approval_edited")
    assert f"approval {old} replaced by {new}" in edited and "T-9" in edited
    assert f"approval {old} replaced by {new}" in tool_messages(resumed)["c-1"]
    assert kinds(resumed) == [
        "approval_required",
        "approval_edited",
        "approval_granted",
        "tool_call",
        "final",
    ]


def test_a_denial_decided_later_leaves_a_step(env: Env) -> None:
    turns: list[Any] = [[call("c-1", "close", ticket_id="T-1")], "not closed"]
    result = env.runner(turns).start("close T-1", USER)
    env.other_process().deny(result.approvals[0], REVIEWER, reason="not yours")
    resumed = env.runner(turns, gate=env.other_process()).resume(result.run_id)
    assert step_details(resumed, "approval_denied") == ["close: not yours"]


# -- rollback ------------------------------------------------------------------------------------
def test_a_rollback_says_how_to_continue_and_a_rolled_back_run_says_so(
    backend: Backend, tmp_path: Path
) -> None:
    world = TicketWorld(tmp_path / "world.db")
    app, run_id = closed_run(backend, world)
    gate = app.gate(backend.store)
    first = rollback(gate, run_id)
    [approval_id] = first.waiting
    assert first.next is not None
    assert f"re-run `tether runs rollback {run_id}`" in first.next
    assert "resume" not in first.next
    assert first.to_dict()["next"] == first.next
    waiting = load_result(backend.store, run_id)
    assert waiting.status == "completed"  # not rolled back yet
    assert approval_id in step_details(waiting, "rollback_waiting")[0]

    approve_all(backend, run_id)
    second = rollback(gate, run_id)
    assert second.complete and second.next is None
    done = load_result(backend.store, run_id)
    assert done.status == RunStatus.ROLLED_BACK
    assert RunStatus.ROLLED_BACK.value == "rolled_back"  # the name the CLI and the rows use
    assert RunStatus.ROLLED_BACK.finished
    [rolled] = step_details(done, "rolled_back")
    assert second.compensated[0] in rolled
    assert len(audit_data(backend.store, "run_rolled_back")) == 1
    # Again: a replay, and no second record of it.
    third = rollback(gate, run_id)
    assert third.complete
    assert kinds(load_result(backend.store, run_id)) == kinds(done)
    assert backend.store.verify_audit().intact


# -- cancellation while driven -------------------------------------------------------------------
@pytest.mark.parametrize("keep_lease", [True, False], ids=["lease-kept", "lease-cleared"])
def test_a_run_cancelled_while_it_is_driven_stops_and_stays_cancelled(
    env: Env, keep_lease: bool
) -> None:
    # Two calls in one turn: the first cancels the run (as `tether runs cancel` would, from
    # another process) while it runs; the second must never be dispatched.
    started: list[str] = []

    def cancel() -> None:
        store = env.other_store()
        with store.transaction() as tx:
            record = tx.get_run(started[0])
            assert record is not None
            changes: dict[str, Any] = {} if keep_lease else {"lease_owner": None}
            tx.update_run(replace(record, status=RunStatus.CANCELLED.value, **changes))
            tx.append_audit("run_cancelled", at=env.clock(), run_id=record.run_id, data={})

    env.world.hooks["lookup"] = cancel
    model = ScriptedModel(
        [[call("c-1", "lookup", ticket_id="T-1"), call("c-2", "refund", ticket_id="T-1", amount=5)]]
        + ["more"] * 3
    )
    runner = env.runner(model=model)
    started.append(runner.create("go", USER))
    result = runner.resume(started[0])
    assert result.status == "cancelled"
    assert run_record(env.store, started[0]).status == "cancelled"
    assert env.world.count("lookup") == 1 and env.world.count("refund") == 0
    assert len(model.calls) == 1  # the model is never asked again
    assert "run_completed" not in audit_kinds(env.store)
    assert "run_failed" not in audit_kinds(env.store)
    with pytest.raises(RunStateError, match="already cancelled"):
        env.runner(["x"]).resume(started[0])


# -- answers are tagged values -------------------------------------------------------------------
def test_answers_are_matched_by_kind() -> None:
    message = Message(role="tool", content="ok", tool_call_id="c-1")

    def describe(answer: Answered | Waiting | Unsettled) -> str:
        match answer:
            case Answered(m):
                return f"answered {m.content}"
            case Waiting(approval_id):
                return f"waits for {approval_id}"
            case Unsettled(key):
                return f"unsettled {key}"

    assert describe(Answered(message)) == "answered ok"
    assert describe(Waiting("ap-1")) == "waits for ap-1"
    assert describe(Unsettled("run:c-1")) == "unsettled run:c-1"


# -- App fields ----------------------------------------------------------------------------------
def _app(**fields: Any) -> App:
    values: dict[str, Any] = {
        "registry": Registry(),
        "policy": Policy(version="p"),
        "model": lambda: ScriptedModel(["hi"]),
        "principal": Principal(subject="u", tenant="t"),
    }
    return App(**{**values, **fields})


def test_an_app_given_a_model_instance_names_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"model=lambda: ScriptedModel\(\.\.\.\)"):
        _app(model=ScriptedModel(["hi"]))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"registry": [print]}, "registry is a list; it must be a tether.tools.registry.Registry"),
        ({"policy": {"version": "p"}}, "policy is a dict; it must be a tether.policy.rules.Policy"),
        ({"principal": "user-1"}, "principal is a str"),
        ({"model": "gpt"}, "model is a str instance"),
        ({"max_turns": 0}, "max_turns is 0"),
    ],
)
def test_an_app_with_a_wrong_field_says_which(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        _app(**fields)


def test_an_app_whose_model_factory_returns_no_model_says_so(backend: Backend) -> None:
    app = _app(model=lambda: "not a model")
    with pytest.raises(ConfigurationError, match="returned a str, which has no complete"):
        app.runner(backend.store)


def test_a_model_class_is_a_factory(backend: Backend) -> None:
    class Hello:
        def complete(self, messages: Sequence[Message], tools: Sequence[Any]) -> Message:
            return Message(role="assistant", content="hello")

    app = _app(model=Hello)
    assert app.runner(backend.store).start("hi", app.principal).final == "hello"
