"""The PostgreSQL store: many worker processes on many machines sharing the work.

psycopg 3 with a connection pool; every transaction is READ COMMITTED, and every write that
could race is a conditional UPDATE or an INSERT ... ON CONFLICT DO NOTHING, so two workers
never both win (the loser sees zero rows and gets a clear error).

No global lock on the hot path. Effects are rows keyed by operation key. The audit log is one
hash chain *per run* (entries about no run go to ``_global``): an append locks only its own
run's head row, so workers driving different runs never wait for each other. A single
global chain would make every append in the cluster queue on one row. Deleting a whole run's
trail is still detected: each chain is recorded, when it starts, in the ``_chains`` chain
(one short lock per new run, not per append), and verification checks every recorded chain.

``postgresql://user@host:5432/db?schema=name`` puts tether's tables in that schema (created
if missing); other parameters go to libpq unchanged.

Opening first probes the server with one plain connection (3 s timeout), so an unreachable or
refusing server is one sentence saying why, not a pool retrying in the background. Opened
``read_only``, every transaction is READ ONLY and nothing is migrated. The audit keyring's
default file is ``$XDG_CONFIG_HOME/tether/keys/<store id>.key``: the database names the store,
the key stays on the machine (or in ``$TETHER_AUDIT_KEY`` for workers on several).

The module is long because it implements every primitive of the store contract for PostgreSQL,
each a short SQL statement.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.core.lifecycle import MODEL_RETRY_AFTER_S
from tether.errors import (
    ConfigurationError,
    ReadOnlyStore,
    StoreError,
    StoreMissing,
    StoreUnavailable,
)
from tether.evidence.audit import GENESIS, GLOBAL, AuditEntry, AuditHead
from tether.evidence.keys import NO_KEYS, AuditKeys, config_key_path
from tether.extras import missing
from tether.store import migrations
from tether.store.base import Pending, Tx
from tether.store.rows import RunRecord
from tether.store.sql import CLAIMABLE, RUN_COLUMNS, SQLStore, SQLTx

try:
    import psycopg
    import psycopg_pool
    from psycopg.pq import TransactionStatus
except ModuleNotFoundError as e:  # tests/cli/test_extras.py runs without it
    raise missing("postgres", "the PostgreSQL store", e) from None

# Position in this list is the schema version; append, never edit (store/migrations.py says
# why it is one shorter than SQLite's).
MIGRATIONS: list[str] = [
    """
    CREATE TABLE agent_runs (
        run_id TEXT PRIMARY KEY,
        state_version BIGINT NOT NULL,
        status TEXT NOT NULL,
        principal_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        checkpoint_json TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        lease_owner TEXT,
        lease_expires_at DOUBLE PRECISION
    );
    CREATE INDEX agent_runs_status ON agent_runs (status, updated_at);
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
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX agent_effects_run ON agent_effects (run_id, created_at);
    CREATE TABLE approvals (
        approval_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        record_json TEXT NOT NULL,
        seq BIGSERIAL
    );
    CREATE INDEX approvals_call ON approvals (run_id, call_id);
    CREATE INDEX approvals_status ON approvals (status);
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
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE audit_log (
        chain TEXT NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        run_id TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        body TEXT NOT NULL,
        id BIGSERIAL,  -- append order across chains, for reading; a sequence takes no lock
        PRIMARY KEY (chain, seq)
    );
    CREATE TABLE audit_heads (
        chain TEXT PRIMARY KEY,
        seq BIGINT NOT NULL,
        hash TEXT NOT NULL
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
        created_at DOUBLE PRECISION NOT NULL,
        revoked_at DOUBLE PRECISION
    );
    CREATE INDEX credentials_name ON credentials (name);
    """,
    """
    -- Each run's effect count, kept by the database itself: a row deleted behind tether's back
    -- shows as a count the run did not expect, in one indexed read rather than a count(*)
    -- over the run's effects at every call.
    CREATE TABLE effect_counts (
        run_id TEXT PRIMARY KEY,
        n BIGINT NOT NULL
    );
    INSERT INTO effect_counts (run_id, n)
        SELECT run_id, count(*) FROM agent_effects GROUP BY run_id;
    CREATE FUNCTION tether_effect_counts() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO effect_counts (run_id, n) VALUES (NEW.run_id, 1)
                ON CONFLICT (run_id) DO UPDATE SET n = effect_counts.n + 1;
        ELSIF TG_OP = 'DELETE' THEN
            UPDATE effect_counts SET n = n - 1 WHERE run_id = OLD.run_id;
        ELSE  -- TRUNCATE fires no row triggers: every count goes
            DELETE FROM effect_counts;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER effect_counts_rows AFTER INSERT OR DELETE ON agent_effects
        FOR EACH ROW EXECUTE FUNCTION tether_effect_counts();
    CREATE TRIGGER effect_counts_truncate AFTER TRUNCATE ON agent_effects
        FOR EACH STATEMENT EXECUTE FUNCTION tether_effect_counts();
    """,
    """
    -- The notification outbox: a row is written with the approval request it announces, in
    -- the same transaction, and a sender delivers it later (the gate never waits on it).
    CREATE TABLE notifications (
        notification_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        next_attempt_at DOUBLE PRECISION NOT NULL,
        attempts INTEGER NOT NULL,
        delivered_at DOUBLE PRECISION,
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
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    """
    -- A credential's seal: the audit key's MAC over who it names, what it may do and whether
    -- it is revoked (tether.identity). A row without a valid one decides nothing.
    ALTER TABLE credentials ADD COLUMN seal TEXT;
    -- A run's effect count is counted where it is used, not kept by a trigger: a dropped
    -- trigger left a count that still matched after an effect row was deleted.
    DROP TABLE IF EXISTS effect_counts;
    DROP FUNCTION IF EXISTS tether_effect_counts() CASCADE;
    """,
    """
    -- The status index becomes one partial index per status anything lists often (the
    -- inbox: pending; the Temporal waker: approved, denied, edited): an approval used by its
    -- call writes no index entry. The call's latest approval is found in index order,
    -- unsorted. (agent_effects_run stays: it orders a run's effects.)
    DROP INDEX IF EXISTS approvals_status;
    CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';
    CREATE INDEX approvals_approved ON approvals (created_at) WHERE status = 'approved';
    CREATE INDEX approvals_denied ON approvals (created_at) WHERE status = 'denied';
    CREATE INDEX approvals_edited ON approvals (created_at) WHERE status = 'edited';
    DROP INDEX IF EXISTS approvals_call;
    CREATE INDEX approvals_call ON approvals (run_id, call_id, created_at);
    """,
]

