"""The gate's trust boundary: one effect per call whatever changes around it, results that are
not plain JSON, declared tenancy, argument limits, and state edited behind tether's back.

Each test here failed before the change it guards: a version bump re-ran a call, a pydantic
result crashed the gate after the tool ran, ``tenant_id`` reached another tenant's data, a
3,000-deep argument raised a bare ``RecursionError``, deleted effect rows let a call run again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import json
import math
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Backend
from tether.core.budget import Budget
from tether.core.ledger import EffectStatus
from tether.core.principal import Principal
from tether.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    ConfigurationError,
    IntegrityError,
    InvalidArguments,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    RunStateError,
    StoreError,
    ToolFailed,
)
from tether.gate.pipeline import Gate, ToolCall
from tether.models import Message, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy.rules import Policy
from tether.runs.reconcile import reconcile_run
from tether.runs.recovery import recover
from tether.runs.runner import Runner
from tether.store import MemoryStore, SQLiteStore, Store
from tether.store.postgres import PostgresStore, split_url
from tether.tools.registry import Manifest, Registry, Risk

USER = Principal(subject="user-42", tenant="acme", scopes=frozenset({"w"}))
POLICY = Policy(version="p1", approvers=frozenset({"reviewer-5"}))


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


def counting(registry: Registry, **manifest: Any) -> Counter[str]:
    """A tool ``act(n)`` that counts how often it really ran, per call."""
    runs: Counter[str] = Counter()

    @registry.tool(**manifest)
    def act(n: int, operation_key: str) -> dict[str, Any]:
        """Do something once."""
        runs[operation_key] += 1
        return {"n": n}

    return runs


# -- one effect per call ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": "2"}, "tool version (1 -> 2)"),
        ({"description": "Do something once, now better."}, "tool schema"),
    ],
)
def test_a_call_replayed_after_the_tool_changed_never_runs_again(
    store: Store, change: dict[str, Any], named: str
) -> None:
    registry = Registry()
    runs = counting(registry)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="act", arguments={"n": 1})
    first = gate.call(run, call)
    # A deploy: the same tool under a new version or schema, in a new gate.
    old = registry.get("act")
    fields = {"name": "act", "parameters": old.manifest.parameters, **change}
    registry.replace(Manifest(**fields), old.handler)
    with pytest.raises(OperationConflict) as info:
        Gate(registry, POLICY, store).call(run, call)
    assert named in str(info.value)
    assert first.operation_key in str(info.value)
    assert sum(runs.values()) == 1
    assert [e.status for e in store.list_effects(run)] == [EffectStatus.COMMITTED]
    assert store.verify_audit().intact


def test_the_operation_key_keeps_its_seed_form(store: Store) -> None:
    registry = Registry()
    counting(registry, version="7")
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER, run_id="run-7")
    outcome = gate.call(run, ToolCall(call_id="call-9", tool="act", arguments={"n": 1}))
    assert outcome.operation_key == "run-7:call-9:act:7"


class Query(pydantic.BaseModel):
    tenant: str
    text: str


class Colour(enum.Enum):
    RED = "red"


class Ticket(pydantic.BaseModel):
    id: str
    closed_at: datetime.datetime


@dataclasses.dataclass
class Receipt:
    amount: int
    tags: set[str]


@pytest.mark.parametrize(
    ("value", "recorded"),
    [
        (
            Ticket(id="T-1", closed_at=datetime.datetime(2026, 12, 1, 9, 30)),
            {"id": "T-1", "closed_at": "2026-12-01T09:30:00"},
        ),
        (Receipt(3, {"a"}), {"amount": 3, "tags": ["a"]}),
        (datetime.date(2026, 12, 1), "2026-12-01"),
        (Colour.RED, "red"),
    ],
    ids=["pydantic", "dataclass", "date", "enum"],
)
def test_results_that_are_not_plain_json_are_recorded(
    store: Store, value: Any, recorded: Any
) -> None:
    registry = Registry()
    runs: Counter[str] = Counter()

    @registry.tool
    def fetch(operation_key: str) -> Any:
        """Return a rich value."""
        runs[operation_key] += 1
        return value

    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="fetch")
    outcome = gate.call(run, call)
    assert outcome.status is EffectStatus.COMMITTED
    assert outcome.result == recorded
    again = gate.call(run, call)
    assert again.replayed and again.result == recorded
    assert sum(runs.values()) == 1


def test_a_result_that_cannot_be_json_is_a_recorded_note_not_a_lost_outcome(store: Store) -> None:
    registry = Registry()
    runs: Counter[str] = Counter()

    @registry.tool
    def fetch(operation_key: str) -> Any:
        """Return something no JSON can hold."""
        runs[operation_key] += 1
        return {"weird": object(), "ratio": math.nan}

    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="fetch")
    outcome = gate.call(run, call)
    # The tool ran, so the effect is committed; what it said is kept as a note.
    assert outcome.status is EffectStatus.COMMITTED
    assert outcome.result["error"] == "result_not_json"
    assert any("could not be recorded as JSON" in f for f in outcome.flags)
    (effect,) = store.list_effects(run)
    assert effect.status is EffectStatus.COMMITTED
    assert effect.error is not None and "JSON" in effect.error
    retry = gate.call(run, call)
    assert retry.replayed and retry.result == outcome.result
    assert sum(runs.values()) == 1
    assert store.verify_audit().intact


def test_the_pin_covers_the_timeout_and_where_the_tenant_is() -> None:
    schema = {"type": "object", "properties": {"tenant": {"type": "string"}}}
    base = Manifest(name="t", parameters=schema, tenant_path="tenant")
    assert Manifest(name="t", parameters=schema, tenant_path="tenant", timeout_s=5) != base
    digests = {
        base.manifest_digest,
        Manifest(name="t", parameters=schema, tenant_path="tenant", timeout_s=5).manifest_digest,
        Manifest(name="t", parameters=schema, tenant_scoped=False).manifest_digest,
    }
    assert len(digests) == 3


# -- declared tenancy -------------------------------------------------------------------------
def test_a_tool_with_a_tenant_argument_must_say_where_the_tenant_is() -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError, match="tenant_id"):

        @registry.tool(risk=Risk.READ)
        def report(tenant_id: str) -> str:
            """Read a tenant's report."""
            return tenant_id

    with pytest.raises(ConfigurationError, match=r"query\.tenant"):

        @registry.tool(risk=Risk.READ)
        def search(query: Query) -> str:
            """Search a tenant's data."""
            return query.text

    with pytest.raises(ConfigurationError, match="not an argument"):
        Manifest(name="x", parameters={"type": "object"}, tenant_path="tenant")


