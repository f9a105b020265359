"""Fault injection against the gate, on every store: tools that fail, hang or are interrupted,
store writes that fail between the gate's two transactions, a locked database, listeners that
raise, and stale run state. Each test checks what the ledger and the audit log say afterwards,
and that a retry with the same call id never runs the tool a second time (I2, I3, I4, I6)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tether.core.approvals import Approval, ApprovalStatus
from tether.core.ledger import Effect, EffectStatus, operation_key
from tether.core.principal import Principal
from tether.errors import (
    InternalError,
    InvalidTransition,
    OperationConflict,
    OutcomeUnknown,
    StaleState,
    StoreError,
    ToolFailed,
)
from tether.evidence.audit import CHAINS, AuditEntry, AuditHead
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.store.base import Store, Tx
from tether.store.rows import RunRecord
from tether.store.sqlite import SQLiteStore
from tether.tools.registry import Manifest, Registry, Risk

PRINCIPAL = Principal(subject="agent-1", tenant="acme")
POLICY = Policy(version="policy-1")
TOOL = "act"
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


# -- fixtures and helpers ----------------------------------------------------------------------
@pytest.fixture
def store_url(backend: Backend) -> str:
    return backend.url


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/t.db"


class Handler:
    """A tool handler that counts its invocations and then does ``behaviour``."""

    def __init__(self, behaviour: Callable[[int], Any] = lambda n: {"n": n}) -> None:
        self.behaviour = behaviour
        self.keys: list[str] = []

    @property
    def calls(self) -> int:
        return len(self.keys)

    def __call__(self, n: int, operation_key: str) -> Any:
        self.keys.append(operation_key)
        return self.behaviour(n)


def make_gate(store: Store, handler: Handler, *, timeout_s: float | None = None) -> Gate:
    registry = Registry()
    manifest = Manifest(name=TOOL, parameters=SCHEMA, risk=Risk.READ, timeout_s=timeout_s)
    registry.add(manifest, handler)
    return Gate(registry, POLICY, store)


def key(run_id: str, call_id: str) -> str:
    return operation_key(run_id, call_id, TOOL, "1")


def the_effect(store: Store, run_id: str, call_id: str) -> Effect:
    found = [e for e in store.list_effects(run_id) if e.call_id == call_id]
    assert len(found) == 1, found
    return found[0]


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.audit_entries() if e.chain != CHAINS]


def assert_audit_intact(store: Store) -> None:
    report = store.verify_audit()
    assert report.intact, report.summary()
    heads = store.audit_heads()
    assert heads
    assert report.entries == sum(h.seq for h in heads.values()) == len(list(store.audit_entries()))


def version(store: Store, run_id: str) -> int:
    with store.read() as tx:
        record = tx.get_run(run_id)
    assert record is not None
    return record.state_version


def raise_(exc: BaseException) -> Callable[[int], Any]:
    def behaviour(n: int) -> Any:
        raise exc

    return behaviour


class FaultyStore(Store):
    """A real store whose Nth ``transaction()`` (counted from ``fail``) raises ``error``: at
    ``begin`` before the real transaction opens, or at ``commit`` after its body ran, inside the
    real transaction so the real store rolls it back."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.count = 0
        self.nth: int | None = None
        self.error: BaseException | None = None
        self.at = "begin"

    def fail(self, nth: int, error: BaseException, at: str) -> None:
        self.count, self.nth, self.error, self.at = 0, nth, error, at

    def heal(self) -> None:
        self.nth = self.error = None

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        self.count += 1
        failing = self.error if self.count == self.nth else None
        if failing is not None and self.at == "begin":
            raise failing
        with self.inner.transaction() as tx:
            yield tx
            if failing is not None:
                raise failing

    def read(self) -> Any:
        return self.inner.read()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what the contract adds later (its keys, say)

    def list_credentials(self) -> list[Any]:
        return self.inner.list_credentials()

    def list_notifications(self) -> list[Any]:
        return self.inner.list_notifications()

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        return self.inner.list_runs(status)

    def list_effects(self, run_id: str | None = None) -> list[Effect]:
        return self.inner.list_effects(run_id)

    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]:
        return self.inner.list_approvals(status, run_id)

    def audit_entries(self) -> Iterator[AuditEntry]:
        return self.inner.audit_entries()

    def audit_heads(self) -> dict[str, AuditHead]:
        return self.inner.audit_heads()

    def close(self) -> None:
        self.inner.close()


