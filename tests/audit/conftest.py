"""Fixtures for the evidence suites: a fresh key home per test, and a SQL store (SQLite and
PostgreSQL) with a raw connection beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audit.tamper import Opened, Raw
from tests.pg import schema_url
from tether.store import open_store


@pytest.fixture(autouse=True)
def key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PostgreSQL stores keep their key under $XDG_CONFIG_HOME: a fresh one per test."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("TETHER_AUDIT_KEY", raising=False)
    monkeypatch.delenv("TETHER_AUDIT_KEY_FILE", raising=False)
    return home


@pytest.fixture(params=["sqlite", "postgres"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    if request.param == "sqlite":
        urls: Iterator[str] = iter([f"sqlite:///{tmp_path}/t.db"])
    else:
        urls = schema_url()
    url = next(urls)
    store = open_store(url)
    raw = Raw(url)
    try:
        yield Opened(url, store, raw)
    finally:
        raw.close()
        store.close()
        for _ in urls:  # drops the PostgreSQL schema
            pass
