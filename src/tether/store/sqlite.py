"""The embedded default store: one SQLite file in WAL mode.

``synchronous=FULL`` is the default: a committed ``dispatched`` row must survive a power cut,
or a restart could run a side effect twice. ``?synchronous=normal`` in the URL opts into
surviving process crashes only. Write transactions start with ``BEGIN IMMEDIATE`` so two
processes never both read a run and then both try to write it; the loser waits up to
``busy_timeout`` and then gets a clear error.

Opened ``read_only``, the file is opened with ``mode=ro`` and nothing is migrated or written,
not even the WAL pragma; a file that is itself read-only (or in a read-only folder) is opened
``immutable=1``, which needs no ``-shm`` file beside it. The audit keyring is by default the
file beside the database: ``tether.db`` -> ``tether.db.key``.

The module is long because it implements every primitive of the store contract for SQLite, each
a short SQL statement.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tether.core.ledger import Effect
from tether.errors import (
    ConfigurationError,
    ReadOnlyStore,
    StoreError,
    StoreMissing,
    StoreUnavailable,
)
from tether.evidence.audit import MAIN, AuditEntry, AuditHead
from tether.evidence.keys import NO_KEYS, AuditKeys
from tether.store import migrations
from tether.store.base import Tx
from tether.store.known import Knowledge, Known, schema_code
from tether.store.rows import CallView
from tether.store.sql import INSERT_EFFECT, SQLStore, SQLTx
from tether.store.urls import sqlite_url

# Position in this list is the schema version; append, never edit (store/migrations.py says
# why it is one longer than PostgreSQL's).
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
    """
    -- Each run's effect count, kept by the database itself: a row deleted behind tether's back
    -- shows as a count the run did not expect, in one indexed read rather than a count(*)
    -- over the run's effects at every call.
    CREATE TABLE effect_counts (
        run_id TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    );
    INSERT INTO effect_counts (run_id, n)
        SELECT run_id, count(*) FROM agent_effects GROUP BY run_id;
    CREATE TRIGGER effect_counts_insert AFTER INSERT ON agent_effects
    BEGIN
        INSERT INTO effect_counts (run_id, n) VALUES (NEW.run_id, 1)
            ON CONFLICT (run_id) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER effect_counts_delete AFTER DELETE ON agent_effects
    BEGIN
        UPDATE effect_counts SET n = n - 1 WHERE run_id = OLD.run_id;
    END;
    """,
    """
    -- The notification outbox: a row is written with the approval request it announces, in
    -- the same transaction, and a sender delivers it later (the gate never waits on it).
    CREATE TABLE notifications (
        notification_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        created_at REAL NOT NULL,
        next_attempt_at REAL NOT NULL,
        attempts INTEGER NOT NULL,
        delivered_at REAL,
        record_json TEXT NOT NULL
    );
    CREATE INDEX notifications_due ON notifications (delivered_at, next_attempt_at);
    """,
    """
    -- What a run's user (or its principal's code) told it: the trusted input the data-flow
    -- policy compares argument values with (tether.policy.provenance); one row per input.
    CREATE TABLE run_inputs (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    """
    -- A credential's seal: the audit key's MAC over who it names, what it may do and whether
    -- it is revoked (tether.identity). A row without a valid one decides nothing.
    ALTER TABLE credentials ADD COLUMN seal TEXT;
    -- A run's effect count is counted where it is used, not kept by a trigger: a dropped
    -- trigger left a count that still matched after an effect row was deleted.
    DROP TRIGGER IF EXISTS effect_counts_insert;
    DROP TRIGGER IF EXISTS effect_counts_delete;
    DROP TABLE IF EXISTS effect_counts;
    """,
    """
    -- Fewer pages per call. agent_effects_call (run_id, call_id) answers every lookup by run,
    -- so an index on run_id alone only cost a page at each insert. The status index becomes
    -- one partial index per status anything lists often (the inbox: pending; the Temporal
    -- waker: approved, denied, edited): an approval used by its call leaves one and enters
    -- none, where it moved between two places of one index; used and expired ones, which
    -- only grow, are indexed by nothing. The call's latest approval is found in index order.
    DROP INDEX IF EXISTS agent_effects_run;
    DROP INDEX IF EXISTS approvals_status;
    CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';
    CREATE INDEX approvals_approved ON approvals (created_at) WHERE status = 'approved';
    CREATE INDEX approvals_denied ON approvals (created_at) WHERE status = 'denied';
    CREATE INDEX approvals_edited ON approvals (created_at) WHERE status = 'edited';
    DROP INDEX IF EXISTS approvals_call;
    CREATE INDEX approvals_call ON approvals (run_id, call_id, created_at);
    """,
]