STORE_FAULTS = [
    pytest.param(lambda: StoreError("injected store failure"), id="StoreError"),
    pytest.param(lambda: sqlite3.OperationalError("database is locked"), id="locked"),
]
# A raw driver error injected around the store reaches the caller as a tether error.
STORE_ERRORS = (StoreError, InternalError)


@contextmanager
def write_lock(url: str) -> Iterator[sqlite3.Connection]:
    """Another connection holding the database's write lock until the block ends."""
    path = url[len("sqlite:///") :]
    with closing(sqlite3.connect(path, isolation_level=None, timeout=0)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield other
        finally:
            other.execute("ROLLBACK")


# -- tools that fail ---------------------------------------------------------------------------
def test_tool_that_raises_is_recorded_failed(store: Store) -> None:
    handler = Handler(raise_(ValueError("boom")))
    gate = make_gate(store, handler)
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(ToolFailed) as caught:
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    assert caught.value.operation_key == key(run_id, "c1")
    assert handler.keys == [key(run_id, "c1")]
    effect = the_effect(store, run_id, "c1")
    assert effect.status is EffectStatus.FAILED
    assert effect.error is not None
    assert "ValueError" in effect.error
    assert "boom" in effect.error
    assert effect.result_json is None
    assert_audit_intact(store)
    assert kinds(store) == ["run_started", "effect_dispatched", "tool_effect_resolved"]
    last = list(store.audit_entries())[-1].record
    assert last["data"]["effect_status"] == "failed"


def test_tool_raising_timeout_error_is_unknown(store: Store) -> None:
    handler = Handler(raise_(TimeoutError("upstream did not answer")))
    gate = make_gate(store, handler)
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(OutcomeUnknown) as caught:
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    assert caught.value.operation_key == key(run_id, "c1")
    effect = the_effect(store, run_id, "c1")
    assert effect.status is EffectStatus.UNKNOWN
    assert effect.result_json is None
    assert_audit_intact(store)
    assert list(store.audit_entries())[-1].record["data"]["effect_status"] == "unknown"


def test_tool_slower_than_its_timeout_is_unknown_not_failed(store: Store) -> None:
    def slow(n: int) -> Any:
        time.sleep(1.0)
        return {"n": n}

    handler = Handler(slow)
    gate = make_gate(store, handler, timeout_s=0.2)
    run_id = gate.start_run(PRINCIPAL)
    started = time.monotonic()
    with pytest.raises(OutcomeUnknown):
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    assert time.monotonic() - started < 0.9, "the gate waited for the tool past its timeout"
    effect = the_effect(store, run_id, "c1")
    assert effect.status is EffectStatus.UNKNOWN  # not FAILED: the tool may yet finish
    assert_audit_intact(store)
    # The retry does not start the tool again, even though the first run is still going.
    with pytest.raises(OutcomeUnknown):
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1").status is EffectStatus.UNKNOWN


@pytest.mark.parametrize(
    ("error", "signal", "status"),
    [
        pytest.param(ValueError("boom"), ToolFailed, EffectStatus.FAILED, id="failed"),
        pytest.param(TimeoutError("slow"), OutcomeUnknown, EffectStatus.UNKNOWN, id="unknown"),
    ],
)
def test_replaying_a_failed_or_unknown_effect_does_not_invoke_the_tool(
    store: Store, error: Exception, signal: type[Exception], status: EffectStatus
) -> None:
    handler = Handler(raise_(error))
    gate = make_gate(store, handler)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(signal):
        gate.call(run_id, call)
    recorded = the_effect(store, run_id, "c1")
    for _ in range(3):
        with pytest.raises(signal) as caught:
            gate.call(run_id, call)
        assert getattr(caught.value, "operation_key", None) == key(run_id, "c1")
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1") == recorded
    assert recorded.status is status
    assert kinds(store).count("effect_replayed") == 3
    assert_audit_intact(store)


def test_same_call_id_with_other_arguments_after_a_failure_is_a_conflict(store: Store) -> None:
    handler = Handler(raise_(ValueError("boom")))
    gate = make_gate(store, handler)
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(ToolFailed):
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    with pytest.raises(OperationConflict):
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 2}))
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1").status is EffectStatus.FAILED
    assert kinds(store)[-1] == "operation_conflict"
    assert_audit_intact(store)