def tenant_tools(registry: Registry, seen: list[str | None]) -> None:
    @registry.tool(risk=Risk.READ, tenant_path="tenant_id")
    def report(tenant_id: str = "globex") -> str:
        """Read a tenant's report; its default belongs to someone else."""
        seen.append(tenant_id)
        return f"report of {tenant_id}"

    @registry.tool(risk=Risk.READ, tenant_path="query.tenant")
    def search(query: dict[str, str]) -> str:
        """Search a tenant's data."""
        seen.append(query.get("tenant"))
        return "found"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("report", {"tenant_id": "globex"}),
        ("search", {"query": {"tenant": "globex", "text": "invoices"}}),
    ],
    ids=["tenant_id", "nested"],
)
def test_another_tenant_is_denied_wherever_the_manifest_puts_it(
    store: Store, tool: str, arguments: dict[str, Any]
) -> None:
    registry = Registry()
    seen: list[str | None] = []
    tenant_tools(registry, seen)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    with pytest.raises(PolicyDenied, match="globex"):
        gate.call(run, ToolCall(call_id="c1", tool=tool, arguments=arguments))
    assert seen == []
    assert store.list_effects(run) == []


def test_a_missing_tenant_is_the_principals_never_the_tools_default(store: Store) -> None:
    registry = Registry()
    seen: list[str | None] = []
    tenant_tools(registry, seen)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    assert gate.call(run, ToolCall(call_id="c1", tool="report")).result == "report of acme"
    gate.call(run, ToolCall(call_id="c2", tool="search", arguments={"query": {"text": "x"}}))
    assert seen == ["acme", "acme"]