@functools.cache
def _migrated_code() -> frozenset[tuple[str, str, str, str]]:
    """The schema the migrations make (``schema_code`` of a scratch database in memory)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrations.migrate(lambda sql, params: conn.execute(sql, params or ()), SQLITE, ":memory:")
        return schema_code(conn)
    finally:
        conn.close()


class SQLiteTx(SQLTx):
    """One chain of audit entries; its head follows every append by trigger. ``known`` is
    what the transaction may take as read (``Known``), None if nothing may be; it is kept up
    to date as the transaction writes, and becomes the store's when it commits."""

    def __init__(self, conn: Any, keys: AuditKeys, known: Known | None = None) -> None:
        super().__init__(conn, keys)
        self.known = known

    def _audit_head(self, chain: str) -> AuditHead | None:
        known = self.known
        if known is not None and known.head is not None:
            return known.head
        row = self.c.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
        head = None if row is None else AuditHead(row[0], row[1])
        if known is not None:
            known.head = head
        return head

    def call_view(self, run_id: str, call_id: str) -> CallView:
        known = self.known
        if known is None:
            return super().call_view(run_id, call_id)
        view = self._call_view(run_id, call_id, known.counts.get(run_id))
        known.count(run_id, view.effect_count)
        return view

    def count_effects(self, run_id: str) -> int:
        known = self.known
        count = None if known is None else known.counts.get(run_id)
        if count is None:
            count = super().count_effects(run_id)
            if known is not None:
                known.count(run_id, count)
        return count

    def _insert_effect(self, effect: Effect, cells: tuple[Any, ...]) -> bool:
        inserted = self._changed(INSERT_EFFECT, cells)
        known = self.known
        count = None if known is None else known.counts.get(effect.run_id)
        if inserted and known is not None and count is not None:
            known.counts[effect.run_id] = count + 1
        return inserted

    def _insert_audit(self, entry: AuditEntry) -> None:
        self.c.execute(
            "INSERT INTO audit_log (seq, kind, run_id, prev_hash, hash, body, key_id, mac) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.seq,
                entry.kind,
                entry.run_id,
                entry.prev_hash,
                entry.hash,
                entry.body,
                entry.key_id,
                entry.mac,
            ),
        )

    def _set_audit_head(self, chain: str, head: AuditHead) -> None:
        if self.known is not None:
            self.known.head = head  # the audit_head_follows trigger has written it

    def _unkeyed_audit(self) -> list[tuple[str, int, str]]:
        rows = self.c.execute("SELECT seq, hash FROM audit_log WHERE mac IS NULL").fetchall()
        return [(MAIN, r[0], r[1]) for r in rows]

    def _set_audit_mac(self, chain: str, seq: int, key_id: str, mac: str) -> None:
        self.c.execute("UPDATE audit_log SET key_id = ?, mac = ? WHERE seq = ?", (key_id, mac, seq))


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


SQLITE = migrations.Dialect(migrations=MIGRATIONS, mark="?", float_type="REAL", split=statements)


def _read_only_file(path: str) -> bool:
    """Whether the file or its folder cannot be written (by permission bits too, which
    ``os.access`` ignores for root)."""
    folder = os.path.dirname(os.path.abspath(path))
    for p in (path, folder):
        if not os.access(p, os.W_OK) or not os.stat(p).st_mode & (stat.S_IWUSR | stat.S_IWGRP):
            return True
    return False


def _connect_read_only(path: str, timeout: float) -> sqlite3.Connection:
    """Open without writing. ``mode=ro`` sees a live writer's WAL but needs a ``-shm`` file
    it may have to create; ``immutable=1`` needs nothing beside the file but ignores any WAL,
    so it is the fallback for a read-only file or folder that has none to miss."""
    uri = "file:" + quote(os.path.abspath(path))
    has_wal = os.path.exists(path + "-wal") and os.path.getsize(path + "-wal") > 0
    if has_wal or not _read_only_file(path):
        conn = _connect_uri(f"{uri}?mode=ro", timeout)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.Error:
            conn.close()  # no -shm file and no right to make one
    return _connect_uri(f"{uri}?mode=ro&immutable=1", timeout)


def _connect_uri(uri: str, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout
    )


