"""The store contract every backend implements (the rows it holds are in ``tether.store.rows``).

All writes happen inside ``Store.transaction()``: the gate changes an effect, a run and an
approval, and appends the audit entry recording it, in one transaction (invariant I4), so a
crash leaves either all of it or none. Backends implement the small ``_``-prefixed primitives;
the rules (compare-and-swap on run versions, status checks on effects and approvals, chaining
and authenticating audit entries, remembering the digest of every row written so the next
entry records it) live here once, so every backend enforces them the same way.

A store is opened with its audit keyring (``tether.evidence.keys``), which
``tether.store.keying`` finds, makes only for a writer opening a store that has none, and
refuses when the store records a key the ring lacks. The module is long because it is the
store contract, written once for every backend.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Self

from tether.core.approvals import REQUEST_SEAL, Approval, ApprovalStatus, request_payload
from tether.core.digest import canonical_json, evolve, sha256_hex
from tether.core.ledger import Effect, EffectStatus
from tether.core.lifecycle import MODEL_RETRY_AFTER_S, RunStatus
from tether.errors import (
    AlreadyExists,
    InvalidTransition,
    NotFound,
    OperationConflict,
    StaleState,
    StoreError,
)
from tether.evidence.audit import (
    CHAINS,
    MAIN,
    AuditEntry,
    AuditHead,
    AuditReport,
    entry_row,
    make_entry,
)
from tether.evidence.crosscheck import (
    APPROVAL,
    CREDENTIAL,
    EFFECT,
    RUN,
    Evidence,
    approval_cells,
    approval_digest,
    effect_digest,
    row_digest,
    verify_evidence,
)
from tether.evidence.keys import AuditKeys
from tether.store import keying
from tether.store.rows import CallView, CredentialRecord, NotificationRecord, RunRecord, StepRecord
from tether.telemetry.state import count_verification


class Pending(Protocol):
    """A write sent but not yet answered: whether it changed its row, asked when needed."""

    def ok(self) -> bool: ...


Failure = BaseException | Callable[[], BaseException]  # what a write that lost raises


class Tx(abc.ABC):
    """One open transaction. Public methods enforce the contract; backends fill in the rest."""

    def __init__(self, keys: AuditKeys) -> None:
        self.keys = keys
        # Digests of the rows written since the last audit entry: the next entry records them.
        self._touched: dict[str, str] = {}
        # Writes a pipelined backend answers later (``Pending``), with what they raise if
        # they did not change their row: all are checked before the commit.
        self._pending: list[tuple[Pending, Failure]] = []

    def _expect(self, done: bool | Pending, fail: Failure) -> None:
        """Raise ``fail`` (or what calling it raises) unless the write changed its row; a
        ``Pending`` one (PostgreSQL's pipeline) is checked by ``check_writes``."""
        if done is False:
            raise fail if isinstance(fail, BaseException) else fail()
        if done is not True:
            self._pending.append((done, fail))

    def check_writes(self) -> None:
        """Raise for the first pending write that did not change its row: the store calls
        this before it commits, so nothing commits unless every write took effect."""
        pending, self._pending = self._pending, []
        for done, fail in pending:
            self._expect(done.ok(), fail)

    # -- runs --------------------------------------------------------------------------------
    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunRecord | None: ...

    def lock_run(self, run_id: str) -> RunRecord | None:
        """The run, row-locked till the transaction ends if the backend can: claimers queue."""
        return self.get_run(run_id)

    def renew_lease(self, run_id: str, owner: str, until: float) -> bool:
        """Extend ``owner``'s lease; False if it no longer holds it. A lease is not run
        state, so this does not bump ``state_version`` (the holder's own writes would lose
        their compare-and-swap to their own heartbeat)."""
        return self._renew_lease(run_id, owner, until)

    def claimable(self, now: float, limit: int) -> list[RunRecord]:
        """Runs a worker may claim now: queued, running with an expired or no lease, or
        waiting for their model for ``MODEL_RETRY_AFTER_S``; and with a conversation in the
        store (a run without one is driven by its own code or framework: a worker has nothing
        to drive). Backends with row locks skip those another worker has locked."""
        waited = [
            r
            for r in self._runs_with_status(RunStatus.AWAITING_MODEL)
            if r.updated_at < now - MODEL_RETRY_AFTER_S  # its model is asked again later
        ]
        found = [
            r
            for status in (RunStatus.QUEUED, RunStatus.RUNNING)
            for r in self._runs_with_status(status)
            if (r.lease_owner is None or (r.lease_expires_at or 0) < now)
            and self.messages(r.run_id)
        ] + [r for r in waited if r.lease_owner is None and self.messages(r.run_id)]
        return sorted(found, key=lambda r: r.updated_at)[:limit]

    def insert_run(self, run: RunRecord) -> None:
        if not self._insert_run(run):
            raise AlreadyExists(f"run {run.run_id} already exists; choose another run id")
        # The row as created; runs change without entries (leases, counters), so verifying
        # checks only that the run exists.
        self._touched[RUN + run.run_id] = sha256_hex(canonical_json(run.to_dict()))

    def update_run(self, run: RunRecord, **changes: Any) -> RunRecord:
        """Write ``run`` (with ``changes``) if the stored version is still
        ``run.state_version``; bump it (I6)."""
        new = replace(run, state_version=run.state_version + 1, **changes)
        if not self._cas_run(new, run.state_version):
            raise self._stale(run)
        return new

    def write_checkpoint(
        self, run: RunRecord, checkpoint_json: str, updated_at: float
    ) -> RunRecord:
        """``update_run(run, checkpoint_json=..., updated_at=...)`` for a ``run`` exactly as
        read in this transaction (the gate's step): only those two columns and the version
        are written, so the columns it did not change (an indexed status) cost no write."""
        version = run.state_version + 1
        new = evolve(
            run, state_version=version, checkpoint_json=checkpoint_json, updated_at=updated_at
        )
        self._expect(self._cas_checkpoint(new, run.state_version), lambda: self._stale(run))
        return new

    def _stale(self, run: RunRecord) -> StaleState:
        current = self.get_run(run.run_id)
        found = None if current is None else current.state_version
        return StaleState(run.run_id, run.state_version, found)

    # -- a run's conversation and steps: one small row each, never the whole history again ----
    def append_message(self, run_id: str, seq: int, body: str) -> None:
        if not self._insert_message(run_id, seq, body):
            raise AlreadyExists(f"run {run_id} already has message {seq}; reload the run")

    @abc.abstractmethod
    def messages(self, run_id: str) -> list[str]:
        """The run's messages as stored (JSON text), in order."""

    def append_input(self, run_id: str, source: str, body: str, at: float) -> None:
        """Record trusted input to a run (the user's request): the data-flow policy's
        reference for where argument values may come from (``tether.policy.provenance``)."""
        seq = len(self.inputs(run_id))
        if not self._insert_input(run_id, seq, source, body, at):
            raise AlreadyExists(f"run {run_id} already has input {seq}; record it again")

    @abc.abstractmethod
    def inputs(self, run_id: str) -> list[tuple[str, str]]:
        """The run's recorded inputs as (source, body), in order."""

    @abc.abstractmethod
    def run_effects(self, run_id: str) -> list[Effect]:
        """The run's effects, oldest first."""

    def append_step(self, run_id: str, step: StepRecord) -> None:
        if not self._insert_step(run_id, step):
            raise AlreadyExists(f"run {run_id} already has step {step.seq}; reload the run")

    @abc.abstractmethod
    def steps(self, run_id: str) -> list[StepRecord]: ...

    # -- effects -----------------------------------------------------------------------------
    @abc.abstractmethod
    def get_effect(self, operation_key: str) -> Effect | None: ...

    def insert_effect(self, effect: Effect) -> None:
        # The row's cells made once: written, and digested for the next audit entry.
        cells = effect.row()
        self._expect(
            self._insert_effect(effect, cells), partial(OperationConflict, effect.operation_key)
        )
        self._touched[EFFECT + effect.operation_key] = row_digest(cells)

    def update_effect(self, effect: Effect, expected: EffectStatus) -> None:
        cells = effect.row()
        self._expect(self._cas_effect(effect, expected, cells), lambda: self._invalid(effect))
        self._touched[EFFECT + effect.operation_key] = row_digest(cells)

    def _invalid(self, effect: Effect) -> InvalidTransition:
        current = self.get_effect(effect.operation_key)
        was = "missing" if current is None else current.status.value
        return InvalidTransition(effect.operation_key, was, effect.status.value)

    @abc.abstractmethod
    def effect_for_call(self, run_id: str, call_id: str) -> Effect | None:
        """The effect recorded for this call, whatever tool version it ran under (I2: a
        call's identity is ``(run_id, call_id)``)."""

    @abc.abstractmethod
    def count_effects(self, run_id: str) -> int:
        """How many effects the ledger holds for a run."""

    def call_view(self, run_id: str, call_id: str) -> CallView:
        """Everything the gate reads to judge one call (``CallView``, in its fields' words);
        backends that can answer in one query override this."""
        return CallView(
            run=self.get_run(run_id),
            effect=self.effect_for_call(run_id, call_id),
            approval=self.find_approval(run_id, call_id),
            effect_count=self.count_effects(run_id),
        )

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

    def insert_credential(self, credential: CredentialRecord) -> CredentialRecord:
        """Store ``credential`` sealed with the audit key; returns it as stored."""
        sealed = self._sealed(credential)
        if not self._insert_credential(sealed):
            raise AlreadyExists(f"credential {credential.credential_id} already exists")
        self._touched[CREDENTIAL + sealed.credential_id] = row_digest(sealed.row())
        return sealed

    def update_credential(self, credential: CredentialRecord) -> CredentialRecord:
        """Write ``credential`` (its changing fields), sealed again; returns it as stored."""
        sealed = self._sealed(credential)
        if not self._update_credential(sealed):
            raise NotFound(f"no credential {credential.credential_id}")
        self._touched[CREDENTIAL + sealed.credential_id] = row_digest(sealed.row())
        return sealed

    def _sealed(self, credential: CredentialRecord) -> CredentialRecord:
        seal = self.keys.seal(CredentialRecord.SEAL, credential.sealed_payload())
        return replace(credential, seal=seal)

    # -- approvals ---------------------------------------------------------------------------
    @abc.abstractmethod
    def get_approval(self, approval_id: str) -> Approval | None: ...

    @abc.abstractmethod
    def find_approval(self, run_id: str, call_id: str) -> Approval | None:
        """The most recent approval requested for this call, if any."""

    @abc.abstractmethod
    def approvals_for_run(self, run_id: str) -> list[Approval]: ...

    def insert_approval(self, approval: Approval) -> Approval:
        """Store ``approval`` with its request sealed (``request_payload``); returns it as
        stored."""
        if approval.request_seal is None:
            seal = self.keys.seal(REQUEST_SEAL, request_payload(approval))
            approval = replace(approval, request_seal=seal)
        # The record encoded once: its text is the row's, and the row's digest covers it.
        cells = approval_cells(approval)
        if not self._insert_approval(approval, cells):
            raise AlreadyExists(f"approval {approval.approval_id} already exists")
        self._touched[APPROVAL + approval.approval_id] = row_digest(cells)
        return approval

    def update_approval(self, approval: Approval, expected: ApprovalStatus) -> None:
        cells = approval_cells(approval)
        self._expect(
            self._cas_approval(approval, expected, cells),
            lambda: StoreError(
                f"approval {approval.approval_id} changed while it was being decided; "
                "list it again and retry"
            ),
        )
        self._touched[APPROVAL + approval.approval_id] = row_digest(cells)

    # -- the notification outbox -------------------------------------------------------------
    def enqueue_notification(self, notification: NotificationRecord) -> None:
        if not self._insert_notification(notification):
            raise AlreadyExists(f"notification {notification.notification_id} already exists")

    @abc.abstractmethod
    def get_notification(self, notification_id: str) -> NotificationRecord | None: ...

    @abc.abstractmethod
    def due_notifications(self, now: float, limit: int) -> list[NotificationRecord]:
        """Undelivered notifications whose next attempt is due, oldest first."""

    def update_notification(self, notification: NotificationRecord, expected_attempts: int) -> bool:
        """Write ``notification`` if the stored one still has ``expected_attempts``; False if
        another sender got there first."""
        return self._cas_notification(notification, expected_attempts)

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
        rows = self._touched
        if rows:
            self._touched = {}
        return self._append(chain, kind, at, run_id, actor, data or {}, redactions, head, rows)

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
        rows: Mapping[str, str] | None = None,
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
            rows=rows,
            keys=self.keys,
        )
        self._insert_audit(entry)
        self._set_audit_head(chain, AuditHead(entry.seq, entry.hash))
        return entry

    def audit_chain(self, run_id: str | None) -> str:
        """Which chain an entry goes to: one chain unless a backend shards by run."""
        return MAIN

    def record_rows(self, digests: Mapping[str, str]) -> None:
        """Have the next entry record these rows as they are (adopting a store's state)."""
        self._touched.update(digests)

    def authenticate_unkeyed(self) -> int:
        """MAC every entry that has none with the current key (trust on first use); how many."""
        unkeyed = self._unkeyed_audit()
        for chain, seq, hashed in unkeyed:
            key_id, mac = self.keys.mac(hashed)
            self._set_audit_mac(chain, seq, key_id, mac)
        return len(unkeyed)

    def lock_setup(self) -> None:  # noqa: B027 - SQLite runs one writer at a time anyway
        """Serialise stores being set up at once, where the backend has many writers."""

    # -- backend primitives ------------------------------------------------------------------
    # Inserts return False when the key exists (the backend's own unique constraint decides,
    # which saves a read and cannot race); compare-and-swaps return False when they lost.
    @abc.abstractmethod
    def _insert_run(self, run: RunRecord) -> bool: ...

    @abc.abstractmethod
    def _cas_run(self, run: RunRecord, expected_version: int) -> bool: ...

    def _cas_checkpoint(self, run: RunRecord, expected_version: int) -> bool | Pending:
        """``_cas_run`` where only the checkpoint and the time changed: a backend may write
        just those columns and the version."""
        return self._cas_run(run, expected_version)

    @abc.abstractmethod
    def _renew_lease(self, run_id: str, owner: str, until: float) -> bool: ...

    @abc.abstractmethod
    def _runs_with_status(self, status: str) -> list[RunRecord]: ...

    @abc.abstractmethod
    def _insert_message(self, run_id: str, seq: int, body: str) -> bool: ...

    @abc.abstractmethod
    def _insert_step(self, run_id: str, step: StepRecord) -> bool: ...

    @abc.abstractmethod
    def _insert_input(self, run_id: str, seq: int, source: str, body: str, at: float) -> bool: ...

    # ``cells`` is the record as its row (``effect_cells`` / ``approval_cells``), made once by
    # the caller, which digests the same cells: a SQL backend writes them as they are.
    @abc.abstractmethod
    def _insert_effect(self, effect: Effect, cells: tuple[Any, ...]) -> bool | Pending: ...

    @abc.abstractmethod
    def _cas_effect(
        self, effect: Effect, expected: EffectStatus, cells: tuple[Any, ...]
    ) -> bool | Pending: ...

    @abc.abstractmethod
    def _insert_approval(self, approval: Approval, cells: tuple[Any, ...]) -> bool: ...

    @abc.abstractmethod
    def _cas_approval(
        self, approval: Approval, expected: ApprovalStatus, cells: tuple[Any, ...]
    ) -> bool | Pending: ...

    @abc.abstractmethod
    def _insert_meta(self, key: str, value: str) -> bool: ...

    @abc.abstractmethod
    def _update_meta(self, key: str, value: str) -> bool: ...

    @abc.abstractmethod
    def _insert_credential(self, credential: CredentialRecord) -> bool: ...

    @abc.abstractmethod
    def _update_credential(self, credential: CredentialRecord) -> bool: ...

    @abc.abstractmethod
    def _insert_notification(self, notification: NotificationRecord) -> bool: ...

    @abc.abstractmethod
    def _cas_notification(
        self, notification: NotificationRecord, expected_attempts: int
    ) -> bool: ...

    @abc.abstractmethod
    def _audit_head(self, chain: str) -> AuditHead | None:
        """The chain's head, locked for this transaction where the backend has row locks."""

    @abc.abstractmethod
    def _insert_audit(self, entry: AuditEntry) -> None: ...

    @abc.abstractmethod
    def _set_audit_head(self, chain: str, head: AuditHead) -> None: ...

    @abc.abstractmethod
    def _unkeyed_audit(self) -> list[tuple[str, int, str]]:
        """``(chain, seq, hash)`` of every entry without a MAC."""

    @abc.abstractmethod
    def _set_audit_mac(self, chain: str, seq: int, key_id: str, mac: str) -> None: ...


