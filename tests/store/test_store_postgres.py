from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import schema_url
from tests.store.store_contract import StoreContract
from tether.errors import ReadOnlyStore, StoreError, StoreMissing
from tether.store import Store, open_store


@pytest.fixture(autouse=True)
def key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each store's key file goes under $XDG_CONFIG_HOME: a fresh one per test."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("TETHER_AUDIT_KEY", raising=False)
    monkeypatch.delenv("TETHER_AUDIT_KEY_FILE", raising=False)
    return tmp_path / "config"


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        from tether.store.postgres import PostgresStore

        for url in schema_url():
            s = PostgresStore(url)
            yield s
            s.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from schema_url()


def test_first_appends_racing_on_a_fresh_schema_do_not_collide(pg_url: str) -> None:
    # Both writers start new chains at once (and so both append to _chains): the chain's
    # head row must exist before it can be locked, or the two collide on (_chains, 1).
    import threading

    from tether.store.postgres import PostgresStore

    stores = [PostgresStore(pg_url), PostgresStore(pg_url)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def append(i: int) -> None:
        barrier.wait()
        try:
            for n in range(10):
                with stores[i].transaction() as tx:
                    tx.append_audit("run_started", at=float(n), run_id=f"run-{i}-{n}")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    report = stores[0].verify_audit()
    assert report.intact, report.summary()
    assert report.entries == 40  # 20 entries, each on a new chain recorded in _chains
    for s in stores:
        s.close()


def test_deleting_a_whole_run_trail_is_detected(pg_url: str) -> None:
    import psycopg

    from tether.store.postgres import PostgresStore, split_url

    with PostgresStore(pg_url) as store:
        with store.transaction() as tx:
            for run in ("run-a", "run-b"):
                tx.append_audit("run_started", at=1.0, run_id=run)
                tx.append_audit("step", at=2.0, run_id=run)
        assert store.verify_audit().intact
        conninfo, schema = split_url(pg_url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute("DELETE FROM audit_log WHERE chain = 'run-b'")
            conn.execute("DELETE FROM audit_heads WHERE chain = 'run-b'")
        report = store.verify_audit()
        assert not report.intact
        assert report.chain == "run-b" and "deleted" in (report.problem or "")


def test_an_unreachable_server_is_one_sentence_within_seconds(
    capfd: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError) as refused:
        open_store("postgresql://tether:s3cret@127.0.0.1:1/test")
    assert time.monotonic() - started < 10
    message = str(refused.value)
    assert message.startswith("cannot connect to PostgreSQL at postgresql://tether:***@127.0.0.1:1")
    assert "\n" not in message and "s3cret" not in message
    assert capfd.readouterr().err == ""  # no pool warnings on the way


def test_create_false_and_read_only_need_the_tables(pg_url: str) -> None:
    import psycopg

    from tether.store.postgres import PostgresStore, split_url

    for options in ({"create": False}, {"read_only": True}):
        with pytest.raises(StoreMissing, match="no tether store at"):
            open_store(pg_url, **options)  # type: ignore[arg-type]
    conninfo, schema = split_url(pg_url)
    with psycopg.connect(conninfo) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        assert found.fetchone() is None  # nothing was created on the way
    PostgresStore(pg_url).close()
    open_store(pg_url, create=False).close()


def test_read_only_refuses_writes_and_reads_with_the_key(pg_url: str, key_home: Path) -> None:
    from tether.store.postgres import PostgresStore

    with PostgresStore(pg_url) as store, store.transaction() as tx:
        tx.append_audit("run_started", at=1.0, run_id="run-1")
    assert (key_home / "tether" / "keys" / f"{store.store_id}.key").exists()
    with PostgresStore(pg_url, read_only=True) as reader:
        assert reader.keys.key_id == store.keys.key_id
        assert reader.verify_audit().intact
        with pytest.raises(ReadOnlyStore), reader.transaction():
            pass


def test_workers_opening_a_new_store_at_once_share_one_key(pg_url: str, key_home: Path) -> None:
    from tether.store.postgres import PostgresStore

    barrier = threading.Barrier(3)
    opened: list[PostgresStore] = []

    def open_one() -> None:
        barrier.wait()
        opened.append(PostgresStore(pg_url))

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(opened) == 3
        assert len({s.keys.key_id for s in opened}) == 1
        assert len({s.store_id for s in opened}) == 1
        assert len(list((key_home / "tether" / "keys").iterdir())) == 1
    finally:
        for s in opened:
            s.close()


def test_an_older_database_is_migrated_and_a_newer_one_refused(pg_url: str) -> None:
    from dataclasses import replace

    import psycopg

    from tether.store import migrations
    from tether.store.postgres import MIGRATIONS, POSTGRES, PostgresStore, split_url

    conninfo, schema = split_url(pg_url)
    with psycopg.connect(conninfo) as conn:  # the database as the first release left it
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        old = replace(POSTGRES, migrations=MIGRATIONS[:1])
        assert migrations.migrate(conn.execute, old, "the test database") == 1
    with pytest.raises(StoreError, match=r"schema version 1, older.*tether migrate"):
        PostgresStore(pg_url, read_only=True)
    with PostgresStore(pg_url) as store:
        assert store.schema_version == len(MIGRATIONS)
    with psycopg.connect(conninfo) as conn:
        conn.execute(f'INSERT INTO "{schema}".schema_migrations VALUES (99, 0)')
    with pytest.raises(StoreError, match="version 99, newer than this tether"):
        PostgresStore(pg_url)
