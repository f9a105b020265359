"""The store contract every backend implements, and the records it holds.

All writes happen inside ``Store.transaction()``: the gate changes an effect, a run and an
approval, and appends the audit entry recording it, in one transaction (invariant I4), so a
crash leaves either all of it or none. Backends implement the small ``_``-prefixed primitives;
the rules (compare-and-swap on run versions, status checks on effects and approvals, chaining
audit entries) live here once, so every backend enforces them the same way.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from tether.approvals import Approval, ApprovalStatus
from tether.audit import CHAINS, MAIN, AuditEntry, AuditHead, AuditReport, make_entry, verify_chains
from tether.errors import InvalidTransition, OperationConflict, StaleState, StoreError
from tether.ledger import Effect, EffectStatus


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """Seed 000's ``agent_runs`` row, plus timestamps."""

    run_id: str
    state_version: int
    status: str
    principal_id: str
    tenant_id: str
    policy_version: str
    checkpoint_json: str
    created_at: float
    updated_at: float
    # Who is driving the run, and until when; a run whose lease has expired is free to claim.
    lease_owner: str | None = None
    lease_expires_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state_version": self.state_version,
            "status": self.status,
            "principal_id": self.principal_id,
            "tenant_id": self.tenant_id,
            "policy_version": self.policy_version,
            "checkpoint_json": self.checkpoint_json,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "lease_owner": self.lease_owner,
            "lease_expires_at": self.lease_expires_at,
        }


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One step of a run as ``tether runs show`` prints it (seed 004's step kinds)."""

    seq: int
    turn: int
    kind: str
    detail: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "turn": self.turn,
            "kind": self.kind,
            "detail": self.detail,
            "at": self.at,
        }


@dataclass(frozen=True)
class CredentialRecord:
    """A stored credential: who it names, what kind of identity, and only the hash of its
    secret (the secret itself is shown once, when it is made, and never stored)."""

    credential_id: str
    name: str
    kind: str  # "approver" or "principal"
    token_hash: str
    record_json: str  # tenants, scopes and the rest, as canonical JSON
    created_at: float
    revoked_at: float | None = None


