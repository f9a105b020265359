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
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.audit import GENESIS, GLOBAL, AuditEntry, AuditHead
from tether.errors import ConfigurationError, StoreError
from tether.store.base import RunRecord, Tx
from tether.store.sql import (
    RUN_COLUMNS,
    SQLStore,
    SQLTx,
    run_from_row,
)

try:
    import psycopg
    import psycopg_pool
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the PostgreSQL store needs psycopg 3: pip install 'tether[postgres]'") from e

# Position in this list is the schema version; append, never edit.
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
]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresTx(SQLTx):
    """Row locks where they matter, and one audit chain per run."""

    MARK = "%s"
    APPROVAL_ORDER = "seq"

    def audit_chain(self, run_id: str | None) -> str:
        return run_id if run_id is not None else GLOBAL

    def lock_run(self, run_id: str) -> RunRecord | None:
        row = self._one(
            f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE run_id = %s FOR UPDATE", (run_id,)
        )
        return None if row is None else run_from_row(row)

    def claimable(self, now: float, limit: int) -> list[RunRecord]:
        # SKIP LOCKED: workers polling at once each get different runs, and none waits.
        rows = self.c.execute(
            f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE status IN ('queued', 'running') "
            "AND (lease_owner IS NULL OR lease_expires_at < %s) "
            "ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED",
            (now, limit),
        ).fetchall()
        return [run_from_row(r) for r in rows]

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
            " INSERT INTO audit_log (chain, seq, kind, run_id, prev_hash, hash, body)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s))"
            " UPDATE audit_heads SET seq = %s, hash = %s WHERE chain = %s",
            (
                entry.chain,
                entry.seq,
                entry.kind,
                entry.run_id,
                entry.prev_hash,
                entry.hash,
                entry.body,
                entry.seq,
                entry.hash,
                entry.chain,
            ),
        )

    def _set_audit_head(self, chain: str, head: AuditHead) -> None:
        pass  # done by _insert_audit, in the same statement


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

    def __init__(self, url: str, *, max_connections: int = 8, connect_timeout_s: float = 10):
        self.url = url
        conninfo, self.schema = split_url(url)

        def configure(conn: psycopg.Connection[Any]) -> None:
            if self.schema is not None:
                conn.execute(f'SET search_path TO "{self.schema}"')
                conn.commit()

        try:
            self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                conninfo,
                min_size=1,
                max_size=max_connections,
                configure=configure,
                timeout=connect_timeout_s,
                open=False,
            )
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"cannot connect to PostgreSQL at {conninfo}: {e}") from e
        self.migrate()

    @property
    def schema_version(self) -> int:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        return int(row[0]) if row else 0

    def migrate(self) -> int:
        """Apply the migrations this database lacks; concurrent migrators take turns."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                if self.schema is not None:
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether-migrate'))")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
                )
                row = conn.execute(
                    "SELECT coalesce(max(version), 0) FROM schema_migrations"
                ).fetchone()
                current = int(row[0]) if row else 0
                if current > len(MIGRATIONS):
                    raise StoreError(
                        f"the database has schema version {current}, newer than this tether "
                        f"({len(MIGRATIONS)}); upgrade tether"
                    )
                for version, script in enumerate(MIGRATIONS[current:], start=current + 1):
                    conn.execute(script)  # psycopg sends it as one multi-statement query
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (%s, extract(epoch from now()))",
                        (version,),
                    )
        except psycopg.Error as e:
            raise StoreError(f"cannot migrate {self.url}: {e}") from e
        return len(MIGRATIONS)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield PostgresTx(conn)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"PostgreSQL transaction failed: {e}") from e

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._pool.connection() as conn:
                rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
                return rows
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as e:
            raise StoreError(f"PostgreSQL query failed: {e}") from e

    def audit_entries(self) -> Iterator[AuditEntry]:
        rows = self._query(
            "SELECT chain, seq, kind, run_id, prev_hash, hash, body FROM audit_log ORDER BY id"
        )
        for r in rows:
            yield AuditEntry(
                chain=r[0], seq=r[1], kind=r[2], run_id=r[3], prev_hash=r[4], hash=r[5], body=r[6]
            )

    def audit_heads(self) -> dict[str, AuditHead]:
        rows = self._query("SELECT chain, seq, hash FROM audit_heads")
        return {r[0]: AuditHead(r[1], r[2]) for r in rows}

    def close(self) -> None:
        self._pool.close()
