from __future__ import annotations

import pytest

from tests.store.store_contract import StoreContract
from tether.store import MemoryStore, Store


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore()
