from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import schema_url
from tests.store_contract import StoreContract
from tether.store import Store


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