# -- limits -----------------------------------------------------------------------------------
def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"n": nested(3000)}, "nested deeper than"),
        ({"n": {1: "x"}}, "is not a string"),
        ({"n": math.nan}, "not a finite number"),
        ({"n": -math.inf}, "not a finite number"),
        ({"n": {b"raw"}}, "not a JSON value"),
    ],
    ids=["deep", "int-key", "nan", "-inf", "set"],
)
def test_arguments_that_cannot_be_json_are_invalid_before_anything_walks_them(
    store: Store, arguments: dict[str, Any], problem: str
) -> None:
    registry = Registry()
    runs = counting(registry)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    with pytest.raises(InvalidArguments, match=problem):
        gate.call(run, ToolCall(call_id="c1", tool="act", arguments=arguments))
    assert not runs
    assert store.list_effects(run) == []
    assert store.verify_audit().intact


def test_minus_infinity_does_not_pass_an_upper_bound(store: Store) -> None:
    policy = Policy.from_toml(
        'version = "p"\napprovers = ["r"]\n'
        '[tools.pay]\nconstraints = [{ argument = "amount", op = "<=", value = 1000 }]'
    )
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def pay(amount: float) -> str:
        """Pay."""
        return "paid"

    gate = Gate(registry, policy, store)
    run = gate.start_run(USER)
    with pytest.raises(InvalidArguments):
        gate.call(run, ToolCall(call_id="c1", tool="pay", arguments={"amount": -math.inf}))


def test_a_run_whose_model_sends_absurd_arguments_carries_on(store: Store) -> None:
    registry = Registry()
    runs = counting(registry)
    model = ScriptedModel(
        [[ModelToolCall(id="c1", name="act", arguments={"n": nested(3000)})], "gave up"]
    )
    result = Runner(Gate(registry, POLICY, store), model).start("go", USER)
    assert result.status == "completed"
    assert not runs
    assert any(s.kind == "tool_error" and "nested deeper" in s.detail for s in result.steps)


class Broken:
    """A model with a bug in it (not a provider error)."""

    def complete(self, messages: Any, tools: Any) -> Message:
        raise KeyError("choices")


def test_a_bug_fails_the_run_with_its_reason_instead_of_wedging_it(store: Store) -> None:
    registry = Registry()
    counting(registry)
    runner = Runner(Gate(registry, POLICY, store), Broken())
    with pytest.raises(RunStateError, match="internal error") as info:
        runner.start("go", USER)
    (run,) = store.list_runs()
    assert run.status == "failed"
    with store.read() as tx:
        (step,) = tx.steps(run.run_id)
    assert "KeyError" in step.detail
    assert run.run_id in str(info.value)


def test_recover_passes_over_runs_driven_by_their_own_code(store: Store) -> None:
    registry = Registry()
    counting(registry)
    gate = Gate(registry, POLICY, store)
    bare = gate.start_run(USER)  # a library user's run: no conversation to resume
    gate.call(bare, ToolCall(call_id="c1", tool="act", arguments={"n": 1}))
    before = store.list_runs()
    report = recover(store, lambda: Runner(gate, ScriptedModel(["done"])))
    # Not resumed (its own code drives it); its effect was settled already: nothing to do.
    assert report.recovered == {} and report.settled_effects == {}
    assert store.list_runs() == before


def test_a_policy_that_asks_with_no_one_to_ask_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no approver"):
        Policy.from_toml('version = "p"\n[tiers]\nwrite = "ask"')
    registry = Registry()
    counting(registry, risk=Risk.IRREVERSIBLE)
    with pytest.raises(ConfigurationError, match="tool act"):
        Gate(registry, Policy(version="p"), SQLiteStore("sqlite:///:memory:"))


