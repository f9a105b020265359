"""What the SQL backends (SQLite, PostgreSQL) share: the statements that write and read
records (made from the records' own fields, ``tether.core.records``), the listing queries, which
differ only in their placeholder and tie-break column, and reading the evidence (log, heads
and row digests) in one snapshot.

The module is long because it holds all that both SQL backends share, so that neither
writes a statement of its own for a record.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.ledger import Effect, EffectStatus
from tether.core.lifecycle import MODEL_RETRY_AFTER_S
from tether.core.records import Record, shape
from tether.evidence.audit import AuditEntry, AuditHead
from tether.evidence.crosscheck import (
    APPROVAL,
    APPROVAL_COLUMNS,
    CREDENTIAL,
    EFFECT,
    EFFECT_COLUMNS,
    RUN,
    Evidence,
    row_digest,
    run_value,
)
from tether.evidence.keys import AuditKeys
from tether.store.base import Pending, Store, Tx
from tether.store.rows import CallView, CredentialRecord, NotificationRecord, RunRecord, StepRecord

RUN_COLUMNS = RunRecord.columns()
# Store.claimable in one statement. A run without a conversation (its own code or framework
# drives it) is never claimable; EXISTS reads run_messages' primary key (run_id, seq).
CLAIMABLE = (
    f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE (status IN ('queued', 'running') "
    "OR (status = 'awaiting_model' AND updated_at < ?)) "
    "AND (lease_owner IS NULL OR lease_expires_at < ?) "
    "AND EXISTS (SELECT 1 FROM run_messages m WHERE m.run_id = agent_runs.run_id) "
    "ORDER BY updated_at LIMIT ?"
)
CREDENTIAL_COLUMNS = CredentialRecord.columns()
STEP_COLUMNS = StepRecord.columns()
NOTIFICATION_COLUMNS = NotificationRecord.columns()


def insert(table: str, columns: str) -> str:
    """An insert of one row into these columns; "the key exists" is a row count of 0."""
    marks = ", ".join("?" for _ in columns.split(","))
    return f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"


def assignments(record: type[Record]) -> str:
    """``a = ?, b = ?`` for the columns an update of ``record`` writes (the fields not
    annotated ``FIXED``), in the order ``changing_cells`` gives their values."""
    return ", ".join(f"{c} = ?" for c in record.changing_columns())


INSERT_RUN = insert("agent_runs", RUN_COLUMNS)
INSERT_EFFECT = insert("agent_effects", EFFECT_COLUMNS)
INSERT_APPROVAL = insert("approvals", APPROVAL_COLUMNS)
INSERT_CREDENTIAL = insert("credentials", CREDENTIAL_COLUMNS)
INSERT_STEP = insert("run_steps", f"run_id, {STEP_COLUMNS}")
CAS_RUN = f"UPDATE agent_runs SET {assignments(RunRecord)} WHERE run_id = ? AND state_version = ?"
CAS_EFFECT = (
    f"UPDATE agent_effects SET {assignments(Effect)} WHERE operation_key = ? AND status = ?"
)
UPDATE_CREDENTIAL = (
    f"UPDATE credentials SET {assignments(CredentialRecord)} WHERE credential_id = ?"
)
INSERT_NOTIFICATION = insert("notifications", NOTIFICATION_COLUMNS)
CAS_NOTIFICATION = (
    f"UPDATE notifications SET {assignments(NotificationRecord)} "
    "WHERE notification_id = ? AND attempts = ?"
)
RUN_WIDTH, EFFECT_WIDTH = len(shape(RunRecord).names), len(shape(Effect).names)
# Where an update's cells sit in the row: ``CAS_EFFECT`` takes them from the row made once.
EFFECT_CHANGING = tuple(shape(Effect).names.index(n) for n in Effect.changing_columns())


# The gate's write of a run: its checkpoint and time (``Tx.write_checkpoint``). The status is
# not written back unchanged, which would still rewrite its index entry.
CAS_CHECKPOINT = (
    "UPDATE agent_runs SET state_version = ?, checkpoint_json = ?, updated_at = ? "
    "WHERE run_id = ? AND state_version = ?"
)


@cache
def call_view_sql(approval_order: str, count: bool = True) -> str:
    """The gate's one read per call (``Tx.call_view``): the run, the call's effect, the
    latest approval for the call (ordered as ``find_approval`` orders them) and how many
    effect rows the run has, counted (one index range; a count kept by a trigger is only as
    good as the trigger, which whoever edits rows can drop). The run and effect are LEFT JOINed
    to a one-row FROM, so what is missing comes back as NULLs rather than as no row. Without
    ``count`` the last column only echoes its parameter (kept, so the parameters are the same
    either way) and the caller already knows the count."""
    counted = "(SELECT count(*) FROM agent_effects WHERE run_id = ?)" if count else "?"
    return (
        f"SELECT {RunRecord.columns('r')}, {Effect.columns('e')}, "
        "(SELECT record_json FROM approvals WHERE run_id = ? AND call_id = ? "
        f"ORDER BY created_at DESC, {approval_order} DESC LIMIT 1), "
        f"{counted} "
        "FROM (SELECT 1 AS one) AS one "
        "LEFT JOIN agent_runs r ON r.run_id = ? "
        "LEFT JOIN agent_effects e ON e.run_id = ? AND e.call_id = ?"
    )


def approval_filter(
    status: ApprovalStatus | None, run_id: str | None, mark: str
) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (with ``mark`` as the placeholder) for listing approvals."""
    clauses, params = [], []
    if status is not None:
        # Written out, not bound: a partial index (one per status listed often) is then
        # usable whatever the planner makes of a bound value (PostgreSQL's generic plans
        # cannot use one). The value is the enum's own, never input.
        clauses.append(f"status = '{ApprovalStatus(status).value}'")
    if run_id is not None:
        clauses.append(f"run_id = {mark}")
        params.append(run_id)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), tuple(params)