def test_keyboard_interrupt_in_a_handler_leaves_the_effect_dispatched(store: Store) -> None:
    handler = Handler(raise_(KeyboardInterrupt()))
    gate = make_gate(store, handler)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(KeyboardInterrupt):
        gate.call(run_id, call)
    assert the_effect(store, run_id, "c1").status is EffectStatus.DISPATCHED
    assert_audit_intact(store)
    assert kinds(store) == ["run_started", "effect_dispatched"]
    # The store is still usable, and the interrupted call is never run a second time.
    with pytest.raises(OutcomeUnknown):
        gate.call(run_id, call)
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1").status is EffectStatus.DISPATCHED
    assert_audit_intact(store)


class Abort(BaseException):
    """A tool's own BaseException subclass (not an Exception)."""


@pytest.mark.parametrize("timeout_s", [None, 5.0], ids=["in the caller", "in the tool thread"])
@pytest.mark.parametrize("raised", [SystemExit(0), Abort("stop")], ids=["sys.exit(0)", "Abort"])
def test_a_tool_that_exits_or_raises_a_base_exception_fails_its_call(
    store: Store, raised: BaseException, timeout_s: float | None
) -> None:
    # The tool ran and ended the call its own way: recorded as failed (never left
    # dispatched, never escaping to end the process with the run left running).
    handler = Handler(raise_(raised))
    gate = make_gate(store, handler, timeout_s=timeout_s)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(ToolFailed):
        gate.call(run_id, call)
    assert the_effect(store, run_id, "c1").status is EffectStatus.FAILED
    with pytest.raises(ToolFailed):  # replayed from the ledger, not run again
        gate.call(run_id, call)
    assert handler.calls == 1
    assert_audit_intact(store)


# -- store writes that fail --------------------------------------------------------------------
@pytest.mark.parametrize("at", ["begin", "commit"])
@pytest.mark.parametrize("make_error", STORE_FAULTS)
def test_outcome_write_failure_leaves_the_effect_dispatched(
    store: Store, make_error: Callable[[], BaseException], at: str
) -> None:
    faulty = FaultyStore(store)
    handler = Handler()
    gate = make_gate(faulty, handler)
    run_id = gate.start_run(PRINCIPAL)
    faulty.fail(2, make_error(), at)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(STORE_ERRORS):
        gate.call(run_id, call)
    assert handler.calls == 1
    effect = the_effect(store, run_id, "c1")
    assert effect.status is EffectStatus.DISPATCHED
    assert effect.result_json is None
    assert kinds(store) == ["run_started", "effect_dispatched"]
    assert_audit_intact(store)
    faulty.heal()
    with pytest.raises(OutcomeUnknown):
        gate.call(run_id, call)
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1").status is EffectStatus.DISPATCHED
    assert_audit_intact(store)


@pytest.mark.parametrize("at", ["begin", "commit"])
def test_outcome_write_failure_after_a_tool_failure_still_never_reruns(
    store: Store, at: str
) -> None:
    faulty = FaultyStore(store)
    handler = Handler(raise_(ValueError("boom")))
    gate = make_gate(faulty, handler)
    run_id = gate.start_run(PRINCIPAL)
    faulty.fail(2, StoreError("injected"), at)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(StoreError):
        gate.call(run_id, call)
    assert the_effect(store, run_id, "c1").status is EffectStatus.DISPATCHED
    faulty.heal()
    with pytest.raises(OutcomeUnknown):
        gate.call(run_id, call)
    assert handler.calls == 1
    assert_audit_intact(store)


