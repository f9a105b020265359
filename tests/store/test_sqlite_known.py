"""What a SQLite store takes as known between its own transactions (``tether.store.sqlite.
Known``): the audit head and each run's effect count, kept only while no other connection
has committed to the file. Each test watches the statements the store sends, so a cache that
outlived another writer, or a count that was never skipped, fails here."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether import Gate, Policy, Principal, Registry, ToolCall
from tether.errors import IntegrityError
from tether.store import SQLiteStore
from tether.store import known as known_module

USER = Principal(subject="user-1", tenant="acme", scopes=frozenset())


def registry(ran: list[str] | None = None) -> Registry:
    """A tool ``lookup(q)``, which appends each ``q`` it runs for to ``ran``."""
    tools = Registry()

    @tools.tool()
    def lookup(q: str) -> dict[str, str]:
        """Look something up."""
        if ran is not None:
            ran.append(q)
        return {"q": q}

    return tools


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(f"sqlite:///{tmp_path}/t.db?synchronous=normal")
    yield s
    s.close()


def call(n: int) -> ToolCall:
    return ToolCall(call_id=f"c{n}", tool="lookup", arguments={"q": f"T-{n}"})


def sent(store: SQLiteStore, gate: Gate, run_id: str, n: int) -> list[str]:
    """The statements one call sends, lower-cased."""
    statements: list[str] = []
    store._conn.set_trace_callback(lambda s: statements.append(s.lower()))
    try:
        gate.call(run_id, call(n))
    finally:
        store._conn.set_trace_callback(None)
    return statements


def counts(statements: list[str]) -> int:
    return sum("count(*)" in s for s in statements)


def head_reads(statements: list[str]) -> int:
    return sum("from audit_head" in s for s in statements)


def outside(store: SQLiteStore, statement: str, params: tuple[str, ...] = ()) -> None:
    """A commit by another connection, as anyone with the file could make."""
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        conn.execute(statement, params)
        conn.commit()


def test_a_lone_writer_counts_and_reads_the_head_once(store: SQLiteStore) -> None:
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    first = sent(store, gate, run_id, 1)
    assert counts(first) == 1
    for n in range(2, 6):
        later = sent(store, gate, run_id, n)
        assert counts(later) == 0 and head_reads(later) == 0, later
    with store.read() as tx:
        assert tx.count_effects(run_id) == 5  # what was skipped is what is there
    assert store.verify_audit().intact


def test_another_connections_commit_makes_the_next_call_count_again(store: SQLiteStore) -> None:
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    sent(store, gate, run_id, 1)
    outside(store, "INSERT INTO tether_meta (key, value) VALUES ('note', 'x')")
    again = sent(store, gate, run_id, 2)
    assert counts(again) == 1 and head_reads(again) >= 1
    sent(store, gate, run_id, 3)  # the file quiet since: known again, from what it reads
    quiet = sent(store, gate, run_id, 4)
    assert counts(quiet) == 0 and head_reads(quiet) == 0


def test_a_file_another_process_keeps_writing_is_never_schema_checked(
    store: SQLiteStore,
) -> None:
    """Between each pair of the store's transactions another connection commits: knowing
    would never outlast one transaction, so the schema is not re-parsed to know it."""
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    statements: list[str] = []
    for n in range(1, 4):
        outside(store, "INSERT OR REPLACE INTO tether_meta (key, value) VALUES ('n', ?)", (str(n),))
        store._conn.set_trace_callback(statements.append)
        try:
            with store.transaction() as tx:
                tx.count_effects(run_id)
        finally:
            store._conn.set_trace_callback(None)
    assert not any("writable_schema" in s.lower() for s in statements), statements
    assert sum("count(*)" in s for s in statements) == 3  # and it counted every time


def test_an_effect_deleted_while_the_store_is_open_is_still_caught(store: SQLiteStore) -> None:
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    for n in range(1, 4):
        gate.call(run_id, call(n))
    outside(store, "DELETE FROM agent_effects WHERE call_id = ?", ("c2",))
    with pytest.raises(IntegrityError, match="ledger holds 2"):
        gate.call(run_id, call(2))


def test_a_transaction_that_fails_leaves_nothing_known(store: SQLiteStore) -> None:
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    sent(store, gate, run_id, 1)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.count_effects(run_id)
        raise RuntimeError("abandoned")
    assert counts(sent(store, gate, run_id, 2)) == 1


def test_two_stores_on_one_file_keep_one_chain(tmp_path: Path) -> None:
    """Each store's commits move the other's data_version: alternating calls never link an
    entry to a head the other has moved past (that would fork the chain or reuse a seq)."""
    url = f"sqlite:///{tmp_path}/t.db?synchronous=normal"
    a, b = SQLiteStore(url), SQLiteStore(url)
    try:
        gate_a = Gate(registry(), Policy(version="p1"), a)
        gate_b = Gate(registry(), Policy(version="p1"), b)
        run_id = gate_a.start_run(USER)
        for n in range(1, 9):
            (gate_a if n % 2 else gate_b).call(run_id, call(n))
        assert a.verify_audit().intact and b.verify_audit().intact
        with a.read() as tx:
            assert tx.count_effects(run_id) == 8
    finally:
        a.close()
        b.close()


def test_the_counts_kept_are_bounded(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(known_module, "KNOWN_RUNS_MAX", 3)
    gate = Gate(registry(), Policy(version="p1"), store)
    runs = [gate.start_run(USER) for _ in range(5)]
    for run_id in runs:
        gate.call(run_id, call(1))
    assert store._knowledge.known is not None and len(store._knowledge.known.counts) <= 3
    for run_id in runs:  # a forgotten run is counted again and judged as before
        gate.call(run_id, call(2))
    with store.read() as tx:
        assert [tx.count_effects(r) for r in runs] == [2] * 5


def plant_trigger(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TRIGGER evil AFTER INSERT ON agent_effects WHEN NEW.call_id = 'c2' "
        "BEGIN DELETE FROM agent_effects WHERE call_id = 'c1'; END"
    )


def rebuild_with_replace(conn: sqlite3.Connection) -> None:
    """agent_effects again, with a constraint whose REPLACE deletes c1's row when tether's
    own UPDATE settles c2 (both 'committed' in one run): no trigger, no view."""
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'agent_effects'").fetchone()
    rebuilt = sql.rstrip().rstrip(")") + ", UNIQUE (run_id, status) ON CONFLICT REPLACE)"
    indexes = [
        r[0]
        for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'agent_effects' "
            "AND sql IS NOT NULL"
        )
    ]
    conn.execute(rebuilt.replace("agent_effects", "agent_effects_new", 1))
    conn.execute("INSERT INTO agent_effects_new SELECT * FROM agent_effects")
    conn.execute("DROP TABLE agent_effects")
    conn.execute("ALTER TABLE agent_effects_new RENAME TO agent_effects")
    for statement in indexes:
        conn.execute(statement)


@pytest.mark.parametrize("change", [plant_trigger, rebuild_with_replace])
def test_a_schema_that_deletes_inside_tethers_own_writes_is_still_caught(
    store: SQLiteStore, change: Callable[[sqlite3.Connection], None]
) -> None:
    """One outside commit changes the schema; every deletion after it happens inside the
    store's own statements, which never move data_version. A store whose schema is not
    tether's own knows nothing, and counts at every call."""
    ran: list[str] = []
    gate = Gate(registry(ran), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    gate.call(run_id, call(1))
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        change(conn)
        conn.commit()
    gate.call(run_id, call(2))
    assert store._knowledge.known is None
    with pytest.raises(IntegrityError, match="ledger holds 1"):
        gate.call(run_id, call(1))
    assert ran == ["T-1", "T-2"]


def test_a_store_with_only_tethers_own_triggers_knows(store: SQLiteStore) -> None:
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    gate.call(run_id, call(1))
    assert store._knowledge.known is not None and store._knowledge.known.counts == {run_id: 1}


def hide_by_writable_schema(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("DELETE FROM sqlite_master WHERE name = 'evil'")
    conn.execute("PRAGMA writable_schema = OFF")


def hide_by_cookie(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("DROP TRIGGER evil")
    conn.commit()
    conn.execute(f"PRAGMA schema_version = {version}")


@pytest.mark.parametrize("hide", [hide_by_writable_schema, hide_by_cookie])
def test_a_trigger_the_store_parsed_is_not_forgotten_when_its_text_is_hidden(
    store: SQLiteStore, hide: Callable[[sqlite3.Connection], None]
) -> None:
    """The trigger is planted, parsed by the store at its next call, then its text taken out
    of sqlite_master without the schema cookie moving: the text reads clean while the
    connection would still run the trigger. The store re-parses before it compares."""
    ran: list[str] = []
    gate = Gate(registry(ran), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    gate.call(run_id, call(1))
    outside(
        store,
        "CREATE TRIGGER evil AFTER INSERT ON agent_effects WHEN NEW.call_id = 'c3' "
        "BEGIN DELETE FROM agent_effects WHERE call_id = 'c1'; END",
    )
    gate.call(run_id, call(2))  # parses the schema, trigger and all
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as conn:
        hide(conn)
    gate.call(run_id, call(3))
    with store.read() as tx:
        deleted = tx.count_effects(run_id) == 2
    if deleted:  # the trigger ran: the count must not believe otherwise
        with pytest.raises(IntegrityError, match="ledger holds 2"):
            gate.call(run_id, call(1))
    assert ran == ["T-1", "T-2", "T-3"]


def test_a_foreign_schema_is_checked_once_per_cookie(store: SQLiteStore) -> None:
    """An index of the user's own makes the schema foreign: the store knows nothing, and
    does not re-parse the schema at every transaction to find that out again."""
    gate = Gate(registry(), Policy(version="p1"), store)
    run_id = gate.start_run(USER)
    outside(store, "CREATE INDEX mine ON agent_runs (created_at)")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        for n in range(1, 5):
            gate.call(run_id, call(n))
    finally:
        store._conn.set_trace_callback(None)
    assert sum("writable_schema" in s.lower() for s in statements) == 1
    assert sum("count(*)" in s for s in statements) == 4
    assert store._knowledge.known is None