class SQLStore(Store):
    """Listing and reading the evidence, written once for both SQL backends."""

    MARK = "?"  # the driver's placeholder
    EFFECT_ORDER = "rowid"  # what breaks a tie in created_at, in insertion order
    APPROVAL_ORDER = "rowid"
    # Every audit entry in append order, as (chain, seq, kind, run_id, prev_hash, hash, body,
    # key_id, mac): ``AuditRow``, which ``LogReplay`` verifies without building entries.
    AUDIT_SELECT = ""
    HEADS_SELECT = ""  # every chain's head as (chain, seq, hash)
    STREAM_BATCH = 2000  # rows fetched at a time while streaming the evidence

    @abc.abstractmethod
    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...

    @abc.abstractmethod
    def _read_snapshot(self) -> AbstractContextManager[Callable[[str], Iterator[tuple[Any, ...]]]]:
        """One read-only snapshot of the database, and within it a function that streams a
        query's rows a batch at a time (never the whole result in memory)."""

    def audit_entry(self, row: tuple[Any, ...]) -> AuditEntry:
        return AuditEntry(
            chain=row[0],
            seq=row[1],
            kind=row[2],
            run_id=row[3],
            prev_hash=row[4],
            hash=row[5],
            body=row[6],
            key_id=row[7],
            mac=row[8],
        )

    def audit_entries(self) -> Iterator[AuditEntry]:
        for row in self._query(self.AUDIT_SELECT):
            yield self.audit_entry(row)

    def audit_heads(self) -> dict[str, AuditHead]:
        return {r[0]: AuditHead(r[1], r[2]) for r in self._query(self.HEADS_SELECT)}

    @contextmanager
    def evidence(self) -> Iterator[Evidence]:
        with self._read_snapshot() as stream:
            heads = {r[0]: AuditHead(r[1], r[2]) for r in stream(self.HEADS_SELECT)}
            yield Evidence(
                stream(self.AUDIT_SELECT), heads, lambda: state_rows(stream, self.sealing_keys)
            )

    def state_digests(self) -> dict[str, str]:
        return state_digests(*(self._query(q) for q in STATE_QUERIES))

    def audit_tail(
        self, *, run_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[AuditEntry]:
        clauses, params = [], []
        if run_id is not None:
            clauses.append(f"run_id = {self.MARK}")
            params.append(run_id)
        if kind is not None:
            clauses.append(f"kind = {self.MARK}")
            params.append(kind)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        select, _, order = self.AUDIT_SELECT.partition(" ORDER BY ")
        rows = self._query(
            f"{select}{where} ORDER BY {order} DESC LIMIT {int(limit)}", tuple(params)
        )
        return [self.audit_entry(r) for r in reversed(rows)]

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        where, params = (f"WHERE status = {self.MARK}", (status,)) if status else ("", ())
        rows = self._query(
            f"SELECT {RUN_COLUMNS} FROM agent_runs {where} ORDER BY created_at, run_id", params
        )
        return [RunRecord.from_row(r) for r in rows]

    def list_effects(self, run_id: str | None = None) -> list[Effect]:
        where, params = (f"WHERE run_id = {self.MARK}", (run_id,)) if run_id else ("", ())
        rows = self._query(
            f"SELECT {EFFECT_COLUMNS} FROM agent_effects {where} "
            f"ORDER BY created_at, {self.EFFECT_ORDER}",
            params,
        )
        return [Effect.from_row(r) for r in rows]

    def list_credentials(self) -> list[CredentialRecord]:
        rows = self._query(
            f"SELECT {CREDENTIAL_COLUMNS} FROM credentials ORDER BY created_at, credential_id"
        )
        return [CredentialRecord.from_row(r) for r in rows]

    def list_notifications(self) -> list[NotificationRecord]:
        rows = self._query(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications ORDER BY created_at, notification_id"
        )
        return [NotificationRecord.from_row(r) for r in rows]

    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]:
        where, params = approval_filter(status, run_id, self.MARK)
        rows = self._query(
            f"SELECT record_json FROM approvals {where} ORDER BY created_at, {self.APPROVAL_ORDER}",
            params,
        )
        return [approval_from_json(r[0]) for r in rows]


