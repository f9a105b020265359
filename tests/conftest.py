"""The store matrix: tests that touch a store run on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import schema_url
from tether.store import MemoryStore, SQLiteStore, Store

KINDS = ("memory", "sqlite", "postgres")


@pytest.fixture(autouse=True)
def _no_event_loop_left_behind() -> Iterator[None]:
    """Sync entry points of async SDKs (Pydantic AI's and the OpenAI Agents SDK's
    ``run_sync``) run on the thread's default event loop and leave it open. Closed after each
    test: otherwise its sockets are collected, and warned about (an error here), in the middle
    of whichever later test the garbage collector happens to run in."""
    yield
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()  # creates one if none is set: closed just the same
    except RuntimeError:  # the test set none on purpose
        loop = None
    if loop is not None and not loop.is_running():
        loop.close()
    asyncio.set_event_loop_policy(None)  # a fresh policy: the next test may create its own


class Backend:
    """One store's data, and as many connections to it as a test wants."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self._opened: list[Store] = []
        self._schema: Iterator[str] | None = None
        if kind == "memory":
            self.url = "memory://"
            self._memory = MemoryStore()
        elif kind == "sqlite":
            self.url = f"sqlite:///{tmp_path}/t.db"
        else:
            self._schema = schema_url()
            self.url = next(self._schema)
        self.store = self.open()

    def open(self) -> Store:
        """A store on the same data, as another process would open it (memory: the same)."""
        if self.kind == "memory":
            return self._memory
        if self.kind == "sqlite":
            store: Store = SQLiteStore(self.url)
        else:
            from tether.store.postgres import PostgresStore

            store = PostgresStore(self.url)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self._schema is not None:
            for _ in self._schema:  # drops the schema
                pass


@pytest.fixture(
    params=[pytest.param(k, marks=[pytest.mark.postgres] if k == "postgres" else []) for k in KINDS]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path)
    yield b
    b.close()


@pytest.fixture(autouse=True, scope="session")
def _keys_in_a_temporary_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """PostgreSQL stores keep their audit key under $XDG_CONFIG_HOME/tether/keys: point it
    at a temporary folder (children inherit it), so tests leave no keys in the real home."""
    import os

    home = tmp_path_factory.mktemp("config-home")
    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(home)
    yield
    if saved is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = saved


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whole modules that need the server are marked here, so `-m "not postgres"` (the quick
    # subset) leaves them out without each file repeating it.
    for item in items:
        if "postgres" in item.path.name or "_pg" in item.path.name:
            item.add_marker(pytest.mark.postgres)