class Store(abc.ABC):
    """A durable home for runs, effects, approvals and the audit log."""

    # Backends set these as they open (no class defaults: a wrapper store forwarding
    # attributes to the store it wraps must find them there).
    url: str
    keys: AuditKeys
    store_id: str | None
    read_only: bool
    key_file: Path | None  # the file the keyring came from or was made in: rotation saves it

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[Tx]:
        """A transaction: committed when the block ends, rolled back if it raises."""

    def read(self) -> AbstractContextManager[Tx]:
        """A transaction for reading; backends may make it cheaper than a write."""
        return self.transaction()

    def _setup_transaction(self) -> AbstractContextManager[Tx]:
        """The write transaction the store sets itself up in as it opens: the backend's own,
        so that a subclass wrapping ``transaction()`` is not called half-constructed."""
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
    def list_notifications(self) -> list[NotificationRecord]:
        """The whole outbox, delivered or not, oldest first."""

    @abc.abstractmethod
    def audit_entries(self) -> Iterator[AuditEntry]:
        """Every audit entry in stored order (by sequence number)."""

    @abc.abstractmethod
    def audit_heads(self) -> dict[str, AuditHead]:
        """The head of every chain."""

    def audit_head(self, chain: str = MAIN) -> AuditHead | None:
        return self.audit_heads().get(chain)

    def audit_tail(
        self, *, run_id: str | None = None, kind: str | None = None, limit: int = 50
    ) -> list[AuditEntry]:
        """The last ``limit`` entries in stored order (oldest first), only those of run
        ``run_id`` and of kind ``kind`` if given. SQL backends ask the database for them."""
        found = (
            e
            for e in self.audit_entries()
            if (run_id is None or e.run_id == run_id) and (kind is None or e.kind == kind)
        )
        return list(collections.deque(found, maxlen=limit))

    def state_digests(self) -> dict[str, str]:
        """Every effect, approval and run row, keyed as audit entries record them
        (``effect:<key>``...), with its digest (``tether.evidence.crosscheck``). SQL backends digest
        the rows as stored instead, so that a row no longer readable as a record still counts."""
        return {
            **{EFFECT + e.operation_key: effect_digest(e) for e in self.list_effects()},
            **{APPROVAL + a.approval_id: approval_digest(a) for a in self.list_approvals()},
            **{RUN + r.run_id: "" for r in self.list_runs()},
        }

    @contextmanager
    def evidence(self) -> Iterator[Evidence]:
        """The log, its heads and the state, as streams read in one snapshot where the
        backend can; read them inside the ``with`` block, the log first."""
        heads = self.audit_heads()
        yield Evidence(map(entry_row, self.audit_entries()), heads, self._state_items)

    def _state_items(self) -> Iterable[tuple[str, str]]:
        return self.state_digests().items()

    @property
    def sealing_keys(self) -> AuditKeys | None:
        """The keys to check rows' seals with; None for a public key alone (checks no MAC)."""
        return self.keys if self.keys.key_ids else None

    def verify_audit(self) -> AuditReport:
        """Verify the chains and their MACs, then the state against the log, in one pass;
        ``AuditKeyMissing`` if there is a log but no key to check it with."""
        with self.evidence() as evidence:
            report = verify_evidence(evidence, self.keys)
        count_verification(report.intact)  # for /metrics and the OpenTelemetry counter
        return report

    # -- the audit key -----------------------------------------------------------------------
    def default_key_path(self, store_id: str | None) -> Path | None:
        """Where this store's key file lives unless ``$TETHER_AUDIT_KEY_FILE`` says."""
        return None

    def _attach_keys(self, keys: AuditKeys | None) -> None:
        """Find (or, for a writer opening a store that records none, make) the keyring, and
        record it in the store. Called once by each backend as it opens (``keying``)."""
        keying.attach_keys(self, keys)

    def rotate_audit_key(self) -> AuditKeys:
        """A new current audit key, saved where the ring came from (a key file) before the
        store records it; old keys stay in the ring to verify old entries. Returns the new
        ring (to hand out as ``$TETHER_AUDIT_KEY`` when it did not come from a file)."""
        return keying.rotate_audit_key(self)

    def close(self) -> None:  # noqa: B027 - optional for backends with nothing to release
        """Release connections; the store must not be used afterwards."""

    def __enter__(self) -> Self:  # a `with SQLiteStore(...)` keeps its own type
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
