from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.store.store_contract import StoreContract, run_record
from tether.errors import ConfigurationError, ReadOnlyStore, StoreError, StoreMissing
from tether.store import SQLiteStore, Store, migrations, open_store
from tether.store.sqlite import MIGRATIONS, SQLITE
from tether.store.urls import sqlite_url, store_kind


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
        tx.insert_run(run_record(keys=store.keys))
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
def test_open_store_by_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, kind: str
) -> None:
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


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        # One slash: a path that would make a folder named "sqlite:".
        ("sqlite:{dir}/x.db", "an absolute path takes four slashes, sqlite:///{dir}/x.db"),
        ("sqlite:x.db", "write sqlite:///x.db for a path relative to the working directory"),
        ("sqlite://x.db", "is ambiguous: write sqlite:////x.db for /x.db, or sqlite:///x.db"),
    ],
)
def test_malformed_sqlite_urls_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, advice: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as refused:
        open_store(url.format(dir=tmp_path))
    assert advice.format(dir=tmp_path) in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_create_false_refuses_a_missing_file_and_makes_no_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nope/x.db"
    for options in ({"create": False}, {"read_only": True}):
        with pytest.raises(StoreMissing, match=f"no tether store at {tmp_path}/nope/x.db"):
            open_store(url, **options)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(StoreMissing, match="not a tether store"):
        open_store(f"sqlite:///{tmp_path}/empty.db", create=False)
    SQLiteStore(f"sqlite:///{tmp_path}/made.db").close()  # an existing store opens fine
    open_store(f"sqlite:///{tmp_path}/made.db", create=False).close()


def test_read_only_writes_nothing_and_refuses_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with SQLiteStore(url) as store, store.transaction() as tx:
        tx.insert_run(run_record(keys=store.keys))
        tx.append_audit("run_started", at=1.0, run_id="run-1")
    before = (tmp_path / "t.db").read_bytes()
    with SQLiteStore(url, read_only=True) as reader:
        assert reader.verify_audit().intact
        assert [r.run_id for r in reader.list_runs()] == ["run-1"]
        with pytest.raises(ReadOnlyStore), reader.transaction():
            pass
        with pytest.raises(ReadOnlyStore):
            reader.migrate()
    assert (tmp_path / "t.db").read_bytes() == before


def test_read_only_refuses_a_file_that_needs_migrating(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    SQLiteStore(url).close()
    c = sqlite3.connect(tmp_path / "t.db")
    c.execute("DELETE FROM schema_migrations WHERE version = ?", (len(MIGRATIONS),))
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="tether migrate"):
        SQLiteStore(url, read_only=True)


@pytest.mark.parametrize("applied", range(1, len(MIGRATIONS)))
def test_a_store_at_any_older_version_is_brought_up_to_date(tmp_path: Path, applied: int) -> None:
    # A file as an older tether left it: the first `applied` migrations, through the runner.
    c = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    old = replace(SQLITE, migrations=MIGRATIONS[:applied])
    assert migrations.migrate(lambda sql, p: c.execute(sql, p or ()), old, "t.db") == applied
    c.execute(
        "INSERT INTO agent_effects (operation_key, run_id, call_id, tool_name, tool_version,"
        " argument_digest, status, created_at, updated_at) VALUES ('k', 'r', 'c', 't', '1',"
        " 'd', 'committed', 1, 1)"
    )
    c.close()
    with pytest.raises(StoreError, match=rf"schema version {applied}, older.*tether migrate"):
        SQLiteStore(f"sqlite:///{tmp_path}/t.db", read_only=True)
    with SQLiteStore(f"sqlite:///{tmp_path}/t.db") as store:
        assert store.schema_version == len(MIGRATIONS)
        [kept] = store.list_effects()
        with store.read() as tx:
            assert tx.count_effects("r") == 1  # counted by the migration that added counts
    assert kept.operation_key == "k" and kept.schema_digest is None


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///rel.db", "rel.db"),
        ("sqlite:///sub/rel.db?synchronous=normal", "sub/rel.db"),
        ("sqlite:////abs/x.db", "/abs/x.db"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite:///odd#name%20.db", "odd#name%20.db"),  # taken as written
        ("plain.sqlite3", "plain.sqlite3"),
        ("/abs/plain.db", "/abs/plain.db"),
    ],
)
def test_sqlite_urls_name_their_file(url: str, path: str) -> None:
    assert store_kind(url) == "sqlite"
    assert sqlite_url(url)[0] == path


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("memory://", "memory"),
        ("memory:", "memory"),
        ("postgresql://u@h/db", "postgresql"),
        ("postgres:///db", "postgresql"),
        ("POSTGRESQL://u@h/db", "postgresql"),
    ],
)
def test_other_store_urls(url: str, kind: str) -> None:
    assert store_kind(url) == kind


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("sqlite:///x.db?synchronus=normal", "unknown parameter 'synchronus'"),
        ("sqlite:///", "no file in SQLite URL"),
        ("memory://shared", "takes no name or options"),
        ("postgresql:db", "write postgresql://user@host:5432/dbname"),
        ("postgresql://u@[::1/db", "malformed store URL"),
        ("mysql://root:hunter2@db/x", "no store for URL 'mysql://root:***@db/x'; use sqlite:///"),
    ],
)
def test_malformed_urls_say_what_to_write(url: str, advice: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        open_store(url)
    assert advice in str(refused.value)
    assert "hunter2" not in str(refused.value)