class SQLiteStore(SQLStore):
    """The store in one SQLite file (WAL); see the module docstring for durability."""

    AUDIT_SELECT = (
        "SELECT 'main', seq, kind, run_id, prev_hash, hash, body, key_id, mac FROM audit_log "
        "ORDER BY rowid"
    )
    HEADS_SELECT = "SELECT 'main', seq, hash FROM audit_head WHERE id = 1"

    def __init__(
        self,
        url: str,
        *,
        synchronous: str | None = None,
        busy_timeout_s: float | None = None,
        create: bool = True,
        read_only: bool = False,
        keys: AuditKeys | None = None,
    ):
        self.url = url
        self.read_only = read_only
        self.keys = NO_KEYS  # until _attach_keys finds the store's own; reading needs none
        self.path, query = sqlite_url(url)
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
        in_memory = self.path == ":memory:"
        if not in_memory and (read_only or not create) and not os.path.isfile(self.path):
            where = os.path.abspath(self.path)
            raise StoreMissing(f"no tether store at {where}; check --db or $TETHER_DB")
        self._conn = self._connect(mode, busy_timeout_s)
        self._lock = threading.RLock()
        self._knowledge = Knowledge(_migrated_code)  # what its own writes taught it (Known)
        try:
            if read_only:
                self._check_schema()
            else:
                if not create and not in_memory and not self._has_tables():
                    raise StoreMissing(
                        f"{self.path} is not a tether store (it has no tether tables)"
                    )
                self.migrate()
            self._attach_keys(keys)
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise StoreUnavailable(
                f"{os.path.abspath(self.path)} cannot be read as a tether store ({e}): it is "
                "corrupt, truncated or not a SQLite file; restore it from a backup, or point "
                "--db (or $TETHER_DB) at the right file"
            ) from None
        except BaseException:
            self._conn.close()
            raise

    def _connect(self, mode: str, timeout: float) -> sqlite3.Connection:
        try:
            if self.read_only and self.path != ":memory:":
                return _connect_read_only(self.path, timeout)
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=timeout
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={mode}")
            except BaseException:
                conn.close()
                raise
            return conn
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot open SQLite database {self.path}: {e}") from e

    def _has_tables(self) -> bool:
        row = self._conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        return bool(row[0])

    def _check_schema(self) -> None:
        """Opening read-only migrates nothing, so the file must already be current."""
        if not self._has_tables():
            raise StoreMissing(f"{self.path} is not a tether store (it has no tether tables)")
        migrations.check_current(self.schema_version, SQLITE, self.path)

    def default_key_path(self, store_id: str | None) -> Path | None:
        return None if self.path == ":memory:" else Path(self.path + ".key")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return migrations.schema_version(self._execute)

    def migrate(self) -> int:
        """Apply the migrations this file lacks; returns the schema version."""
        if self.read_only:
            raise ReadOnlyStore(f"{self.path} is open read-only; cannot migrate it")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")  # one migrator at a time
            except sqlite3.OperationalError as e:
                raise StoreError(f"cannot migrate {self.path}: {e}; try again shortly") from e
            self._knowledge.forget()  # a migration rewrites what any transaction learned
            try:
                version = migrations.migrate(self._execute, SQLITE, self.path)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return version

    def _execute(self, sql: str, params: tuple[Any, ...] | None) -> sqlite3.Cursor:
        return self._conn.execute(sql, params or ())

    def transaction(self) -> AbstractContextManager[Tx]:
        if self.read_only:
            raise ReadOnlyStore(f"{self.path} is open read-only; nothing can be written")
        return self._write()

    def _setup_transaction(self) -> AbstractContextManager[Tx]:
        return self._write()

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                raise StoreError(f"cannot start a transaction on {self.path}: {e}") from e
            try:
                # Taken, not copied: the store knows nothing more unless this transaction
                # commits what it learns.
                tx = SQLiteTx(self._conn, self.keys, self._knowledge.take(self._conn))
                yield tx
            except sqlite3.Error as e:
                self._rollback()
                # The driver's own words keep the cause ("database or disk is full").
                raise StoreError(f"{self.path}: {e}; nothing was written") from e
            except BaseException:
                self._rollback()
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback()
                raise StoreError(f"commit failed on {self.path}: {e}; nothing was written") from e
            self._knowledge.keep(tx.known)

    def _rollback(self) -> None:
        # SQLite rolls back by itself on some errors (a full disk, for one); a second
        # ROLLBACK would then raise "no transaction is active" and hide the real cause.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield SQLiteTx(self._conn, self.keys)  # a read learns nothing that is kept
            except sqlite3.DatabaseError as e:
                raise self._unreadable(e) from None
            finally:
                self._conn.execute("ROLLBACK")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as e:
                raise self._unreadable(e) from None

    def _unreadable(self, error: sqlite3.DatabaseError) -> StoreError:
        """A read the file could not answer: one line naming it, never a traceback."""
        if isinstance(error, sqlite3.OperationalError):  # locked, busy, I/O: the driver says
            return StoreError(f"{self.path}: {error}; try again shortly")
        return StoreUnavailable(
            f"{os.path.abspath(self.path)} cannot be read ({error}): the file is corrupt or "
            "truncated; restore it from a backup (`tether audit verify` checks the copy)"
        )

    @contextmanager
    def _read_snapshot(self) -> Iterator[Callable[[str], Iterator[tuple[Any, ...]]]]:
        # One read transaction: WAL gives it one snapshot, whatever writers commit meanwhile.
        # The lock is held throughout: the connection is shared, and its cursors with it.
        with self._lock:
            in_tx = self._conn.in_transaction
            cursors: list[sqlite3.Cursor] = []

            def stream(sql: str) -> Iterator[tuple[Any, ...]]:
                cursor = self._conn.execute(sql)
                cursors.append(cursor)
                while batch := cursor.fetchmany(self.STREAM_BATCH):
                    yield from batch

            if not in_tx:
                self._conn.execute("BEGIN")
            try:
                yield stream
            except sqlite3.DatabaseError as e:
                raise self._unreadable(e) from None
            finally:
                for cursor in cursors:
                    cursor.close()
                if not in_tx:
                    self._conn.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
