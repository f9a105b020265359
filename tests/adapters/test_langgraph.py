"""tether.adapters.langgraph with the real LangGraph and LangChain: a hand-built StateGraph with
a GovernedToolNode and LangGraph's SQLite checkpointer (tests/adapters/langgraph_app.py), and
create_agent with TetherMiddleware. A witness file outside tether counts every execution."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from tests import pg
from tests.adapters.langgraph_app import (
    POLICY,
    PRINCIPAL,
    App,
    app,
    registry,
    start_input,
    witness_lines,
)
from tether import ApprovalStatus, Gate
from tether.adapters.langgraph import TetherMiddleware, langchain_tools, run_id_for
from tether.errors import Denied
from tether.identity import add_identity
from tether.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
READ = {"name": "read_file", "args": {"path": "a.txt"}, "id": "call-read", "type": "tool_call"}
DELETE = {"name": "delete_file", "args": {"path": "b.txt"}, "id": "call-del", "type": "tool_call"}
DELETE_2 = {
    "name": "delete_file",
    "args": {"path": "c.txt"},
    "id": "call-del-2",
    "type": "tool_call",
}


def deletions(directory: Path) -> list[str]:
    return [line for line in witness_lines(directory) if line.startswith("delete_file")]


def reads(directory: Path) -> list[str]:
    return [line for line in witness_lines(directory) if line.startswith("read_file")]


def pause(a: App, thread: str, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    """Start the thread; return the pending calls its pause lists."""
    result = a.graph.invoke(start_input(calls), a.config(thread))
    (interrupt,) = result["__interrupt__"]
    pending: list[dict[str, Any]] = interrupt.value["pending"]
    return pending


def tool_messages(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def approve_with_cli(db: str, approval_id: str, token: str, directory: Path) -> None:
    """``tether approvals approve`` in its own process, with an approver's credential."""
    token_file = directory / "reviewer.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    approved = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "approvals",
            "approve",
            approval_id,
            "--db",
            db,
            "--token-file",
            str(token_file),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert approved.returncode == 0, approved.stderr