def test_a_tool_error_quoting_a_secret_is_stored_without_it(store: Store) -> None:
    registry = Registry()

    @registry.tool(risk=Risk.READ, sensitive_fields={"password"})
    def login(user: str, password: str) -> str:
        """Log in."""
        raise RuntimeError(f"login refused for {user} with password {password}")

    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="login", arguments={"user": "u", "password": "hunter2!x"})
    with pytest.raises(ToolFailed) as info:
        gate.call(run, call)
    assert "hunter2!x" not in str(info.value)
    (effect,) = store.list_effects(run)
    assert effect.error is not None and "hunter2!x" not in effect.error
    assert "login refused" in effect.error


def test_a_runs_steps_never_show_what_a_manifest_marks_sensitive(store: Store) -> None:
    registry = Registry()

    @registry.tool(risk=Risk.READ, sensitive_fields={"pin"})
    def unlock(door: str, pin: str) -> str:
        """Unlock a door."""
        return f"{door} open"

    @registry.tool(risk=Risk.READ, sensitive_fields={"pin"})
    def check(pin: int) -> str:
        """Check a PIN (it must be a number)."""
        return "ok"

    model = ScriptedModel(
        [
            [ModelToolCall(id="c1", name="unlock", arguments={"door": "d1", "pin": "7391-x"})],
            [ModelToolCall(id="c2", name="check", arguments={"pin": "8642-y"})],
            "done",
        ]
    )
    result = Runner(Gate(registry, POLICY, store), model).start("go", USER)
    assert result.status == "completed"
    shown = json.dumps([s.detail for s in result.steps])
    assert "d1" in shown  # the rest of the call is still there to read
    # Neither the value nor the schema error quoting it (it is not an integer) is shown.
    assert "7391-x" not in shown and "8642-y" not in shown
    tool_messages = [m.content for m in result.messages if m.role == "tool"]
    assert all("8642-y" not in text for text in tool_messages)


def test_a_full_disk_says_so(tmp_path: Any) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    registry = Registry()
    counting(registry)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match="full"):
        for i in range(3000):  # each refusal is a small (capped) entry: the pages run out
            with contextlib.suppress(InvalidArguments):
                gate.call(run, ToolCall(call_id=f"c{i}", tool="act", arguments={"n": "x" * 4000}))


# -- state edited behind tether's back (plain SQL, without the key) ----------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def sql_backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path)
    yield b
    b.close()


