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
