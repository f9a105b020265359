from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store_contract import StoreContract, run_record
from tether.errors import ConfigurationError, StoreError
from tether.store import SQLiteStore, Store, open_store
from tether.store.sqlite import MIGRATIONS


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        s = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
        yield s
        s.close()


def test_wal_and_full_sync_by_default(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    normal = SQLiteStore(f"sqlite:///{tmp_path}/n.db?synchronous=normal")
    assert normal._conn.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_migrations_recorded_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    SQLiteStore(url).close()
    store = SQLiteStore(url)  # reopening applies nothing twice
    rows = store._conn.execute("SELECT version FROM schema_migrations").fetchall()
    assert [r[0] for r in rows] == list(range(1, len(MIGRATIONS) + 1))
    assert store.schema_version == len(MIGRATIONS)


def test_newer_schema_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    SQLiteStore(url).close()
    c = sqlite3.connect(tmp_path / "t.db")
    c.execute("INSERT INTO schema_migrations VALUES (99, 0)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="newer than this tether"):
        SQLiteStore(url)


def test_seed_tables_have_seed_columns(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    runs = {r[1] for r in store._conn.execute("PRAGMA table_info(agent_runs)")}
    effects = {r[1] for r in store._conn.execute("PRAGMA table_info(agent_effects)")}
    assert set(run_record().to_dict()) <= runs
    assert {
        "operation_key",
        "run_id",
        "call_id",
        "tool_name",
        "tool_version",
        "argument_digest",
        "status",
        "result_digest",
        "external_reference",
    } <= effects


def test_data_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with SQLiteStore(url) as store, store.transaction() as tx:
        tx.insert_run(run_record())
        tx.append_audit("run_started", at=1.0, run_id="run-1")
    with SQLiteStore(url) as again:
        assert [r.run_id for r in again.list_runs()] == ["run-1"]
        assert again.verify_audit().intact


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("memory://", "MemoryStore"),
        ("sqlite:///x.db", "SQLiteStore"),
    ],
)
def test_open_store_by_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, kind: str):
    monkeypatch.chdir(tmp_path)
    assert type(open_store(url)).__name__ == kind


def test_open_store_rejects_unknown_url() -> None:
    with pytest.raises(ConfigurationError, match="no store for URL"):
        open_store("mysql://nowhere")


def test_sqlite_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    SQLiteStore("sqlite:///rel.db").close()
    SQLiteStore(f"sqlite:///{tmp_path}/abs.db").close()
    assert (tmp_path / "rel.db").exists() and (tmp_path / "abs.db").exists()
    with pytest.raises(ConfigurationError, match="synchronous"):
        SQLiteStore("sqlite:///rel.db?synchronous=sometimes")