class Tx(abc.ABC):
    """One open transaction. Public methods enforce the contract; backends fill in the rest."""

    # -- runs --------------------------------------------------------------------------------
    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None: ...

    def lock_run(self, run_id: str) -> RunRecord | None:
        """The run, locked until this transaction ends where the backend has row locks (so
        two claimers queue instead of both reading the same version)."""
        return self.get_run(run_id)

    def renew_lease(self, run_id: str, owner: str, until: float) -> bool:
        """Extend ``owner``'s lease; False if it no longer holds it. A lease is not run
        state, so this does not bump ``state_version`` (the holder's own writes would lose
        their compare-and-swap to their own heartbeat)."""
        return self._renew_lease(run_id, owner, until)

    def claimable(self, now: float, limit: int) -> list[RunRecord]:
        """Runs a worker may claim now: queued, or running with an expired or no lease.
        Backends with row locks lock them and skip those another worker has locked."""
        found = [
            r
            for status in ("queued", "running")
            for r in self._runs_with_status(status)
            if r.lease_owner is None or (r.lease_expires_at or 0) < now
        ]
        return sorted(found, key=lambda r: r.updated_at)[:limit]

    def insert_run(self, run: RunRecord) -> None:
        if not self._insert_run(run):
            raise StoreError(f"run {run.run_id} already exists; choose another run id")

    def update_run(self, run: RunRecord, **changes: Any) -> RunRecord:
        """Write ``run`` (with ``changes``) if the stored version is still
        ``run.state_version``; bump it (I6)."""
        new = replace(run, state_version=run.state_version + 1, **changes)
        if not self._cas_run(new, run.state_version):
            current = self.get_run(run.run_id)
            raise StaleState(
                run.run_id, run.state_version, None if current is None else current.state_version
            )
        return new

    # -- a run's conversation and steps: one small row each, never the whole history again ----
    def append_message(self, run_id: str, seq: int, body: str) -> None:
        if not self._insert_message(run_id, seq, body):
            raise StoreError(f"run {run_id} already has message {seq}; reload the run")

    @abc.abstractmethod
    def messages(self, run_id: str) -> list[str]:
        """The run's messages as stored (JSON text), in order."""

    def append_step(self, run_id: str, step: StepRecord) -> None:
        if not self._insert_step(run_id, step):
            raise StoreError(f"run {run_id} already has step {step.seq}; reload the run")

    @abc.abstractmethod
    def steps(self, run_id: str) -> list[StepRecord]: ...

    # -- effects -----------------------------------------------------------------------------
    @abc.abstractmethod
    def get_effect(self, operation_key: str) -> Effect | None: ...

    def insert_effect(self, effect: Effect) -> None:
        if not self._insert_effect(effect):
            raise OperationConflict(effect.operation_key)

    def update_effect(self, effect: Effect, expected: EffectStatus) -> None:
        if not self._cas_effect(effect, expected):
            current = self.get_effect(effect.operation_key)
            raise InvalidTransition(
                effect.operation_key,
                "missing" if current is None else current.status.value,
                effect.status.value,
            )

    @abc.abstractmethod
    def effect_for_call(self, run_id: str, call_id: str) -> Effect | None:
        """The effect recorded for this call, whatever tool version it ran under (I2: a
        call's identity is ``(run_id, call_id)``)."""

    @abc.abstractmethod
    def count_effects(self, run_id: str) -> int:
        """How many effects the ledger holds for a run."""

    # -- store metadata (its id, its audit key's fingerprint) ---------------------------------
    @abc.abstractmethod
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None:
        if not self._insert_meta(key, value):
            self._update_meta(key, value)

    # -- credentials -------------------------------------------------------------------------
    @abc.abstractmethod
    def credential_by_hash(self, token_hash: str) -> CredentialRecord | None: ...

    @abc.abstractmethod
    def get_credential(self, credential_id: str) -> CredentialRecord | None: ...

    def insert_credential(self, credential: CredentialRecord) -> None:
        if not self._insert_credential(credential):
            raise StoreError(f"credential {credential.credential_id} already exists")

    def update_credential(self, credential: CredentialRecord) -> None:
        if not self._update_credential(credential):
            raise StoreError(f"no credential {credential.credential_id}")

    # -- approvals ---------------------------------------------------------------------------
    @abc.abstractmethod
    def get_approval(self, approval_id: str) -> Approval | None: ...

    @abc.abstractmethod
    def find_approval(self, run_id: str, call_id: str) -> Approval | None:
        """The most recent approval requested for this call, if any."""

    @abc.abstractmethod
    def approvals_for_run(self, run_id: str) -> list[Approval]: ...

    def insert_approval(self, approval: Approval) -> None:
        if not self._insert_approval(approval):
            raise StoreError(f"approval {approval.approval_id} already exists")

    def update_approval(self, approval: Approval, expected: ApprovalStatus) -> None:
        if not self._cas_approval(approval, expected):
            raise StoreError(
                f"approval {approval.approval_id} changed while it was being decided; "
                "list it again and retry"
            )

    # -- audit -------------------------------------------------------------------------------
    def append_audit(
        self,
        kind: str,
        *,
        at: float,
        run_id: str | None = None,
        actor: str | None = None,
        data: Mapping[str, Any] | None = None,
        redactions: tuple[str, ...] | list[str] = (),
    ) -> AuditEntry:
        chain = self.audit_chain(run_id)
        head = self._audit_head(chain)
        if head is None and chain not in (MAIN, CHAINS):
            # A new chain is recorded first, so that losing it whole is detectable.
            self._append(CHAINS, "chain_started", at, None, None, {"chain": chain}, ())
        return self._append(chain, kind, at, run_id, actor, data or {}, redactions, head)

    def _append(
        self,
        chain: str,
        kind: str,
        at: float,
        run_id: str | None,
        actor: str | None,
        data: Mapping[str, Any],
        redactions: tuple[str, ...] | list[str],
        head: AuditHead | None = None,
    ) -> AuditEntry:
        entry = make_entry(
            head if head is not None else self._audit_head(chain),
            chain=chain,
            at=at,
            kind=kind,
            run_id=run_id,
            actor=actor,
            data=data,
            redactions=redactions,
        )
        self._insert_audit(entry)
        self._set_audit_head(chain, AuditHead(entry.seq, entry.hash))
        return entry

    def audit_chain(self, run_id: str | None) -> str:
        """Which chain an entry goes to: one chain unless a backend shards by run."""
        return MAIN

    # -- backend primitives ------------------------------------------------------------------
    # Inserts return False when the key exists (the backend's own unique constraint decides,
    # which saves a read and cannot race); compare-and-swaps return False when they lost.
    @abc.abstractmethod
    def _insert_run(self, run: RunRecord) -> bool: ...

    @abc.abstractmethod
    def _cas_run(self, run: RunRecord, expected_version: int) -> bool: ...

    @abc.abstractmethod
    def _renew_lease(self, run_id: str, owner: str, until: float) -> bool: ...

    @abc.abstractmethod
    def _runs_with_status(self, status: str) -> list[RunRecord]: ...

    @abc.abstractmethod
    def _insert_message(self, run_id: str, seq: int, body: str) -> bool: ...

    @abc.abstractmethod
    def _insert_step(self, run_id: str, step: StepRecord) -> bool: ...

    @abc.abstractmethod
    def _insert_effect(self, effect: Effect) -> bool: ...

    @abc.abstractmethod
    def _cas_effect(self, effect: Effect, expected: EffectStatus) -> bool: ...

    @abc.abstractmethod
    def _insert_approval(self, approval: Approval) -> bool: ...

    @abc.abstractmethod
    def _cas_approval(self, approval: Approval, expected: ApprovalStatus) -> bool: ...

    @abc.abstractmethod
    def _insert_meta(self, key: str, value: str) -> bool: ...

    @abc.abstractmethod
    def _update_meta(self, key: str, value: str) -> bool: ...

    @abc.abstractmethod
    def _insert_credential(self, credential: CredentialRecord) -> bool: ...

    @abc.abstractmethod
    def _update_credential(self, credential: CredentialRecord) -> bool: ...

    @abc.abstractmethod
    def _audit_head(self, chain: str) -> AuditHead | None:
        """The chain's head, locked for this transaction where the backend has row locks."""

    @abc.abstractmethod
    def _insert_audit(self, entry: AuditEntry) -> None: ...

    @abc.abstractmethod
    def _set_audit_head(self, chain: str, head: AuditHead) -> None: ...


