"""What the SQL backends (SQLite, PostgreSQL) share: how records map to rows, and the
listing queries, which differ only in their placeholder and tie-break column."""

from __future__ import annotations

import abc
import json
from typing import Any

from tether.approvals import Approval, ApprovalStatus
from tether.ledger import Effect, EffectStatus
from tether.store.base import RunRecord, Store

EFFECT_COLUMNS = (
    "operation_key, run_id, call_id, tool_name, tool_version, argument_digest, status, "
    "result_digest, external_reference, result_json, error, attempts, created_at, updated_at"
)
RUN_COLUMNS = (
    "run_id, state_version, status, principal_id, tenant_id, policy_version, checkpoint_json, "
    "created_at, updated_at, lease_owner, lease_expires_at"
)


def effect_from_row(row: tuple[Any, ...]) -> Effect:
    return Effect(
        operation_key=row[0],
        run_id=row[1],
        call_id=row[2],
        tool_name=row[3],
        tool_version=row[4],
        argument_digest=row[5],
        status=EffectStatus(row[6]),
        result_digest=row[7],
        external_reference=row[8],
        result_json=row[9],
        error=row[10],
        attempts=row[11],
        created_at=row[12],
        updated_at=row[13],
    )


def effect_row(e: Effect) -> tuple[Any, ...]:
    return (
        e.operation_key,
        e.run_id,
        e.call_id,
        e.tool_name,
        e.tool_version,
        e.argument_digest,
        e.status.value,
        e.result_digest,
        e.external_reference,
        e.result_json,
        e.error,
        e.attempts,
        e.created_at,
        e.updated_at,
    )


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        state_version=row[1],
        status=row[2],
        principal_id=row[3],
        tenant_id=row[4],
        policy_version=row[5],
        checkpoint_json=row[6],
        created_at=row[7],
        updated_at=row[8],
        lease_owner=row[9],
        lease_expires_at=row[10],
    )


def run_row(run: RunRecord) -> tuple[Any, ...]:
    return (
        run.run_id,
        run.state_version,
        run.status,
        run.principal_id,
        run.tenant_id,
        run.policy_version,
        run.checkpoint_json,
        run.created_at,
        run.updated_at,
        run.lease_owner,
        run.lease_expires_at,
    )


def approval_filter(
    status: ApprovalStatus | None, run_id: str | None, mark: str
) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (with ``mark`` as the placeholder) for listing approvals."""
    clauses, params = [], []
    if status is not None:
        clauses.append(f"status = {mark}")
        params.append(status.value)
    if run_id is not None:
        clauses.append(f"run_id = {mark}")
        params.append(run_id)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), tuple(params)


class SQLStore(Store):
    """Listing, written once for both SQL backends."""

    MARK = "?"  # the driver's placeholder
    EFFECT_ORDER = "rowid"  # what breaks a tie in created_at, in insertion order
    APPROVAL_ORDER = "rowid"

    @abc.abstractmethod
    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        where, params = (f"WHERE status = {self.MARK}", (status,)) if status else ("", ())
        rows = self._query(
            f"SELECT {RUN_COLUMNS} FROM agent_runs {where} ORDER BY created_at, run_id", params
        )
        return [run_from_row(r) for r in rows]

    def list_effects(self, run_id: str | None = None) -> list[Effect]:
        where, params = (f"WHERE run_id = {self.MARK}", (run_id,)) if run_id else ("", ())
        rows = self._query(
            f"SELECT {EFFECT_COLUMNS} FROM agent_effects {where} "
            f"ORDER BY created_at, {self.EFFECT_ORDER}",
            params,
        )
        return [effect_from_row(r) for r in rows]

    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]:
        where, params = approval_filter(status, run_id, self.MARK)
        rows = self._query(
            f"SELECT record_json FROM approvals {where} ORDER BY created_at, {self.APPROVAL_ORDER}",
            params,
        )
        return [Approval.from_dict(json.loads(r[0])) for r in rows]