@pytest.mark.parametrize("at", ["begin", "commit"])
@pytest.mark.parametrize("make_error", STORE_FAULTS)
def test_admission_write_failure_leaves_nothing_and_runs_nothing(
    store: Store, make_error: Callable[[], BaseException], at: str
) -> None:
    faulty = FaultyStore(store)
    handler = Handler()
    gate = make_gate(faulty, handler)
    run_id = gate.start_run(PRINCIPAL)
    before_version, before_head = version(store, run_id), store.audit_heads()
    faulty.fail(1, make_error(), at)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
    with pytest.raises(STORE_ERRORS):
        gate.call(run_id, call)
    assert handler.calls == 0
    assert store.list_effects(run_id) == []
    assert store.audit_heads() == before_head
    assert kinds(store) == ["run_started"]
    assert version(store, run_id) == before_version
    assert gate.run_state(run_id).budget.steps == 0
    assert_audit_intact(store)
    # Once the store works again the same call id runs, exactly once.
    faulty.heal()
    outcome = gate.call(run_id, call)
    assert outcome.status is EffectStatus.COMMITTED
    assert not outcome.replayed
    assert handler.calls == 1
    assert the_effect(store, run_id, "c1").status is EffectStatus.COMMITTED
    assert_audit_intact(store)


def test_listener_that_raises_does_not_corrupt_the_store(store: Store) -> None:
    handler = Handler()
    gate = make_gate(store, handler)
    seen: list[dict[str, Any]] = []

    def bad_listener(event: dict[str, Any]) -> None:
        seen.append(event)
        raise RuntimeError("listener crashed")

    gate.subscribe(bad_listener)
    run_id = gate.start_run(PRINCIPAL)
    call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 7})
    try:
        gate.call(run_id, call)
    except RuntimeError as e:
        assert str(e) == "listener crashed"
    assert len(seen) == 1
    assert seen[0]["effect_status"] == "committed"
    effect = the_effect(store, run_id, "c1")
    assert effect.status is EffectStatus.COMMITTED
    assert effect.result_json == '{"n":7}'
    assert kinds(store) == ["run_started", "effect_dispatched", "tool_effect_resolved"]
    assert_audit_intact(store)
    replay = gate.call(run_id, call)
    assert replay.replayed
    assert replay.result == {"n": 7}
    assert handler.calls == 1
    assert_audit_intact(store)


# -- stale run state (I6) ----------------------------------------------------------------------
def test_update_run_with_a_stale_record_raises_stale_state(store: Store) -> None:
    gate = make_gate(store, Handler())
    run_id = gate.start_run(PRINCIPAL)
    with store.read() as tx:
        stale = tx.get_run(run_id)
    assert stale is not None
    gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    current = version(store, run_id)
    assert current > stale.state_version
    with pytest.raises(StaleState), store.transaction() as tx:
        tx.append_audit("probe", at=0.0, run_id=run_id)
        tx.update_run(replace(stale, status="hijacked"))
    assert version(store, run_id) == current
    assert [r.status for r in store.list_runs()] == ["running"]
    assert "probe" not in kinds(store)
    assert_audit_intact(store)


def test_second_writer_from_the_same_loaded_version_gets_stale_state(store: Store) -> None:
    gate = make_gate(store, Handler())
    run_id = gate.start_run(PRINCIPAL)
    with store.read() as tx:
        loaded = tx.get_run(run_id)
    assert loaded is not None
    with store.transaction() as tx:
        first = tx.update_run(replace(loaded, status="first"))
    assert first.state_version == loaded.state_version + 1
    with pytest.raises(StaleState), store.transaction() as tx:
        tx.update_run(replace(loaded, status="second"))
    with store.read() as tx:
        stored = tx.get_run(run_id)
    assert stored == first


