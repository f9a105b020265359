"""Every row that grants or limits is sealed, and a missing seal is a refusal (issue 19).

Each test edits the database with plain SQL, as someone who can write it but does not hold
the audit key would, on SQLite and PostgreSQL, and checks both halves of the promise: the
edited row decides nothing where tether uses it, and ``audit verify`` names it. The property
test at the end tries many such edits at random and asks that none is silent everywhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.audit.tamper import Opened, Raw
from tests.audit.test_evidence import REVIEWER, USER, make_gate, populate
from tests.pg import schema_url
from tether.errors import (
    ApprovalInvalid,
    ApprovalRequired,
    CredentialRefused,
    IntegrityError,
    RunStateError,
)
from tether.gate.desk import decide_approval
from tether.gate.pipeline import Gate, ToolCall
from tether.identity import add_identity, authenticate, revoke_identity, token_hash
from tether.runs.cancel import cancel_run
from tether.store import Store, open_store


def named_by_verify(store: Store) -> str:
    report = store.verify_audit()
    assert not report.intact, "audit verify called an edited store intact"
    return report.problem or ""


def approver(store: Store, name: str = REVIEWER, tenant: str = "acme") -> tuple[str, str]:
    identity, token = add_identity(store, name, "approver", now=time.time(), tenants=[tenant])
    assert identity.credential_id is not None
    return identity.credential_id, token


# -- credential rows ------------------------------------------------------------------------
def test_a_credential_row_inserted_with_sql_decides_nothing(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    approver(store)  # a real row to copy the seal of: another row's seal does not fit
    forged_id = "cred-" + "f" * 16
    token = f"tth_{forged_id}_{'s' * 43}"
    raw.run(
        "INSERT INTO credentials (credential_id, name, kind, token_hash, record_json, "
        "created_at, revoked_at, seal) SELECT ?, 'boss', 'approver', ?, record_json, "
        "created_at, NULL, seal FROM credentials",
        (forged_id, token_hash(token)),
    )
    with pytest.raises(CredentialRefused, match="not as tether wrote it"):
        authenticate(store, token, "approver")
    assert f"credential {forged_id}" in named_by_verify(store)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("name", "boss"),
        ("record_json", '{"any_tenant":false,"scopes":[],"tenants":["acme","globex"]}'),
        ("kind", "admin"),
    ],
)
def test_a_credential_edited_with_sql_decides_nothing(
    sql_store: Opened, column: str, value: str
) -> None:
    store, raw = sql_store.store, sql_store.raw
    credential_id, token = approver(store)
    raw.run(f"UPDATE credentials SET {column} = ? WHERE credential_id = ?", (value, credential_id))
    with pytest.raises(CredentialRefused, match="not as tether wrote it"):
        authenticate(store, token)
    assert f"credential {credential_id}" in named_by_verify(store)


def test_a_revoked_credential_revived_with_sql_decides_nothing(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    credential_id, token = approver(store)
    revoke_identity(store, credential_id, "approver", now=time.time())
    raw.run("UPDATE credentials SET revoked_at = NULL")
    with pytest.raises(CredentialRefused):
        authenticate(store, token, "approver")
    (pending,) = [a for a in store.list_approvals() if a.status.value == "pending"]
    held = _registered(store, credential_id)
    with pytest.raises(CredentialRefused):
        decide_approval(store, pending.approval_id, held, approve=True, now=1_000_100.0)
    assert f"credential {credential_id}" in named_by_verify(store)


def _registered(store: Store, credential_id: str) -> Any:
    """The identity a credential row names, as an entrance that authenticated it earlier
    (before the row was edited) would hold it: decisions re-read the row."""
    from tether.identity import identity_of

    record = store.list_credentials()
    (found,) = [r for r in record if r.credential_id == credential_id]
    return identity_of(found)


def test_a_principal_credential_inserted_with_sql_starts_nothing(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    identity, token = add_identity(
        store, "agent", "principal", now=time.time(), tenants=["globex"], scopes=["tickets"]
    )
    raw.run(
        "UPDATE credentials SET record_json = ? WHERE credential_id = ?",
        ('{"any_tenant":false,"scopes":["*"],"tenants":["acme"]}', identity.credential_id),
    )
    with pytest.raises(CredentialRefused):
        authenticate(store, token, "principal")
    named_by_verify(store)


# -- run rows -------------------------------------------------------------------------------
def started(store: Store) -> tuple[Gate, str]:
    gate = make_gate(store)
    run_id = gate.start_run(USER)
    gate.call(run_id, ToolCall(call_id="c1", tool="lookup", arguments={"q": "T-1"}))
    return gate, run_id


def edit_checkpoint(raw: Raw, run_id: str, change: Any) -> None:
    (text,) = raw.run("SELECT checkpoint_json FROM agent_runs WHERE run_id = ?", (run_id,))[0]
    data = json.loads(text)
    change(data)
    raw.run(
        "UPDATE agent_runs SET checkpoint_json = ? WHERE run_id = ?", (json.dumps(data), run_id)
    )


def refused_call(gate: Gate, run_id: str, call_id: str = "c9") -> Exception:
    with pytest.raises((IntegrityError, RunStateError)) as refused:
        gate.call(run_id, ToolCall(call_id=call_id, tool="lookup", arguments={"q": "T-2"}))
    return refused.value


def test_an_effect_deleted_with_its_counter_lowered_is_not_run_again(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    gate, run_id = started(store)
    raw.run("DELETE FROM agent_effects WHERE run_id = ?", (run_id,))
    edit_checkpoint(raw, run_id, lambda d: d.update(effects=0))
    with pytest.raises(IntegrityError, match="counters"):
        gate.call(run_id, ToolCall(call_id="c1", tool="lookup", arguments={"q": "T-1"}))
    assert run_id in named_by_verify(store)


def test_an_effect_deleted_behind_the_count_is_not_run_again(sql_store: Opened) -> None:
    """No trigger keeps the count any more: the gate counts the rows, so dropping a
    trigger first changes nothing."""
    store, raw = sql_store.store, sql_store.raw
    gate, run_id = started(store)
    raw.run("DELETE FROM agent_effects WHERE run_id = ?", (run_id,))
    with pytest.raises(IntegrityError, match="ledger holds 0"):
        gate.call(run_id, ToolCall(call_id="c1", tool="lookup", arguments={"q": "T-1"}))
    assert "gone from the store" in named_by_verify(store)


def test_a_step_counter_reset_with_sql_buys_no_steps(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    gate, run_id = started(store)
    edit_checkpoint(raw, run_id, lambda d: d["budget"].update(steps=0))
    assert "counters" in str(refused_call(gate, run_id))
    assert "counters" in named_by_verify(store)


def test_a_cancelled_run_set_running_with_sql_dispatches_nothing(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    gate, run_id = started(store)
    cancel_run(store, run_id, actor="operator")
    raw.run("UPDATE agent_runs SET status = 'running' WHERE run_id = ?", (run_id,))
    assert "cancelled" in str(refused_call(gate, run_id))
    assert "was cancelled" in named_by_verify(store)


def test_a_run_without_its_principal_seal_is_refused(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    gate, run_id = started(store)
    edit_checkpoint(
        raw, run_id, lambda d: (d.pop("principal_seal"), d["principal"].update(tenant="globex"))
    )
    assert "no principal seal" in str(refused_call(gate, run_id))
    assert "no principal seal" in named_by_verify(store)


def test_a_run_row_moved_to_another_tenant_is_named(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    _, run_id = started(store)
    raw.run("UPDATE agent_runs SET tenant_id = 'globex' WHERE run_id = ?", (run_id,))
    assert "tenant globex" in named_by_verify(store)


# -- approval rows --------------------------------------------------------------------------
def test_a_name_added_to_a_pending_approval_decides_nothing(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    gate = make_gate(store)
    run_id = gate.start_run(USER)
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(run_id, ToolCall(call_id="c1", tool="transfer", arguments={"amount": 5}))
    approval_id = asked.value.approval_id
    (text,) = raw.run("SELECT record_json FROM approvals WHERE approval_id = ?", (approval_id,))[0]
    record = json.loads(text)
    record["approvers"] = [*record["approvers"], "mallory"]
    raw.run(
        "UPDATE approvals SET record_json = ? WHERE approval_id = ?",
        (json.dumps(record, sort_keys=True, separators=(",", ":")), approval_id),
    )
    approver(store, "mallory")
    with pytest.raises(ApprovalInvalid, match="not as tether made it"):
        decide_approval(store, approval_id, "mallory", approve=True, now=time.time())
    assert f"approval {approval_id}" in named_by_verify(store)


# -- the property: no edit is silent everywhere ---------------------------------------------
# Each edit is (table, what, pick): pick chooses the row among those the table holds.
TABLES = {
    "credentials": ("credential_id", ["name", "kind", "record_json", "revoked_at", "seal"]),
    "agent_runs": ("run_id", ["checkpoint_json", "principal_id", "tenant_id"]),
    "approvals": ("approval_id", ["record_json", "status", "expires_at"]),
    "agent_effects": ("operation_key", ["status", "result_json", "argument_digest", "attempts"]),
}
edits = st.tuples(
    st.sampled_from(sorted(TABLES)),
    st.sampled_from(["edit", "insert", "delete"]),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=50),
)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fresh(backend: str, folder: Any) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{folder}/t-{time.monotonic_ns()}.db"
    else:
        yield from schema_url()


def mutate(raw: Raw, table: str, what: str, pick: int, column_pick: int) -> bool:
    """Apply one edit; False if the table had no row to edit."""
    key, columns = TABLES[table]
    rows = raw.run(f"SELECT {key} FROM {table} ORDER BY {key}")
    if not rows:
        return False
    (row_key,) = rows[pick % len(rows)]
    if what == "delete":
        raw.run(f"DELETE FROM {table} WHERE {key} = ?", (row_key,))
        return True
    if what == "insert":
        names = raw.columns(table)
        chosen = ", ".join(f"'{row_key}-copy'" if n == key else n for n in names)
        # Token hashes are unique, and so is an effect's call: the copy needs its own.
        for unique in ("token_hash", "call_id"):
            chosen = chosen.replace(unique, f"{unique} || '-copy'")
        raw.run(
            f"INSERT INTO {table} ({', '.join(names)}) SELECT {chosen} FROM {table} "
            f"WHERE {key} = ?",
            (row_key,),
        )
        return True
    column = columns[column_pick % len(columns)]
    (value,) = raw.run(f"SELECT {column} FROM {table} WHERE {key} = ?", (row_key,))[0]
    raw.run(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (_changed(value), row_key))
    return True


def _changed(value: Any) -> Any:
    """A different value of the same kind, as an attacker would write."""
    if value is None:
        return 1.0
    if isinstance(value, (int, float)):
        return value + 1
    text = str(value)
    if text.startswith("{"):
        data = json.loads(text)
        data["tenant"] = "globex"
        if "principal" in data:
            data["principal"]["tenant"] = "globex"
        if "approvers" in data:
            data["approvers"] = [*data["approvers"], "mallory"]
        return json.dumps(data)
    return text + "x"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(change=edits)
def test_no_sql_edit_of_a_row_that_grants_or_limits_is_silent(
    backend: str, tmp_path_factory: pytest.TempPathFactory, change: tuple[str, str, int, int]
) -> None:
    table, what, pick, column_pick = change
    urls = fresh(backend, tmp_path_factory.mktemp("p"))
    url = next(urls)
    store = open_store(url)
    raw = Raw(url)
    try:
        populate(store)
        approver(store, "auditor-1")
        add_identity(store, "agent", "principal", now=time.time(), tenants=["acme"])
        assert store.verify_audit().intact
        if not mutate(raw, table, what, pick, column_pick):
            return
        # Every such edit is named by verify; the tests above show where each is refused.
        named_by_verify(store)
    finally:
        raw.close()
        store.close()
        for _ in urls:
            pass
