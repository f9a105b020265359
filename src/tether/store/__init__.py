"""Stores: one contract (``Store``), a memory reference, SQLite and PostgreSQL; chosen by URL."""

from __future__ import annotations

import os

from tether.errors import ReadOnlyStore, StoreMissing
from tether.evidence.keys import AuditKeys
from tether.store.base import Store, Tx
from tether.store.memory import MemoryStore
from tether.store.rows import RunRecord, StepRecord
from tether.store.sqlite import SQLiteStore
from tether.store.urls import store_kind

DEFAULT_URL = "sqlite:///tether.db"


def open_store(
    url: str | None = None,
    *,
    create: bool = True,
    read_only: bool = False,
    keys: AuditKeys | None = None,
) -> Store:
    """The store a URL names: ``sqlite:///path``, ``postgresql://…``, ``memory://``
    (``tether.store.urls`` lists every form); default ``$TETHER_DB``.

    ``create=False`` refuses a store that does not exist yet (``StoreMissing``) instead of
    making one; ``read_only=True`` (which implies it) also migrates and writes nothing."""
    url = url or os.environ.get("TETHER_DB") or DEFAULT_URL
    create = create and not read_only
    kind = store_kind(url)
    if kind == "memory":
        return MemoryStore(keys=keys)
    if kind == "sqlite":
        return SQLiteStore(url, create=create, read_only=read_only, keys=keys)
    from tether.store.postgres import PostgresStore  # without [postgres]: MissingExtra

    return PostgresStore(url, create=create, read_only=read_only, keys=keys)


__all__ = [
    "DEFAULT_URL",
    "MemoryStore",
    "ReadOnlyStore",
    "RunRecord",
    "SQLiteStore",
    "StepRecord",
    "Store",
    "StoreMissing",
    "Tx",
    "open_store",
]