STATE_QUERIES = (
    f"SELECT {EFFECT_COLUMNS} FROM agent_effects",
    f"SELECT {APPROVAL_COLUMNS} FROM approvals",
    "SELECT r.run_id, r.status, r.principal_id, r.tenant_id, r.checkpoint_json, "
    "(SELECT count(*) FROM agent_effects e WHERE e.run_id = r.run_id) FROM agent_runs r",
    f"SELECT {CREDENTIAL_COLUMNS} FROM credentials",
)


def state_digests(
    effects: list[tuple[Any, ...]],
    approvals: list[tuple[Any, ...]],
    runs: list[tuple[Any, ...]],
    credentials: list[tuple[Any, ...]],
) -> dict[str, str]:
    """Row digests straight from the rows as stored: a row edited into something that no
    longer parses as a record is still just a row whose digest does not match. (What an
    adopted log records; a run's row is checked on its own, so it records "".)"""
    return {
        **{EFFECT + str(r[0]): row_digest(r) for r in effects},
        **{APPROVAL + str(r[0]): row_digest(r) for r in approvals},
        **{RUN + str(r[0]): "" for r in runs},
        **{CREDENTIAL + str(r[0]): row_digest(r) for r in credentials},
    }


def approval_from_json(record_json: str) -> Approval:
    return Approval.from_dict(json.loads(record_json))


def state_rows(
    stream: Callable[[str], Iterator[tuple[Any, ...]]], keys: AuditKeys | None
) -> Iterator[tuple[str, str]]:
    """The state as ``check_state`` reads it, streamed a row at a time: each effect's,
    approval's and credential's digest, and what is wrong with each run row ("" if
    nothing; its seals checked with ``keys`` unless None)."""
    effects, approvals, runs, credentials = STATE_QUERIES
    for r in stream(effects):
        yield EFFECT + str(r[0]), row_digest(r)
    for r in stream(approvals):
        yield APPROVAL + str(r[0]), row_digest(r)
    for run_id, status, principal_id, tenant_id, checkpoint_json, count in stream(runs):
        columns = (status, principal_id, tenant_id)
        yield RUN + str(run_id), run_value(keys, run_id, columns, checkpoint_json, int(count))
    for r in stream(credentials):
        yield CREDENTIAL + str(r[0]), row_digest(r)


def approval_from_row(row: tuple[Any, ...] | None) -> Approval | None:
    return None if row is None else approval_from_json(row[0])


