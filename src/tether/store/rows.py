"""The rows a store keeps besides effects and approvals (``tether.core``): runs, their
steps, credentials and the notification outbox, and what one read tells the gate about a
call. Field order is column order (``tether.core.records``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from tether.core.approvals import Approval
from tether.core.ledger import Effect
from tether.core.records import FIXED, Record

if TYPE_CHECKING:
    from tether.evidence.keys import AuditKeys

__all__ = ["CallView", "CredentialRecord", "NotificationRecord", "RunRecord", "StepRecord"]


@dataclass(frozen=True, kw_only=True)
class RunRecord(Record):
    """Seed 000's ``agent_runs`` row, plus timestamps (fields in column order)."""

    run_id: Annotated[str, FIXED]
    state_version: int
    status: str
    principal_id: Annotated[str, FIXED]
    tenant_id: Annotated[str, FIXED]
    policy_version: str
    checkpoint_json: str
    created_at: Annotated[float, FIXED]
    updated_at: float
    # Who is driving the run, and until when; a run whose lease has expired is free to claim.
    lease_owner: str | None = None
    lease_expires_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class StepRecord(Record):
    """One step of a run as ``tether runs show`` prints it (seed 004's step kinds); its row in
    ``run_steps`` is the run id, then these."""

    seq: int
    turn: int
    kind: str
    detail: str
    at: float


@dataclass(frozen=True)
class CredentialRecord(Record):
    """A stored credential: who it names, what kind of identity, and only the hash of its
    secret (the secret itself is shown once, when it is made, and never stored).

    ``seal`` is the audit key's MAC over every other field (``sealed_payload``), made by the
    store as it writes the row: a row inserted or edited with plain SQL, without the key, has
    none that verifies, and decides nothing (``tether.identity``)."""

    credential_id: Annotated[str, FIXED]
    name: Annotated[str, FIXED]
    kind: Annotated[str, FIXED]  # "approver", "principal" or "admin"
    token_hash: Annotated[str, FIXED]
    record_json: str  # tenants, scopes and the rest, as canonical JSON
    created_at: Annotated[float, FIXED]
    revoked_at: float | None = None
    seal: str | None = None

    SEAL: ClassVar[str] = "credential"  # the seal's purpose: it cannot stand in for another

    def sealed_by(self, keys: AuditKeys) -> bool:
        """Whether the row is as tether wrote it: its seal verifies with ``keys``."""
        return keys.verify_seal(self.SEAL, self.sealed_payload(), self.seal)

    def sealed_payload(self) -> list[Any]:
        """What the seal covers: the row's cells but the seal, as written and read back."""
        return list(self.row()[:-1])


@dataclass(frozen=True, kw_only=True)
class NotificationRecord(Record):
    """One row of the notification outbox: written in the transaction that made the thing it
    tells about, delivered later by a sender (``tether.gate.notify``), never by the gate.

    ``attempts`` is also the row's version: a sender claims a row by bumping it (and pushing
    ``next_attempt_at`` past its delivery timeout), so two senders never deliver one attempt."""

    notification_id: Annotated[str, FIXED]
    kind: Annotated[str, FIXED]
    created_at: Annotated[float, FIXED]
    next_attempt_at: float
    attempts: int
    delivered_at: float | None
    record_json: str  # what to say, and per destination whether it was said, as canonical JSON


@dataclass(frozen=True, kw_only=True)
class CallView:
    """What one read tells the gate about a call (``Tx.call_view``)."""

    run: RunRecord | None
    effect: Effect | None
    approval: Approval | None
    effect_count: int
