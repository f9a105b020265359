"""The embedded default store: one SQLite file in WAL mode.

``synchronous=FULL`` is the default: a committed ``dispatched`` row must survive a power cut,
or a restart could run a side effect twice. ``?synchronous=normal`` in the URL opts into
surviving process crashes only. Write transactions start with ``BEGIN IMMEDIATE`` so two
processes never both read a run and then both try to write it; the loser waits up to
``busy_timeout`` and then gets a clear error.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.audit import MAIN, AuditEntry, AuditHead
from tether.errors import ConfigurationError, StoreError
from tether.store.base import Tx
from tether.store.sql import (
    SQLStore,
    SQLTx,
)

# Position in this list is the schema version; append, never edit.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE agent_runs (
        run_id TEXT PRIMARY KEY,
        state_version INTEGER NOT NULL,
        status TEXT NOT NULL,
        principal_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        checkpoint_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX agent_runs_status ON agent_runs (status);
    CREATE TABLE agent_effects (
        operation_key TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        tool_version TEXT NOT NULL,
        argument_digest TEXT NOT NULL,
        status TEXT NOT NULL,
        result_digest TEXT,
        external_reference TEXT,
        result_json TEXT,
        error TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX agent_effects_run ON agent_effects (run_id);
    CREATE TABLE approvals (
        approval_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        record_json TEXT NOT NULL
    );
    CREATE INDEX approvals_call ON approvals (run_id, call_id);
    CREATE INDEX approvals_status ON approvals (status);
    CREATE TABLE audit_log (
        seq INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        run_id TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX audit_log_run ON audit_log (run_id);
    CREATE TABLE audit_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL
    );
    -- The head follows every append inside the appending statement itself: one round trip
    -- fewer per entry, and it cannot be forgotten.
    CREATE TRIGGER audit_head_follows AFTER INSERT ON audit_log
    BEGIN
        INSERT OR REPLACE INTO audit_head (id, seq, hash) VALUES (1, NEW.seq, NEW.hash);
    END;
    """,
    """
    ALTER TABLE agent_runs ADD COLUMN lease_owner TEXT;
    ALTER TABLE agent_runs ADD COLUMN lease_expires_at REAL;
    CREATE TABLE run_messages (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE run_steps (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        turn INTEGER NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    """
    ALTER TABLE agent_effects ADD COLUMN schema_digest TEXT;
    -- I2: a call's identity is (run_id, call_id), whatever tool version it ran under.
    CREATE UNIQUE INDEX agent_effects_call ON agent_effects (run_id, call_id);
    ALTER TABLE audit_log ADD COLUMN key_id TEXT;
    ALTER TABLE audit_log ADD COLUMN mac TEXT;
    CREATE TABLE tether_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE credentials (
        credential_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        record_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        revoked_at REAL
    );
    CREATE INDEX credentials_name ON credentials (name);
    """,
]


class SQLiteTx(SQLTx):
    """One chain of audit entries; its head follows every append by trigger."""

    def _audit_head(self, chain: str) -> AuditHead | None:
        row = self.c.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
        return None if row is None else AuditHead(row[0], row[1])

    def _insert_audit(self, entry: AuditEntry) -> None:
        self.c.execute(
            "INSERT INTO audit_log (seq, kind, run_id, prev_hash, hash, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (entry.seq, entry.kind, entry.run_id, entry.prev_hash, entry.hash, entry.body),
        )

    def _set_audit_head(self, chain: str, head: AuditHead) -> None:
        pass  # the audit_head_follows trigger has already done it


def statements(script: str) -> list[str]:
    """Split a migration into statements (``executescript`` would commit half-way)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def path_from_url(url: str) -> str:
    """``sqlite:///rel.db`` is relative, ``sqlite:////abs/x.db`` absolute; a bare path works."""
    if url.startswith("sqlite:///"):
        rest = url[len("sqlite:///") :]
    elif url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
    else:
        rest = url
    path = rest.split("?", 1)[0]
    if not path:
        raise ConfigurationError(f"no file in SQLite URL {url!r}; use sqlite:///path/to/tether.db")
    return path


class SQLiteStore(SQLStore):
    """The store in one SQLite file (WAL); see the module docstring for durability."""

    def __init__(
        self, url: str, *, synchronous: str | None = None, busy_timeout_s: float | None = None
    ):
        self.url = url
        query = dict(part.split("=", 1) for part in url.partition("?")[2].split("&") if "=" in part)
        mode = (synchronous or query.get("synchronous", "full")).upper()
        if busy_timeout_s is None:
            try:
                busy_timeout_s = float(query.get("busy_timeout", "10"))
            except ValueError:
                raise ConfigurationError(
                    f"busy_timeout in {url!r} must be a number of seconds"
                ) from None
        if mode not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigurationError(f"synchronous must be full, normal or extra, not {mode!r}")
        self.path = path_from_url(url)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={mode}")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite database {self.path}: {e}") from e
        self._lock = threading.RLock()
        self.migrate()

    @property
    def schema_version(self) -> int:
        row = self._conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    def migrate(self) -> int:
        """Apply the migrations this file lacks; returns the schema version."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise StoreError(f"cannot migrate {self.path}: {e}; try again shortly") from e
            try:
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
                current = self.schema_version
                if current > len(MIGRATIONS):
                    raise StoreError(
                        f"{self.path} has schema version {current}, newer than this tether "
                        f"({len(MIGRATIONS)}); upgrade tether"
                    )
                for version, script in enumerate(MIGRATIONS[current:], start=current + 1):
                    for statement in statements(script):
                        self._conn.execute(statement)
                    self._conn.execute(
                        "INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time())
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return len(MIGRATIONS)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise StoreError(f"cannot start a transaction on {self.path}: {e}") from e
            try:
                yield SQLiteTx(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as e:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"commit failed on {self.path}: {e}") from e

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield SQLiteTx(self._conn)
            finally:
                self._conn.execute("ROLLBACK")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def audit_entries(self) -> Iterator[AuditEntry]:
        rows = self._query(
            "SELECT seq, kind, run_id, prev_hash, hash, body FROM audit_log ORDER BY rowid"
        )
        for r in rows:
            yield AuditEntry(seq=r[0], kind=r[1], run_id=r[2], prev_hash=r[3], hash=r[4], body=r[5])

    def audit_heads(self) -> dict[str, AuditHead]:
        rows = self._query("SELECT seq, hash FROM audit_head WHERE id = 1")
        return {MAIN: AuditHead(rows[0][0], rows[0][1])} if rows else {}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