def child(directory: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run tests/adapters/langgraph_app.py in another process, as a second worker would."""
    return subprocess.run(
        [sys.executable, "-m", "tests.adapters.langgraph_app", str(directory), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_allowed_read_runs_once_and_answers_the_model(tmp_path: Path) -> None:
    with app(tmp_path) as a:
        result = a.graph.invoke(start_input([READ]), a.config("t"))
        assert "__interrupt__" not in result
        assert tool_messages(result)["call-read"].content == "contents of a.txt"
        assert result["messages"][-1].content == "done: contents of a.txt"
        (effect,) = a.store.list_effects(run_id_for("t"))
        assert effect.call_id == "call-read"
    assert reads(tmp_path) == ["read_file a.txt"]


def test_a_write_pauses_is_approved_from_another_process_and_resumes_once(
    tmp_path: Path,
) -> None:
    # The graph has no approver of its own: the decision is made with the command line.
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", DELETE)
        assert deletions(tmp_path) == []
        approval = a.gate.approval_for(run_id_for("t"), "call-del")
        assert approval is not None
        assert pending["approval_id"] == approval.approval_id
        assert pending["tool"] == "delete_file"
        assert pending["arguments"] == {"path": "b.txt"}
        assert pending["digest"] == approval.call_digest
        assert pending["reasons"] == ["tier write: ask"]
        assert pending["expires_at"] == approval.expires_at
        _, token = add_identity(
            a.store, "reviewer-1", "approver", now=time.time(), tenants=["acme"]
        )
    approve_with_cli(f"sqlite:///{tmp_path / 'tether.db'}", pending["approval_id"], token, tmp_path)
    # Resumed by yet another process, whose resume value carries no decision: the grant
    # tether holds is what lets the call run.
    resumed = child(tmp_path, "resume", "t", "{}")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["last"] == "done: deleted b.txt"
    assert len(deletions(tmp_path)) == 1
    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        (decided,) = store.list_approvals()
        assert decided.status is ApprovalStatus.USED
        assert decided.approver == "reviewer-1"
        assert decided.approver_credential is not None
        assert store.verify_audit().intact


def test_a_denial_reaches_the_model_and_nothing_runs(tmp_path: Path) -> None:
    with app(tmp_path, "reviewer-1") as a:
        (pending,) = pause(a, "t", DELETE)
        deny = {pending["approval_id"]: {"type": "deny", "message": "keep b.txt"}}
        result = a.graph.invoke(Command(resume=deny), a.config("t"))
        answer = tool_messages(result)["call-del"]
        assert answer.status == "error"
        assert "denied by reviewer-1: keep b.txt" in str(answer.content)
        assert "keep b.txt" in str(result["messages"][-1].content)  # what the model read
    assert deletions(tmp_path) == []


def test_an_edit_is_judged_again_and_runs_with_the_edited_arguments(tmp_path: Path) -> None:
    with app(tmp_path, "reviewer-1") as a:
        (pending,) = pause(a, "t", DELETE)
        edit = {pending["approval_id"]: {"type": "edit", "arguments": {"path": "b.bak"}}}
        result = a.graph.invoke(Command(resume=edit), a.config("t"))
        answer = str(tool_messages(result)["call-del"].content)
        assert "arguments edited by reviewer-1" in answer
        assert answer.endswith("deleted b.bak")
    (line,) = deletions(tmp_path)
    assert line.startswith("delete_file b.bak ")


def test_an_expired_approval_runs_nothing_and_tells_the_model(tmp_path: Path) -> None:
    now = [1_000_000.0]
    with app(tmp_path, "reviewer-1", clock=lambda: now[0]) as a:
        (pending,) = pause(a, "t", DELETE)
        now[0] += POLICY.approval_ttl_s + 1
        result = a.graph.invoke(
            Command(resume={pending["approval_id"]: {"type": "approve"}}), a.config("t")
        )
        answer = tool_messages(result)["call-del"]
        assert answer.status == "error"
        assert "expired before anyone decided it" in str(answer.content)
    assert deletions(tmp_path) == []


def test_a_sibling_that_needed_no_approval_keeps_its_result_across_the_pause(
    tmp_path: Path,
) -> None:
    with app(tmp_path, "reviewer-1") as a:
        (pending,) = pause(a, "t", READ, DELETE)
        assert reads(tmp_path) == ["read_file a.txt"]  # ran before the graph paused
        approve = {pending["approval_id"]: {"type": "approve"}}
        result = a.graph.invoke(Command(resume=approve), a.config("t"))
        answers = tool_messages(result)
        # LangGraph re-ran the node from its start; the gate answered the read from its
        # ledger.
        assert answers["call-read"].content == "contents of a.txt"
        assert answers["call-read"].artifact["replayed"] is True
        assert answers["call-del"].content == "deleted b.txt"
    assert reads(tmp_path) == ["read_file a.txt"]
    assert len(deletions(tmp_path)) == 1


def test_the_same_pause_resumed_twice_runs_the_write_once(tmp_path: Path) -> None:
    with app(tmp_path, "reviewer-1") as a:
        (pending,) = pause(a, "t", READ, DELETE)
        paused_at = a.graph.get_state(a.config("t")).config
        approve = {pending["approval_id"]: {"type": "approve"}}
        a.graph.invoke(Command(resume=approve), a.config("t"))
        # A second resumer that loaded the same paused checkpoint: the node runs again.
        again = a.graph.invoke(Command(resume=approve), paused_at)
        answers = tool_messages(again)
        assert answers["call-del"].content == "deleted b.txt"
        assert answers["call-del"].artifact["replayed"] is True
    assert len(deletions(tmp_path)) == 1
    assert len(reads(tmp_path)) == 1


def test_two_processes_resuming_the_same_pause_at_once_run_the_write_once(
    tmp_path: Path,
) -> None:
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", READ, DELETE)
    approve = json.dumps({pending["approval_id"]: {"type": "approve"}})
    command = [sys.executable, "-m", "tests.adapters.langgraph_app", str(tmp_path)]
    workers = [
        subprocess.Popen(
            [*command, "resume", "t", approve, "reviewer-1"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    finished = [
        json.loads(out) for (out, _), w in zip(outputs, workers, strict=True) if not w.returncode
    ]
    assert finished, f"neither worker finished: {[err[-2000:] for _, err in outputs]}"
    assert all(f["last"] == "done: contents of a.txt | deleted b.txt" for f in finished)
    assert len(deletions(tmp_path)) == 1
    assert len(reads(tmp_path)) == 1


@pytest.mark.parametrize(
    ("resume", "message"),
    [
        ("by position", "never matched by position"),
        ("unknown id", "which is not an approval of this pause"),
        ("missing one", "has no decision for"),
        ("flipped", "was already decided (denied by reviewer-1)"),
        ("no type", "must be a dict whose 'type' is one of"),
    ],
)
def test_a_resume_value_that_cannot_be_applied_is_refused_before_anything_runs(
    tmp_path: Path, resume: str, message: str
) -> None:
    with app(tmp_path, "reviewer-1") as a:
        first, second = pause(a, "t", READ, DELETE, DELETE_2)
        one, two = first["approval_id"], second["approval_id"]
        approve = {"type": "approve"}
        if resume == "flipped":
            # Denied through tether; the resumer asks to approve it anyway.
            a.gate.deny(one, "reviewer-1", reason="no")
        value: Any = {
            "by position": [approve, approve],
            "unknown id": {one: approve, two: approve, "apr-0000000000000000": approve},
            "missing one": {one: approve},
            "flipped": {one: approve, two: approve},
            "no type": {one: approve, two: {"decision": "approve"}},
        }[resume]
        with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
            a.graph.invoke(Command(resume=value), a.config("t"))
        assert deletions(tmp_path) == []
        # The refused value was not kept: the same pause is answered again, properly.
        fixed = {one: {"type": "deny"} if resume == "flipped" else approve, two: approve}
        result = a.graph.invoke(Command(resume=fixed), a.config("t"))
        assert tool_messages(result)["call-del-2"].content == "deleted c.txt"
    assert len(deletions(tmp_path)) == (1 if resume == "flipped" else 2)
    assert len(reads(tmp_path)) == 1


@pytest.mark.parametrize("how", ["update_state", "Command(update=...)"])
def test_a_call_rewritten_after_its_approval_is_refused(tmp_path: Path, how: str) -> None:
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", DELETE)
        a.gate.approve(pending["approval_id"], "reviewer-1")
        state = a.graph.get_state(a.config("t"))
        proposed = state.values["messages"][-1]
        rewritten = {**DELETE, "args": {"path": "/etc/passwd"}}
        swap = AIMessage(content="", tool_calls=[rewritten], id=proposed.id)
        if how == "update_state":
            a.graph.update_state(a.config("t"), {"messages": [swap]})
            result = a.graph.invoke(Command(resume={}), a.config("t"))
        else:
            result = a.graph.invoke(Command(resume={}, update={"messages": [swap]}), a.config("t"))
        answer = tool_messages(result)["call-del"]
        assert answer.status == "error"
        assert "does not bind this call (arguments, call digest differ)" in str(answer.content)
    assert deletions(tmp_path) == []


def test_a_call_rewritten_after_it_ran_is_an_operation_conflict(tmp_path: Path) -> None:
    with app(tmp_path, "reviewer-1") as a:
        (pending,) = pause(a, "t", DELETE)
        paused_at = a.graph.get_state(a.config("t")).config
        a.graph.invoke(Command(resume={pending["approval_id"]: {"type": "approve"}}), a.config("t"))
        proposed = a.graph.get_state(paused_at).values["messages"][-1]
        swap = AIMessage(
            content="", tool_calls=[{**DELETE, "args": {"path": "d.txt"}}], id=proposed.id
        )
        forked = a.graph.update_state(paused_at, {"messages": [swap]})
        result = a.graph.invoke(Command(resume={}), forked)
        answer = tool_messages(result)["call-del"]
        assert answer.status == "error"
        assert "already recorded as" in str(answer.content)  # OperationConflict
    assert [line.split()[1] for line in deletions(tmp_path)] == ["b.txt"]


@pytest.mark.parametrize("crash", ["approval.after_grant_commit", "gate.after_outcome_commit"])
def test_a_process_killed_while_resuming_leaves_the_write_to_run_exactly_once(
    tmp_path: Path, crash: str
) -> None:
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", READ, DELETE)
    approve = json.dumps({pending["approval_id"]: {"type": "approve"}})
    killed = child(tmp_path, "resume", "t", approve, "reviewer-1", env={"TETHER_CRASH_AT": crash})
    assert killed.returncode == -9, killed.stderr
    assert len(deletions(tmp_path)) == (1 if crash == "gate.after_outcome_commit" else 0)
    # The next worker resumes the thread with the same value (a client retrying).
    resumed = child(tmp_path, "resume", "t", approve, "reviewer-1")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["last"] == "done: contents of a.txt | deleted b.txt"
    assert len(deletions(tmp_path)) == 1
    assert len(reads(tmp_path)) == 1


# -- create_agent with TetherMiddleware ---------------------------------------------------------
class FakeModel(GenericFakeChatModel):
    """LangChain's offline chat model; create_agent binds tools to its model."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def agent_for(tmp_path: Path, gate: Gate, turns: list[AIMessage]) -> Any:
    connection = sqlite3.connect(tmp_path / "agent.db", check_same_thread=False)
    return create_agent(
        FakeModel(messages=iter(turns)),
        tools=langchain_tools(gate.registry),
        middleware=[TetherMiddleware(gate, PRINCIPAL, approver="reviewer-1")],
        checkpointer=SqliteSaver(connection),
    )


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_create_agent_with_the_middleware_pauses_and_resumes_by_approval_id(
    tmp_path: Path, decision: str
) -> None:
    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        gate = Gate(registry(tmp_path), POLICY, store)
        turn = AIMessage(content="", tool_calls=[READ, DELETE])
        agent = agent_for(tmp_path, gate, [turn, AIMessage(content="finished")])
        config: Any = {"configurable": {"thread_id": "agent-t"}}
        paused = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config)
        (pending,) = paused["__interrupt__"][0].value["pending"]
        assert pending["tool"] == "delete_file"
        assert reads(tmp_path) == ["read_file a.txt"]
        value = {"type": decision, "message": "not today"}
        done = agent.invoke(Command(resume={pending["approval_id"]: value}), config)
        answers = tool_messages(done)
        assert answers["call-read"].content == "contents of a.txt"
        if decision == "approve":
            assert answers["call-del"].content == "deleted b.txt"
        else:
            assert "not today" in str(answers["call-del"].content)
        assert done["messages"][-1].content == "finished"
    assert len(deletions(tmp_path)) == (1 if decision == "approve" else 0)
    assert len(reads(tmp_path)) == 1


