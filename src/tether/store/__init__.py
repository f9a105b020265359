"""Stores: one contract (``Store``), a memory reference and SQLite; chosen by URL."""

from __future__ import annotations

import os

from tether.errors import ConfigurationError
from tether.store.base import RunRecord, StepRecord, Store, Tx
from tether.store.memory import MemoryStore
from tether.store.sqlite import SQLiteStore

DEFAULT_URL = "sqlite:///tether.db"


def open_store(url: str | None = None) -> Store:
    """The store a URL names: ``sqlite:///path``, ``postgresql://…``, ``memory://``;
    default ``$TETHER_DB``."""
    url = url or os.environ.get("TETHER_DB") or DEFAULT_URL
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("sqlite:") or url.endswith((".db", ".sqlite", ".sqlite3")):
        return SQLiteStore(url)
    if url.startswith(("postgresql://", "postgres://")):
        from tether.store.postgres import PostgresStore  # needs the postgres extra

        return PostgresStore(url)
    raise ConfigurationError(
        f"no store for URL {url!r}; use sqlite:///path/to/tether.db, "
        "postgresql://user@host/db or memory://"
    )


__all__ = [
    "DEFAULT_URL",
    "MemoryStore",
    "RunRecord",
    "SQLiteStore",
    "StepRecord",
    "Store",
    "Tx",
    "open_store",
]