def test_two_gates_on_the_same_store_run_a_call_once_and_detect_stale_state(
    backend: Backend, store: Store
) -> None:
    other: Store = backend.open()
    try:
        handler = Handler()
        gate_a, gate_b = make_gate(store, handler), make_gate(other, handler)
        run_id = gate_a.start_run(PRINCIPAL)
        with store.read() as tx:
            seen_by_a = tx.get_run(run_id)
        assert seen_by_a is not None
        call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
        assert not gate_b.call(run_id, call).replayed
        assert gate_a.call(run_id, call).replayed
        assert handler.calls == 1
        with pytest.raises(StaleState), store.transaction() as tx:
            tx.update_run(seen_by_a)
        assert version(other, run_id) == version(store, run_id) > seen_by_a.state_version
        assert_audit_intact(other)
    finally:
        if other is not store:
            other.close()


def test_effect_update_from_the_wrong_status_is_refused(store: Store) -> None:
    gate = make_gate(store, Handler(raise_(ValueError("boom"))))
    run_id = gate.start_run(PRINCIPAL)
    with pytest.raises(ToolFailed):
        gate.call(run_id, ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1}))
    failed = the_effect(store, run_id, "c1")
    forged = replace(failed, status=EffectStatus.COMMITTED, result_json='{"n":1}')
    with pytest.raises(InvalidTransition), store.transaction() as tx:
        tx.update_effect(forged, EffectStatus.DISPATCHED)
    with pytest.raises(InvalidTransition):
        failed.advance(EffectStatus.COMMITTED, 1.0)
    assert the_effect(store, run_id, "c1") == failed


# -- a real second SQLite connection holding the write lock -----------------------------------
def test_locked_database_at_admission_raises_store_error_and_writes_nothing(
    sqlite_url: str,
) -> None:
    with SQLiteStore(sqlite_url, busy_timeout_s=0.2) as store:
        handler = Handler()
        gate = make_gate(store, handler)
        run_id = gate.start_run(PRINCIPAL)
        before_version, before_head = version(store, run_id), store.audit_heads()
        call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
        with write_lock(sqlite_url):
            started = time.monotonic()
            with pytest.raises(StoreError):
                gate.call(run_id, call)
            assert time.monotonic() - started < 5.0
        assert handler.calls == 0
        assert store.list_effects(run_id) == []
        assert store.audit_heads() == before_head
        assert version(store, run_id) == before_version
        assert_audit_intact(store)
        assert gate.call(run_id, call).status is EffectStatus.COMMITTED
        assert handler.calls == 1


def test_locked_database_at_outcome_leaves_dispatched_durably(sqlite_url: str) -> None:
    held: list[sqlite3.Connection] = []
    path = sqlite_url[len("sqlite:///") :]

    def grab_lock(n: int) -> Any:
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")
        held.append(other)
        return {"n": n}

    handler = Handler(grab_lock)
    store = SQLiteStore(sqlite_url, busy_timeout_s=0.2)
    try:
        gate = make_gate(store, handler)
        run_id = gate.start_run(PRINCIPAL)
        call = ToolCall(call_id="c1", tool=TOOL, arguments={"n": 1})
        with pytest.raises(StoreError):
            gate.call(run_id, call)
        assert len(held) == 1
    finally:
        for other in held:
            other.execute("ROLLBACK")
            other.close()
    try:
        assert the_effect(store, run_id, "c1").status is EffectStatus.DISPATCHED
        assert kinds(store) == ["run_started", "effect_dispatched"]
        assert_audit_intact(store)
        with pytest.raises(OutcomeUnknown):
            gate.call(run_id, call)
        assert handler.calls == 1
    finally:
        store.close()
    # What a restarted worker sees: the dispatched row is on disk, so the crash is visible.
    with SQLiteStore(sqlite_url) as reopened:
        assert the_effect(reopened, run_id, "c1").status is EffectStatus.DISPATCHED
        assert_audit_intact(reopened)


def test_opening_a_store_while_another_connection_writes_raises_store_error(
    sqlite_url: str,
) -> None:
    SQLiteStore(sqlite_url).close()
    with write_lock(sqlite_url), pytest.raises(StoreError):
        SQLiteStore(sqlite_url, busy_timeout_s=0.2)
    with SQLiteStore(sqlite_url) as store:
        assert store.verify_audit().intact