def test_the_described_tools_refuse_to_run_outside_the_gate(tmp_path: Path) -> None:
    tools = {t.name: t for t in langchain_tools(registry(tmp_path))}
    assert set(tools) == {"read_file", "delete_file"}
    assert tools["delete_file"].args == {"path": {"type": "string"}}
    with pytest.raises(Denied, match="runs only through its gate"):
        tools["delete_file"].invoke({"path": "b.txt"})
    assert deletions(tmp_path) == []


# -- LangGraph's PostgreSQL checkpointer and tether's PostgresStore -----------------------------
@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """(tether's store URL, LangGraph's connection string), both in one fresh schema that
    is dropped afterwards."""
    for url in pg.schema_url():
        schema = url.rpartition("schema=")[2]
        import psycopg

        with psycopg.connect(pg.URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in pg.URL else "?"
        yield url, f"{pg.URL}{sep}options=-csearch_path%3D{schema}"


@pytest.mark.postgres
def test_postgres_checkpointer_an_approved_write_resumed_twice_runs_once(
    tmp_path: Path, pg_schema: tuple[str, str]
) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    store_url, checkpoints = pg_schema
    with (
        PostgresSaver.from_conn_string(checkpoints) as saver,
        app(tmp_path, store_url=store_url, checkpointer=saver) as a,
    ):
        saver.setup()
        (pending,) = pause(a, "t", READ, DELETE)
        paused_at = a.graph.get_state(a.config("t")).config
        _, token = add_identity(
            a.store, "reviewer-1", "approver", now=time.time(), tenants=["acme"]
        )
        approve_with_cli(store_url, pending["approval_id"], token, tmp_path)
        done = a.graph.invoke(Command(resume={}), a.config("t"))
        assert done["messages"][-1].content == "done: contents of a.txt | deleted b.txt"
        # A second resumer that loaded the same paused checkpoint from PostgreSQL.
        again = a.graph.invoke(Command(resume={}), paused_at)
        assert tool_messages(again)["call-del"].artifact["replayed"] is True
        (decided,) = a.store.list_approvals()
        assert decided.status is ApprovalStatus.USED
        assert decided.approver_credential is not None
        assert a.store.verify_audit().intact
        # The thread's checkpoints really are in PostgreSQL, in this test's schema.
        import psycopg

        with psycopg.connect(checkpoints) as conn:
            row = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 't'").fetchone()
        assert row is not None and row[0] > 0
    assert len(deletions(tmp_path)) == 1
    assert len(reads(tmp_path)) == 1


# -- runs and audit -------------------------------------------------------------------------------
def runs_show(directory: Path, run_id: str) -> dict[str, Any]:
    """``tether runs show RUN --json`` in its own process, on the app's store."""
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "runs",
            "show",
            run_id,
            "--json",
            "--db",
            f"sqlite:///{directory / 'tether.db'}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    result: dict[str, Any] = json.loads(shown.stdout)
    return result


def test_runs_show_lists_the_threads_steps_and_a_decision_does_not_queue_it(
    tmp_path: Path,
) -> None:
    run_id = run_id_for("t")
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", READ, DELETE)
        paused = runs_show(tmp_path, run_id)
        kinds = [s["kind"] for s in paused["steps"]]
        assert kinds == ["tool_call", "approval_required"]
        assert "read_file({'path': 'a.txt'}) [call-read] -> contents of a.txt" in str(
            paused["steps"][0]["detail"]
        )
        assert pending["approval_id"] in paused["steps"][1]["detail"]
        _, token = add_identity(
            a.store, "reviewer-1", "approver", now=time.time(), tenants=["acme"]
        )
        approve_with_cli(
            f"sqlite:///{tmp_path / 'tether.db'}", pending["approval_id"], token, tmp_path
        )
        # Not queued for tether's workers: its conversation is in LangGraph's checkpoints.
        (record,) = a.store.list_runs()
        assert record.status == "running"
        assert record.lease_owner is None
        paused_at = a.graph.get_state(a.config("t")).config
        a.graph.invoke(Command(resume={}), a.config("t"))
        a.graph.invoke(Command(resume={}), paused_at)  # a second resumer: no new steps
    done = runs_show(tmp_path, run_id)
    steps = [(s["kind"], s["detail"]) for s in done["steps"]]
    assert [k for k, _ in steps] == [
        "tool_call",
        "approval_required",
        "approval_granted",
        "tool_call",
    ]
    assert "by reviewer-1" in steps[2][1]
    assert steps[3][1].startswith("delete_file({'path': 'b.txt'}) [call-del] -> deleted b.txt")


def test_a_process_killed_after_dispatch_leaves_the_effect_unknown_until_resolved(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    with app(tmp_path) as a:
        (pending,) = pause(a, "t", DELETE)
        _, token = add_identity(
            a.store, "reviewer-1", "approver", now=time.time(), tenants=["acme"]
        )
    approve = json.dumps({pending["approval_id"]: {"type": "approve"}})
    crash = {"TETHER_CRASH_AT": "gate.after_dispatch_commit"}
    killed = child(tmp_path, "resume", "t", approve, "reviewer-1", env=crash)
    assert killed.returncode == -9, killed.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "tether", "effects", "list", "--db", db, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    (effect,) = json.loads(listed.stdout)
    assert effect["status"] == "dispatched"
    # The tool was not reached in this run of it, but tether cannot know that: the next
    # resume stops clearly instead of guessing or sending it again.
    resumed = child(tmp_path, "resume", "t", "{}")
    assert resumed.returncode != 0
    assert "OutcomeUnknown" in resumed.stderr
    assert effect["operation_key"] in resumed.stderr
    # Say it happened (as the outside system's records show), with an approver's credential.
    token_file = tmp_path / "reviewer.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    resolved = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "effects",
            "resolve",
            effect["operation_key"],
            "--committed",
            "--result",
            '"deleted b.txt"',
            "--db",
            db,
            "--token-file",
            str(token_file),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert resolved.returncode == 0, resolved.stderr
    done = child(tmp_path, "resume", "t", "{}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last"] == "done: deleted b.txt"
    # Replayed from the ledger as resolved: the tool is not called again. (The crash point
    # is before the call, so the witness saw none; had it run, it would still be one.)
    assert deletions(tmp_path) == []
    with SQLiteStore(db) as store:
        (settled,) = store.list_effects(run_id_for("t"))
        assert settled.status.value != "dispatched"
        with store.read() as tx:
            steps = [s.kind for s in tx.steps(run_id_for("t"))]
    assert steps[-2:] == ["outcome_unknown", "tool_call"]


@pytest.mark.parametrize(("request_text", "pauses"), [("please delete b.txt", False), ("go", True)])
def test_the_users_messages_are_the_runs_trusted_input(
    tmp_path: Path, request_text: str, pauses: bool
) -> None:
    from tether import Policy, Risk, Verdict
    from tether.policy.flow import FlowPolicy, FlowRule

    flow = Policy(
        version="lg-flow",
        approvers=frozenset({"reviewer-1"}),
        flow=FlowPolicy(tiers={Risk.WRITE: FlowRule(trusted=Verdict.ALLOW)}),
    )
    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        gate = Gate(registry(tmp_path), flow, store)
        turn = AIMessage(content="", tool_calls=[DELETE])
        agent = agent_for(tmp_path, gate, [turn, AIMessage(content="finished")])
        config: Any = {"configurable": {"thread_id": "agent-flow"}}
        result = agent.invoke({"messages": [{"role": "user", "content": request_text}]}, config)
        with store.read() as tx:
            assert tx.inputs(run_id_for("agent-flow")) == [("user", request_text)]
        if pauses:  # "b.txt" is in nothing the user said: a human looks
            (pending,) = result["__interrupt__"][0].value["pending"]
            assert "appears in no trusted input" in " ".join(pending["reasons"])
            assert deletions(tmp_path) == []
        else:
            assert "__interrupt__" not in result
            assert [line.split()[:2] for line in deletions(tmp_path)] == [["delete_file", "b.txt"]]


# -- ainvoke: the gate and the tool never block the event loop ---------------------------------
def slow_registry(directory: Path, *, asynchronous: bool) -> Any:
    from tether import Registry, Risk

    reg = Registry()
    witness = directory / "witness.log"
    if asynchronous:

        @reg.tool(risk=Risk.READ)
        async def read_file(path: str) -> str:
            """Read a file, slowly."""
            import asyncio

            await asyncio.sleep(0.5)
            with witness.open("a") as f:
                f.write(f"read_file {path}\n")
            return f"contents of {path}"

    else:

        @reg.tool(risk=Risk.READ, name="read_file")
        def read_blocking(path: str) -> str:
            """Read a file, slowly (a blocking call)."""
            time.sleep(0.5)
            with witness.open("a") as f:
                f.write(f"read_file {path}\n")
            return f"contents of {path}"

    return reg


async def longest_stall(work: Any) -> tuple[Any, float]:
    """``work``'s result, and the longest the event loop went without running a 5 ms
    ticker meanwhile (a loop blocked by a 0.5 s tool would show ~500 ms)."""
    import asyncio

    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return result, max(gaps)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync tool", "async tool"])
@pytest.mark.parametrize("face", ["middleware", "tool node"])
def test_under_ainvoke_a_slow_tool_never_blocks_the_event_loop(
    tmp_path: Path, face: str, asynchronous: bool
) -> None:
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    from tether.adapters.langgraph import GovernedToolNode

    with SQLiteStore(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        gate = Gate(slow_registry(tmp_path, asynchronous=asynchronous), POLICY, store)
        turn = AIMessage(content="", tool_calls=[READ])
        config: Any = {"configurable": {"thread_id": f"slow-{face}"}}
        graph: Any
        if face == "middleware":
            graph = create_agent(
                FakeModel(messages=iter([turn, AIMessage(content="finished")])),
                tools=langchain_tools(gate.registry),
                middleware=[TetherMiddleware(gate, PRINCIPAL, approver="reviewer-1")],
                checkpointer=InMemorySaver(),
            )
        else:
            turns = iter([turn, AIMessage(content="finished")])
            builder = StateGraph(MessagesState)
            builder.add_node("model", lambda _: {"messages": [next(turns)]})
            builder.add_node("tools", GovernedToolNode(gate, PRINCIPAL))
            builder.add_edge(START, "model")
            builder.add_conditional_edges(
                "model", lambda s: "tools" if s["messages"][-1].tool_calls else END
            )
            builder.add_edge("tools", "model")
            graph = builder.compile(checkpointer=InMemorySaver())
        start = {"messages": [{"role": "user", "content": "go"}]}
        done, stall = asyncio.run(longest_stall(graph.ainvoke(start, config)))
    assert tool_messages(done)["call-read"].content == "contents of a.txt"
    assert reads(tmp_path) == ["read_file a.txt"]
    # Blocked, the loop would stall for the tool's whole 0.5 s; the margin is for a noisy
    # machine (bench/bench_event_loop.py measures the stall itself).
    assert stall < 0.25, f"the event loop stalled {stall * 1000:.0f} ms"


# -- who decides: the approver of each resume, from the application's own sign-in -----------------
def test_each_resume_is_decided_by_the_user_the_application_signed_in(tmp_path: Path) -> None:
    from tether.identity import authenticate, revoke_identity

    def signed_in(config: Any) -> Any:
        # What a web app's server puts in the config for the user whose request resumes.
        return config["configurable"].get("approver")

    with app(tmp_path, signed_in) as a:
        now = time.time()
        _, alice_token = add_identity(a.store, "reviewer-1", "approver", now=now, tenants=["acme"])
        alice = authenticate(a.store, alice_token, "approver")
        (pending,) = pause(a, "t", DELETE)
        decision = {pending["approval_id"]: {"type": "approve"}}
        # Nobody signed in: nothing is decided, and the graph still waits.
        with pytest.raises(pydantic.ValidationError, match="no approver"):
            a.graph.invoke(Command(resume=decision), a.config("t"))
        revoke_identity(a.store, alice.credential_id or "", "approver", now=now, actor="admin")
        revoked: Any = {"configurable": {"thread_id": "t", "approver": alice}}
        with pytest.raises(pydantic.ValidationError, match="revoked or unknown"):
            a.graph.invoke(Command(resume=decision), revoked)
        assert deletions(tmp_path) == []
        _, token = add_identity(
            a.store, "reviewer-1", "approver", now=time.time(), tenants=["acme"]
        )
        again = authenticate(a.store, token, "approver")
        config: Any = {"configurable": {"thread_id": "t", "approver": again}}
        done = a.graph.invoke(Command(resume=decision), config)
        assert tool_messages(done)["call-del"].content == "deleted b.txt"
        (decided,) = a.store.list_approvals()
        assert decided.approver_credential == again.credential_id
    assert len(deletions(tmp_path)) == 1
