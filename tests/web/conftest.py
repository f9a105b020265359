"""The inbox tests' store: a real SQLite file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    yield s
    s.close()