def sql(store: Store, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run SQL on the store's database the way someone with database access would."""
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            rows = conn.execute(statement, params).fetchall()
            conn.commit()
            return rows
    import psycopg

    assert isinstance(store, PostgresStore)
    conninfo, schema = split_url(store.url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(statement.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []


def test_a_call_whose_effect_row_was_deleted_is_not_run_again(sql_backend: Backend) -> None:
    store = sql_backend.store
    registry = Registry()
    runs = counting(registry)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="act", arguments={"n": 1})
    gate.call(run, call)
    sql(store, "DELETE FROM agent_effects WHERE call_id = ?", ("c1",))
    with pytest.raises(IntegrityError, match="ledger holds 0"):
        gate.call(run, call)
    with pytest.raises(IntegrityError):  # the run's other calls fail closed too
        gate.call(run, ToolCall(call_id="c2", tool="act", arguments={"n": 2}))
    assert sum(runs.values()) == 1


def test_an_approval_row_set_to_approved_by_hand_grants_nothing(sql_backend: Backend) -> None:
    store = sql_backend.store
    registry = Registry()
    runs = counting(registry, risk=Risk.WRITE)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    call = ToolCall(call_id="c1", tool="act", arguments={"n": 1})
    with pytest.raises(ApprovalRequired) as pending:
        gate.call(run, call)
    approval_id = pending.value.approval_id
    (text,) = sql(store, "SELECT record_json FROM approvals WHERE approval_id = ?", (approval_id,))[
        0
    ]
    forged = {**json.loads(text), "status": "approved", "approver": "reviewer-5"}
    forged.update(decision="approve", decided_at=forged["created_at"])
    sql(
        store,
        "UPDATE approvals SET status = 'approved', record_json = ? WHERE approval_id = ?",
        (json.dumps(forged), approval_id),
    )
    with pytest.raises(ApprovalInvalid, match="seal"):
        gate.call(run, call)
    assert not runs
    # Decided for real, it runs, once.
    sql(
        store,
        "UPDATE approvals SET status = 'pending', record_json = ? WHERE approval_id = ?",
        (text, approval_id),
    )
    gate.approve(approval_id, "reviewer-5")
    gate.call(run, call)
    assert sum(runs.values()) == 1


def test_widening_a_runs_principal_in_its_row_is_refused(sql_backend: Backend) -> None:
    store = sql_backend.store
    registry = Registry()
    runs = counting(registry, required_scope="admin")
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER)
    (text,) = sql(store, "SELECT checkpoint_json FROM agent_runs WHERE run_id = ?", (run,))[0]
    checkpoint = json.loads(text)
    checkpoint["principal"]["scopes"] = ["admin", "w"]
    sql(
        store,
        "UPDATE agent_runs SET checkpoint_json = ? WHERE run_id = ?",
        (json.dumps(checkpoint), run),
    )
    with pytest.raises(IntegrityError, match="seal"):
        gate.call(run, ToolCall(call_id="c1", tool="act", arguments={"n": 1}))
    assert not runs


def test_raising_a_runs_budget_limit_in_its_row_is_refused(sql_backend: Backend) -> None:
    store = sql_backend.store
    registry = Registry()
    counting(registry)
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(USER, budget=Budget(max_steps=1))
    (text,) = sql(store, "SELECT checkpoint_json FROM agent_runs WHERE run_id = ?", (run,))[0]
    checkpoint = json.loads(text)
    checkpoint["budget"]["max_steps"] = 1000
    sql(
        store,
        "UPDATE agent_runs SET checkpoint_json = ? WHERE run_id = ?",
        (json.dumps(checkpoint), run),
    )
    with pytest.raises(IntegrityError):
        gate.call(run, ToolCall(call_id="c1", tool="act", arguments={"n": 1}))


# -- a property: whatever happens around a call, it runs at most once -------------------------
class Crash(KeyboardInterrupt):
    """The process dying inside the tool: an interrupt, which the gate lets through with the
    effect left dispatched (a tool's own exit or other BaseException is a failed call)."""


operations = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.integers(0, 2)),
        st.tuples(st.just("crash_after"), st.integers(0, 2)),
        st.tuples(st.just("crash_before"), st.integers(0, 2)),
        st.tuples(st.sampled_from(["bump", "reschema", "recover"]), st.just(0)),
    ),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations, kind=st.sampled_from(["memory", "sqlite"]))
def test_version_bumps_replays_and_crashes_never_run_a_call_twice(
    ops: list[tuple[str, int]], kind: str
) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = MemoryStore() if kind == "memory" else SQLiteStore(f"sqlite:///{d}/t.db")
        ran: Counter[str] = Counter()  # call id -> executions, the outside world's witness
        applied: dict[str, str] = {}  # operation key -> call id, what reconcile can see
        crash: list[str] = []

        def act(n: int, operation_key: str) -> dict[str, int]:
            if crash == ["before"]:
                raise Crash
            call_id = operation_key.split(":")[1]
            ran[call_id] += 1
            applied[operation_key] = call_id
            if crash == ["after"]:
                raise Crash
            return {"n": n}

        def reconcile(operation_key: str) -> dict[str, int] | None:
            return {"n": 1} if operation_key in applied else None

        version, described = 1, "Act."

        def gate() -> Gate:
            registry = Registry()
            schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
            manifest = Manifest(
                name="act", parameters=schema, version=str(version), description=described
            )
            registry.add(manifest, act, reconcile=reconcile)
            return Gate(registry, POLICY, store)

        run = gate().start_run(USER)
        for op, i in ops:
            if op == "bump":
                version += 1
            elif op == "reschema":
                described += " Again."
            elif op == "recover":
                reconcile_run(gate(), run)
            else:
                crash[:] = {"call": [], "crash_after": ["after"], "crash_before": ["before"]}[op]
                call = ToolCall(call_id=f"c{i}", tool="act", arguments={"n": 1})
                with contextlib.suppress(Crash, OperationConflict, OutcomeUnknown):
                    gate().call(run, call)
            assert all(n <= 1 for n in ran.values()), (ops, ran)
        store.close()