class SQLTx(Tx):
    """The transaction primitives both SQL backends run alike. Statements are written with
    ``?`` and sent with the driver's placeholder; inserts say ON CONFLICT DO NOTHING (both
    SQLite and PostgreSQL understand it), so "the key exists" is a row count, not an error."""

    MARK = "?"
    APPROVAL_ORDER = "rowid"
    EFFECT_ORDER = "rowid"

    def __init__(self, conn: Any, keys: AuditKeys) -> None:
        super().__init__(keys)
        self.c = conn

    def _x(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.c.execute(sql if self.MARK == "?" else sql.replace("?", self.MARK), params)

    def _one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._x(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._x(sql, params).fetchall()
        return rows

    def _changed(self, sql: str, params: tuple[Any, ...]) -> bool:
        return bool(self._x(sql, params).rowcount == 1)

    def _changed_later(self, sql: str, params: tuple[Any, ...]) -> bool | Pending:
        """``_changed`` for the gate's writes, whose failure only raises: a backend that
        pipelines them answers later (``Tx.check_writes``)."""
        return self._changed(sql, params)

    # -- reads -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._one(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE run_id = ?", (run_id,))
        return None if row is None else RunRecord.from_row(row)

    def _runs_with_status(self, status: str) -> list[RunRecord]:
        rows = self._all(f"SELECT {RUN_COLUMNS} FROM agent_runs WHERE status = ?", (status,))
        return [RunRecord.from_row(r) for r in rows]

    def claimable(self, now: float, limit: int) -> list[RunRecord]:
        retry = now - MODEL_RETRY_AFTER_S
        return [RunRecord.from_row(r) for r in self._all(CLAIMABLE, (retry, now, limit))]

    def get_effect(self, operation_key: str) -> Effect | None:
        row = self._one(
            f"SELECT {EFFECT_COLUMNS} FROM agent_effects WHERE operation_key = ?",
            (operation_key,),
        )
        return None if row is None else Effect.from_row(row)

    def effect_for_call(self, run_id: str, call_id: str) -> Effect | None:
        row = self._one(
            f"SELECT {EFFECT_COLUMNS} FROM agent_effects WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        )
        return None if row is None else Effect.from_row(row)

    def count_effects(self, run_id: str) -> int:
        row = self._one("SELECT count(*) FROM agent_effects WHERE run_id = ?", (run_id,))
        return 0 if row is None else int(row[0])

    def call_view(self, run_id: str, call_id: str) -> CallView:
        return self._call_view(run_id, call_id, None)

    def _call_view(self, run_id: str, call_id: str, count: int | None) -> CallView:
        """``call_view``, counting the run's effects unless ``count`` already says how many."""
        # One statement, one round trip: the gate reads this at every call.
        row = self._one(
            call_view_sql(self.APPROVAL_ORDER, count is None),
            (run_id, call_id, run_id, run_id, run_id, call_id),
        )
        assert row is not None  # the FROM is one row, whatever the joins find
        run, effect = row[:RUN_WIDTH], row[RUN_WIDTH : RUN_WIDTH + EFFECT_WIDTH]
        approval_json, counted = row[RUN_WIDTH + EFFECT_WIDTH :]
        if count is None:
            count = 0 if counted is None else int(counted)
        return CallView(
            run=None if run[0] is None else RunRecord.from_row(run),
            effect=None if effect[0] is None else Effect.from_row(effect),
            approval=None if approval_json is None else approval_from_json(approval_json),
            effect_count=count,
        )

    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM tether_meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def _insert_meta(self, key: str, value: str) -> bool:
        return self._changed(
            "INSERT INTO tether_meta (key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (key, value),
        )

    def _update_meta(self, key: str, value: str) -> bool:
        return self._changed("UPDATE tether_meta SET value = ? WHERE key = ?", (value, key))

    def credential_by_hash(self, token_hash: str) -> CredentialRecord | None:
        row = self._one(
            f"SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE token_hash = ?", (token_hash,)
        )
        return None if row is None else CredentialRecord.from_row(row)

    def get_credential(self, credential_id: str) -> CredentialRecord | None:
        row = self._one(
            f"SELECT {CREDENTIAL_COLUMNS} FROM credentials WHERE credential_id = ?",
            (credential_id,),
        )
        return None if row is None else CredentialRecord.from_row(row)

    def _insert_credential(self, c: CredentialRecord) -> bool:
        return self._changed(INSERT_CREDENTIAL, c.row())

    def _update_credential(self, c: CredentialRecord) -> bool:
        return self._changed(UPDATE_CREDENTIAL, (*c.changing_cells(), c.credential_id))

    def get_approval(self, approval_id: str) -> Approval | None:
        return approval_from_row(
            self._one("SELECT record_json FROM approvals WHERE approval_id = ?", (approval_id,))
        )

    def approvals_for_run(self, run_id: str) -> list[Approval]:
        rows = self._all(
            "SELECT record_json FROM approvals WHERE run_id = ? "
            f"ORDER BY created_at, {self.APPROVAL_ORDER}",
            (run_id,),
        )
        return [approval_from_json(r[0]) for r in rows]

    def find_approval(self, run_id: str, call_id: str) -> Approval | None:
        return approval_from_row(
            self._one(
                "SELECT record_json FROM approvals WHERE run_id = ? AND call_id = ? "
                f"ORDER BY created_at DESC, {self.APPROVAL_ORDER} DESC LIMIT 1",
                (run_id, call_id),
            )
        )

    def messages(self, run_id: str) -> list[str]:
        rows = self._all("SELECT body FROM run_messages WHERE run_id = ? ORDER BY seq", (run_id,))
        return [r[0] for r in rows]

    def steps(self, run_id: str) -> list[StepRecord]:
        rows = self._all(
            f"SELECT {STEP_COLUMNS} FROM run_steps WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return [StepRecord.from_row(r) for r in rows]

    def inputs(self, run_id: str) -> list[tuple[str, str]]:
        rows = self._all(
            "SELECT source, body FROM run_inputs WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return [(r[0], r[1]) for r in rows]

    def run_effects(self, run_id: str) -> list[Effect]:
        rows = self._all(
            f"SELECT {EFFECT_COLUMNS} FROM agent_effects WHERE run_id = ? "
            f"ORDER BY created_at, {self.EFFECT_ORDER}",
            (run_id,),
        )
        return [Effect.from_row(r) for r in rows]

    # -- writes ------------------------------------------------------------------------------
    def _insert_input(self, run_id: str, seq: int, source: str, body: str, at: float) -> bool:
        return self._changed(
            "INSERT INTO run_inputs VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (run_id, seq, source, body, at),
        )

    def _insert_message(self, run_id: str, seq: int, body: str) -> bool:
        return self._changed(
            "INSERT INTO run_messages VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (run_id, seq, body),
        )

    def _insert_step(self, run_id: str, step: StepRecord) -> bool:
        return self._changed(INSERT_STEP, (run_id, *step.row()))

    def _insert_run(self, run: RunRecord) -> bool:
        return self._changed(INSERT_RUN, run.row())

    def _cas_run(self, run: RunRecord, expected_version: int) -> bool:
        return self._changed(CAS_RUN, (*run.changing_cells(), run.run_id, expected_version))

    def _cas_checkpoint(self, run: RunRecord, expected_version: int) -> bool | Pending:
        return self._changed_later(
            CAS_CHECKPOINT,
            (
                run.state_version,
                run.checkpoint_json,
                float(run.updated_at),
                run.run_id,
                expected_version,
            ),
        )

    def _renew_lease(self, run_id: str, owner: str, until: float) -> bool:
        return self._changed(
            "UPDATE agent_runs SET lease_expires_at = ? WHERE run_id = ? AND lease_owner = ?",
            (until, run_id, owner),
        )

    def _insert_effect(self, effect: Effect, cells: tuple[Any, ...]) -> bool | Pending:
        return self._changed_later(INSERT_EFFECT, cells)

    def _cas_effect(
        self, effect: Effect, expected: EffectStatus, cells: tuple[Any, ...]
    ) -> bool | Pending:
        changing = tuple(cells[i] for i in EFFECT_CHANGING)
        return self._changed_later(CAS_EFFECT, (*changing, effect.operation_key, expected.value))

    def _insert_approval(self, approval: Approval, cells: tuple[Any, ...]) -> bool:
        return self._changed(INSERT_APPROVAL, cells)

    def get_notification(self, notification_id: str) -> NotificationRecord | None:
        row = self._one(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE notification_id = ?",
            (notification_id,),
        )
        return None if row is None else NotificationRecord.from_row(row)

    def due_notifications(self, now: float, limit: int) -> list[NotificationRecord]:
        rows = self._all(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications "
            "WHERE delivered_at IS NULL AND next_attempt_at <= ? "
            "ORDER BY created_at, notification_id LIMIT ?",
            (now, limit),
        )
        return [NotificationRecord.from_row(r) for r in rows]

    def _insert_notification(self, n: NotificationRecord) -> bool:
        return self._changed(INSERT_NOTIFICATION, n.row())

    def _cas_notification(self, n: NotificationRecord, expected_attempts: int) -> bool:
        return self._changed(
            CAS_NOTIFICATION, (*n.changing_cells(), n.notification_id, expected_attempts)
        )

    def _cas_approval(
        self, approval: Approval, expected: ApprovalStatus, cells: tuple[Any, ...]
    ) -> bool | Pending:
        # Of the indexed columns only the status ever changes; the record carries the rest
        # (the last cell: its canonical JSON, encoded once by the caller).
        return self._changed_later(
            "UPDATE approvals SET status = ?, record_json = ? WHERE approval_id = ? AND status = ?",
            (approval.status.value, cells[-1], approval.approval_id, expected.value),
        )