class Store(abc.ABC):
    """A durable home for runs, effects, approvals and the audit log."""

    url: str

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[Tx]:
        """A transaction: committed when the block ends, rolled back if it raises."""

    def read(self) -> AbstractContextManager[Tx]:
        """A transaction for reading; backends may make it cheaper than a write."""
        return self.transaction()

    @abc.abstractmethod
    def list_runs(self, status: str | None = None) -> list[RunRecord]: ...

    @abc.abstractmethod
    def list_effects(self, run_id: str | None = None) -> list[Effect]: ...

    @abc.abstractmethod
    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]: ...

    @abc.abstractmethod
    def list_credentials(self) -> list[CredentialRecord]: ...

    @abc.abstractmethod
    def audit_entries(self) -> Iterator[AuditEntry]:
        """Every audit entry in stored order (by sequence number)."""

    @abc.abstractmethod
    def audit_heads(self) -> dict[str, AuditHead]:
        """The head of every chain."""

    def audit_head(self, chain: str = MAIN) -> AuditHead | None:
        return self.audit_heads().get(chain)

    def verify_audit(self) -> AuditReport:
        return verify_chains(self.audit_entries(), self.audit_heads())

    def close(self) -> None:  # noqa: B027 - optional for backends with nothing to release
        """Release connections; the store must not be used afterwards."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