# psycopg sends a script without parameters as one multi-statement query.
POSTGRES = migrations.Dialect(
    migrations=MIGRATIONS, mark="%s", float_type="DOUBLE PRECISION", split=lambda s: [s]
)

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
PROBE_TIMEOUT_S = 3

# The pool logs every failed connection attempt as a warning; the probe has already said why
# in one sentence. Quiet unless the application has configured the logger itself.
_POOL_LOG = logging.getLogger("psycopg.pool")
if _POOL_LOG.level == logging.NOTSET:
    _POOL_LOG.setLevel(logging.CRITICAL)


class _Returned:
    """A pipelined write's answer, read when asked (``Tx.check_writes``): whether it
    changed its one row (it says ``RETURNING 1``)."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def ok(self) -> bool:
        return len(self.cursor.fetchall()) == 1


class PostgresTx(SQLTx):
    """Row locks where they matter, and one audit chain per run.

    In a pipelined transaction (``PostgresStore._tx``) the gate's writes are sent without
    waiting for each: their row counts come back with the next read, and are checked before
    the commit (``Tx.check_writes``)."""

    EFFECT_ORDER = "operation_key"  # no rowid; created_at ties are rare, and any order will do
    MARK = "%s"
    APPROVAL_ORDER = "seq"

    def __init__(self, conn: Any, keys: AuditKeys, *, pipelined: bool = False) -> None:
        super().__init__(conn, keys)
        self.pipelined = pipelined

    def _changed(self, sql: str, params: tuple[Any, ...]) -> bool:
        if not self.pipelined:
            return super()._changed(sql, params)
        # A pipelined cursor has no row count until its answer is read: asked for a row.
        return _Returned(self._x(sql + " RETURNING 1", params)).ok()

    def _changed_later(self, sql: str, params: tuple[Any, ...]) -> bool | Pending:
        if not self.pipelined:
            return super()._changed(sql, params)
        return _Returned(self._x(sql + " RETURNING 1", params))

    def audit_chain(self, run_id: str | None) -> str:
        return run_id if run_id is not None else GLOBAL

    def lock_run(self, run_id: str) -> RunRecord | None:
        row = self._one(
            f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE run_id = %s FOR UPDATE", (run_id,)
        )
        return None if row is None else RunRecord.from_row(row)

    def claimable(self, now: float, limit: int) -> list[RunRecord]:
        # SKIP LOCKED: workers polling at once each get different runs, and none waits.
        retry = now - MODEL_RETRY_AFTER_S
        rows = self._all(f"{CLAIMABLE} FOR UPDATE SKIP LOCKED", (retry, now, limit))
        return [RunRecord.from_row(r) for r in rows]

    def _audit_head(self, chain: str) -> AuditHead | None:
        # FOR UPDATE: the head row is the chain's lock; appends to other chains do not wait.
        sql = "SELECT seq, hash FROM audit_heads WHERE chain = %s FOR UPDATE"
        row = self._one(sql, (chain,))
        if row is None:
            # A chain's first append: nothing to lock yet, so two writers could both start
            # it. Create the head (as an empty chain) first; a racing writer waits on it.
            self.c.execute(
                "INSERT INTO audit_heads (chain, seq, hash) VALUES (%s, 0, %s) "
                "ON CONFLICT DO NOTHING",
                (chain, GENESIS),
            )
            row = self._one(sql, (chain,))
        if row is None or row[0] == 0:
            return None
        return AuditHead(row[0], row[1])

    def _insert_audit(self, entry: AuditEntry) -> None:
        # The entry and its chain's new head in one statement: one round trip, not two.
        self.c.execute(
            "WITH entry AS ("
            " INSERT INTO audit_log (chain, seq, kind, run_id, prev_hash, hash, body, key_id, mac)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s))"
            " UPDATE audit_heads SET seq = %s, hash = %s WHERE chain = %s",
            (
                entry.chain,
                entry.seq,
                entry.kind,
                entry.run_id,
                entry.prev_hash,
                entry.hash,
                entry.body,
                entry.key_id,
                entry.mac,
                entry.seq,
                entry.hash,
                entry.chain,
            ),
        )

    def _set_audit_head(self, chain: str, head: AuditHead) -> None:
        pass  # done by _insert_audit, in the same statement

    def _unkeyed_audit(self) -> list[tuple[str, int, str]]:
        rows = self._all("SELECT chain, seq, hash FROM audit_log WHERE mac IS NULL", ())
        return [(r[0], r[1], r[2]) for r in rows]

    def _set_audit_mac(self, chain: str, seq: int, key_id: str, mac: str) -> None:
        self.c.execute(
            "UPDATE audit_log SET key_id = %s, mac = %s WHERE chain = %s AND seq = %s",
            (key_id, mac, chain, seq),
        )

    def lock_setup(self) -> None:
        # Workers starting at once on a new store: one adopts its key, the others wait.
        self.c.execute("SELECT pg_advisory_xact_lock(hashtext('tether-audit-key'))")


# libpq 14 and later: a transaction's statements go out without waiting for each answer.
PIPELINE = psycopg.Pipeline.is_supported()


@contextmanager
def _pipelined(conn: psycopg.Connection[Any], keys: AuditKeys) -> Iterator[PostgresTx]:
    """One transaction in pipeline mode: BEGIN goes out with the first statement, writes go
    out without waiting, and the server answers at each read, at the writes' check and at
    the commit. The gate's approved call costs five round trips (a read, the writes with
    the audit head, the commit; then the outcome with the head, and the commit) instead of
    fifteen. BEGIN and COMMIT are sent as statements (autocommit, for the transaction's
    length) so that neither waits for an answer of its own.

    What the invariants ask stays so: the audit entry is written in the transaction of the
    change it records (I4); every compare-and-swap is checked before COMMIT is sent, and one
    that lost raises and rolls the whole transaction back (I6, ``Tx.check_writes``); and
    ``Gate.call`` returns from the first transaction only after the server has answered
    its COMMIT, so ``dispatched`` is durable before the tool runs (I1)."""
    conn.autocommit = True
    try:
        try:
            with conn.pipeline():
                conn.execute("BEGIN")
                tx = PostgresTx(conn, keys, pipelined=True)
                yield tx
                tx.check_writes()
                conn.execute("COMMIT")
        finally:
            # An error anywhere (a statement the server refused, a write that lost, the
            # caller's exception) leaves the transaction open or failed: roll it back, out
            # of the pipeline, so the connection goes back to the pool clean.
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                # A server gone mid-way fails this too: the error that got here is the one
                # to report, and the pool discards a connection it cannot reset.
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
    finally:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    return _PASSWORD.sub(r"\1***@", url)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def probe(conninfo: str) -> None:
    """Fail fast, in one sentence, if the server cannot be reached or refuses us."""
    try:
        with psycopg.connect(conninfo, connect_timeout=PROBE_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        raise StoreUnavailable(
            f"cannot connect to PostgreSQL at {safe_url(conninfo)}: {_one_line(e)}"
        ) from None


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq URL without tether's own ``schema`` parameter, and that schema."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    if schema is not None and not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(f"schema {schema!r} must be a plain SQL identifier")
    return urlunsplit(parts._replace(query=rest)), schema


class PostgresStore(SQLStore):
    """The store in PostgreSQL; see the module docstring for how workers share it."""

    MARK = "%s"
    EFFECT_ORDER = "operation_key"
    APPROVAL_ORDER = "seq"
    AUDIT_SELECT = (
        "SELECT chain, seq, kind, run_id, prev_hash, hash, body, key_id, mac FROM audit_log "
        "ORDER BY id"
    )
    HEADS_SELECT = "SELECT chain, seq, hash FROM audit_heads"

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 8,
        connect_timeout_s: float = 10,
        create: bool = True,
        read_only: bool = False,
        keys: AuditKeys | None = None,
    ):
        self.url = url
        self.read_only = read_only
        self.keys = NO_KEYS  # until _attach_keys finds the store's own; reading needs none
        conninfo, self.schema = split_url(url)
        probe(conninfo)
        self._pool = self._open_pool(conninfo, max_connections, connect_timeout_s)
        try:
            if read_only or not create:
                self._check_schema(current_only=read_only)
            if not read_only:
                self.migrate()
            self._attach_keys(keys)
        except BaseException:
            self._pool.close()
            raise

    def _open_pool(
        self, conninfo: str, max_connections: int, timeout: float
    ) -> psycopg_pool.ConnectionPool[Any]:
        def configure(conn: psycopg.Connection[Any]) -> None:
            if self.schema is not None:
                conn.execute(f'SET search_path TO "{self.schema}"')
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
            conn.commit()

        try:
            pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                conninfo,
                min_size=1,
                max_size=max_connections,
                configure=configure,
                timeout=timeout,
                open=False,
            )
            pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {safe_url(conninfo)}: {_one_line(e)}"
            ) from None
        return pool

    def _check_schema(self, *, current_only: bool) -> None:
        """A command that must not create a store needs tether's tables to be there; one
        that only reads also needs them current (it migrates nothing)."""
        with self._pool.connection() as conn:
            row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
            if not (row and row[0]):
                raise StoreMissing(f"no tether store at {safe_url(self.url)}")
            current = migrations.schema_version(conn.execute)
        if current_only:
            migrations.check_current(current, POSTGRES, safe_url(self.url))

    def default_key_path(self, store_id: str | None) -> Path | None:
        return None if store_id is None else config_key_path(store_id)

    @property
    def schema_version(self) -> int:
        with self._pool.connection() as conn:
            return migrations.schema_version(conn.execute)

    def migrate(self) -> int:
        """Apply the migrations this database lacks; concurrent migrators take turns."""
        if self.read_only:
            raise ReadOnlyStore(f"{safe_url(self.url)} is open read-only; cannot migrate it")
        try:
            with self._pool.connection() as conn, conn.transaction():
                # The lock first: two CREATE SCHEMA IF NOT EXISTS at once can still collide.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether-migrate'))")
                if self.schema is not None:
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                return migrations.migrate(conn.execute, POSTGRES, safe_url(self.url))
        except psycopg.Error as e:
            raise StoreError(f"cannot migrate {safe_url(self.url)}: {_one_line(e)}") from e

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        if self.read_only:
            raise ReadOnlyStore(f"{safe_url(self.url)} is open read-only; nothing can be written")
        with self._tx() as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._tx() as tx:
            yield tx

    def _setup_transaction(self) -> AbstractContextManager[Tx]:
        return self._tx()

    @contextmanager
    def _tx(self) -> Iterator[Tx]:
        try:
            with self._pool.connection() as conn:
                if not PIPELINE:
                    with conn.transaction():
                        yield PostgresTx(conn, self.keys)
                    return
                with _pipelined(conn, self.keys) as tx:
                    yield tx
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"PostgreSQL transaction failed: {_one_line(e)}") from e

    @contextmanager
    def _read_snapshot(self) -> Iterator[Callable[[str], Iterator[tuple[Any, ...]]]]:
        # REPEATABLE READ: every query sees the database as of the first one. Each query runs
        # in a named (server-side) cursor, which hands over ``itersize`` rows at a time.
        names = itertools.count()
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

                def stream(sql: str) -> Iterator[tuple[Any, ...]]:
                    with conn.cursor(name=f"tether_evidence_{next(names)}") as cursor:
                        cursor.itersize = self.STREAM_BATCH
                        cursor.execute(sql)
                        yield from cursor

                yield stream
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"PostgreSQL query failed: {_one_line(e)}") from e

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._pool.connection() as conn:
                rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
                return rows
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"PostgreSQL query failed: {_one_line(e)}") from e

    def close(self) -> None:
        self._pool.close()
