"""The in-memory reference store: the contract at its simplest, for tests and examples.

A transaction holds a lock and writes through an undo log: each write remembers what it
replaced, and rolling back replays the log backwards. (Copying the tables at every
transaction would make each call cost more than the last.) Its audit keyring is random and
lives as long as the store, unless one is given.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.ledger import Effect, EffectStatus
from tether.evidence.audit import MAIN, AuditEntry, AuditHead, entry_row
from tether.evidence.crosscheck import (
    APPROVAL,
    CREDENTIAL,
    EFFECT,
    RUN,
    Evidence,
    approval_digest,
    effect_digest,
    row_digest,
    run_value,
)
from tether.evidence.keys import AuditKeys
from tether.store.base import Store, Tx
from tether.store.rows import CredentialRecord, NotificationRecord, RunRecord, StepRecord


class _Tables:
    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.effects: dict[str, Effect] = {}
        self.approvals: dict[str, Approval] = {}
        self.audit: list[AuditEntry] = []
        self.head: AuditHead | None = None
        self.messages: dict[tuple[str, int], str] = {}
        self.steps: dict[tuple[str, int], StepRecord] = {}
        # run id -> its inputs (source, body), replaced whole on append (the undo log keeps
        # the tuple it replaced)
        self.inputs: dict[str, tuple[tuple[str, str], ...]] = {}
        # (run id, call id) -> ids of its approvals, oldest first: an index, as a database has
        self.by_call: dict[tuple[str, str], tuple[str, ...]] = {}
        # (run id, call id) -> operation key, and run id -> how many effects it has
        self.effect_by_call: dict[tuple[str, str], str] = {}
        self.effect_count: dict[str, int] = {}
        self.meta: dict[str, str] = {}
        self.credentials: dict[str, CredentialRecord] = {}
        self.notifications: dict[str, NotificationRecord] = {}

    def put(self, table: dict[Any, Any], key: Any, value: Any, undo: list[Any]) -> None:
        undo.append((table, key, table.get(key, _ABSENT)))
        table[key] = value


_ABSENT = object()


class MemoryTx(Tx):
    def __init__(self, tables: _Tables, keys: AuditKeys) -> None:
        super().__init__(keys)
        self.t = tables
        self.undo: list[Any] = []

    def rollback(self) -> None:
        for entry in reversed(self.undo):
            if entry == "audit":
                self.t.audit.pop()
            elif isinstance(entry, tuple) and entry[0] == "head":
                self.t.head = entry[1]
            elif isinstance(entry, tuple) and entry[0] == "mac":
                self.t.audit[entry[1]] = entry[2]
            else:
                table, key, previous = entry
                if previous is _ABSENT:
                    del table[key]
                else:
                    table[key] = previous

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.t.runs.get(run_id)

    def get_effect(self, operation_key: str) -> Effect | None:
        return self.t.effects.get(operation_key)

    def messages(self, run_id: str) -> list[str]:
        return [body for (rid, _), body in sorted(self.t.messages.items()) if rid == run_id]

    def steps(self, run_id: str) -> list[StepRecord]:
        return [step for (rid, _), step in sorted(self.t.steps.items()) if rid == run_id]

    def inputs(self, run_id: str) -> list[tuple[str, str]]:
        return list(self.t.inputs.get(run_id, ()))

    def run_effects(self, run_id: str) -> list[Effect]:
        found = [e for e in self.t.effects.values() if e.run_id == run_id]
        return sorted(found, key=lambda e: e.created_at)  # stable: insertion order on ties

    def _insert_input(self, run_id: str, seq: int, source: str, body: str, at: float) -> bool:
        held = self.t.inputs.get(run_id, ())
        if seq != len(held):
            return False
        self.t.put(self.t.inputs, run_id, (*held, (source, body)), self.undo)
        return True

    def _insert_message(self, run_id: str, seq: int, body: str) -> bool:
        if (run_id, seq) in self.t.messages:
            return False
        self.t.put(self.t.messages, (run_id, seq), body, self.undo)
        return True

    def _insert_step(self, run_id: str, step: StepRecord) -> bool:
        if (run_id, step.seq) in self.t.steps:
            return False
        self.t.put(self.t.steps, (run_id, step.seq), step, self.undo)
        return True

    def get_approval(self, approval_id: str) -> Approval | None:
        return self.t.approvals.get(approval_id)

    def approvals_for_run(self, run_id: str) -> list[Approval]:
        found = [a for a in self.t.approvals.values() if a.run_id == run_id]
        return sorted(found, key=lambda a: a.created_at)

    def find_approval(self, run_id: str, call_id: str) -> Approval | None:
        # Newest first, so that of two made at the same moment the later one wins, as the SQL
        # stores break the tie by insertion order.
        ids = reversed(self.t.by_call.get((run_id, call_id), ()))
        found = [self.t.approvals[i] for i in ids]
        return max(found, key=lambda a: a.created_at) if found else None

    def _insert_run(self, run: RunRecord) -> bool:
        if run.run_id in self.t.runs:
            return False
        self.t.put(self.t.runs, run.run_id, run, self.undo)
        return True

    def _cas_run(self, run: RunRecord, expected_version: int) -> bool:
        current = self.t.runs.get(run.run_id)
        if current is None or current.state_version != expected_version:
            return False
        self.t.put(self.t.runs, run.run_id, run, self.undo)
        return True

    def _renew_lease(self, run_id: str, owner: str, until: float) -> bool:
        current = self.t.runs.get(run_id)
        if current is None or current.lease_owner != owner:
            return False
        self.t.put(self.t.runs, run_id, replace(current, lease_expires_at=until), self.undo)
        return True

    def _runs_with_status(self, status: str) -> list[RunRecord]:
        return [r for r in self.t.runs.values() if r.status == status]

    def effect_for_call(self, run_id: str, call_id: str) -> Effect | None:
        key = self.t.effect_by_call.get((run_id, call_id))
        return None if key is None else self.t.effects.get(key)

    def count_effects(self, run_id: str) -> int:
        return self.t.effect_count.get(run_id, 0)

    def _insert_effect(self, effect: Effect, cells: tuple[Any, ...]) -> bool:
        call = (effect.run_id, effect.call_id)
        if effect.operation_key in self.t.effects or call in self.t.effect_by_call:
            return False
        self.t.put(self.t.effects, effect.operation_key, effect, self.undo)
        self.t.put(self.t.effect_by_call, call, effect.operation_key, self.undo)
        count = self.t.effect_count.get(effect.run_id, 0) + 1
        self.t.put(self.t.effect_count, effect.run_id, count, self.undo)
        return True

    def get_meta(self, key: str) -> str | None:
        return self.t.meta.get(key)

    def _insert_meta(self, key: str, value: str) -> bool:
        if key in self.t.meta:
            return False
        self.t.put(self.t.meta, key, value, self.undo)
        return True

    def _update_meta(self, key: str, value: str) -> bool:
        if key not in self.t.meta:
            return False
        self.t.put(self.t.meta, key, value, self.undo)
        return True

    def credential_by_hash(self, token_hash: str) -> CredentialRecord | None:
        return next((c for c in self.t.credentials.values() if c.token_hash == token_hash), None)

    def get_credential(self, credential_id: str) -> CredentialRecord | None:
        return self.t.credentials.get(credential_id)

    def _insert_credential(self, credential: CredentialRecord) -> bool:
        taken = any(c.token_hash == credential.token_hash for c in self.t.credentials.values())
        if credential.credential_id in self.t.credentials or taken:
            return False
        self.t.put(self.t.credentials, credential.credential_id, credential, self.undo)
        return True

    def _update_credential(self, credential: CredentialRecord) -> bool:
        if credential.credential_id not in self.t.credentials:
            return False
        self.t.put(self.t.credentials, credential.credential_id, credential, self.undo)
        return True

    def _cas_effect(self, effect: Effect, expected: EffectStatus, cells: tuple[Any, ...]) -> bool:
        current = self.t.effects.get(effect.operation_key)
        if current is None or current.status is not expected:
            return False
        self.t.put(self.t.effects, effect.operation_key, effect, self.undo)
        return True

    def _insert_approval(self, approval: Approval, cells: tuple[Any, ...]) -> bool:
        if approval.approval_id in self.t.approvals:
            return False
        self.t.put(self.t.approvals, approval.approval_id, approval, self.undo)
        key = (approval.run_id, approval.call_id)
        ids = (*self.t.by_call.get(key, ()), approval.approval_id)
        self.t.put(self.t.by_call, key, ids, self.undo)
        return True

    def _cas_approval(
        self, approval: Approval, expected: ApprovalStatus, cells: tuple[Any, ...]
    ) -> bool:
        current = self.t.approvals.get(approval.approval_id)
        if current is None or current.status is not expected:
            return False
        self.t.put(self.t.approvals, approval.approval_id, approval, self.undo)
        return True

    def get_notification(self, notification_id: str) -> NotificationRecord | None:
        return self.t.notifications.get(notification_id)

    def due_notifications(self, now: float, limit: int) -> list[NotificationRecord]:
        due = [
            n
            for n in self.t.notifications.values()
            if n.delivered_at is None and n.next_attempt_at <= now
        ]
        return sorted(due, key=lambda n: (n.created_at, n.notification_id))[:limit]

    def _insert_notification(self, notification: NotificationRecord) -> bool:
        if notification.notification_id in self.t.notifications:
            return False
        self.t.put(self.t.notifications, notification.notification_id, notification, self.undo)
        return True

    def _cas_notification(self, notification: NotificationRecord, expected_attempts: int) -> bool:
        current = self.t.notifications.get(notification.notification_id)
        if current is None or current.attempts != expected_attempts:
            return False
        self.t.put(self.t.notifications, notification.notification_id, notification, self.undo)
        return True

    def _audit_head(self, chain: str) -> AuditHead | None:
        return self.t.head

    def _insert_audit(self, entry: AuditEntry) -> None:
        self.t.audit.append(entry)
        self.undo.append("audit")

    def _set_audit_head(self, chain: str, head: AuditHead) -> None:
        self.undo.append(("head", self.t.head))
        self.t.head = head

    def _unkeyed_audit(self) -> list[tuple[str, int, str]]:
        return [(e.chain, e.seq, e.hash) for e in self.t.audit if e.mac is None]

    def _set_audit_mac(self, chain: str, seq: int, key_id: str, mac: str) -> None:
        for i, entry in enumerate(self.t.audit):
            if (entry.chain, entry.seq) == (chain, seq):
                self.undo.append(("mac", i, entry))
                self.t.audit[i] = replace(entry, key_id=key_id, mac=mac)


class MemoryStore(Store):
    """The reference store, in memory: the contract with nothing else in the way."""

    def __init__(self, *, keys: AuditKeys | None = None) -> None:
        self.url = "memory://"
        self.read_only = False
        self._tables = _Tables()
        self._lock = threading.RLock()
        self.keys = keys if keys is not None else AuditKeys.ephemeral()
        self._attach_keys(self.keys)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._lock:
            tx = MemoryTx(self._tables, self.keys)
            try:
                yield tx
            except BaseException:
                tx.rollback()
                raise

    def list_runs(self, status: str | None = None) -> list[RunRecord]:
        with self._lock:
            runs = sorted(self._tables.runs.values(), key=lambda r: (r.created_at, r.run_id))
        return [r for r in runs if status is None or r.status == status]

    def list_effects(self, run_id: str | None = None) -> list[Effect]:
        with self._lock:
            effects = sorted(self._tables.effects.values(), key=lambda e: e.created_at)
        return [e for e in effects if run_id is None or e.run_id == run_id]

    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]:
        with self._lock:
            found = sorted(self._tables.approvals.values(), key=lambda a: a.created_at)
        return [
            a
            for a in found
            if (status is None or a.status is status) and (run_id is None or a.run_id == run_id)
        ]

    def list_credentials(self) -> list[CredentialRecord]:
        with self._lock:
            found = list(self._tables.credentials.values())
        return sorted(found, key=lambda c: (c.created_at, c.credential_id))

    def list_notifications(self) -> list[NotificationRecord]:
        with self._lock:
            found = list(self._tables.notifications.values())
        return sorted(found, key=lambda n: (n.created_at, n.notification_id))

    def audit_entries(self) -> Iterator[AuditEntry]:
        with self._lock:
            entries = list(self._tables.audit)
        return iter(entries)

    def audit_heads(self) -> dict[str, AuditHead]:
        head = self._tables.head
        return {} if head is None else {MAIN: head}

    @contextmanager
    def evidence(self) -> Iterator[Evidence]:
        # One moment: the entries are only references, and the state is as small as it is.
        with self._lock:
            entries = list(self._tables.audit)
            heads = self.audit_heads()
            state = self._state(self.sealing_keys)
        yield Evidence(map(entry_row, entries), heads, state.items)

    def state_digests(self) -> dict[str, str]:
        return self._state(None, check_runs=False)

    def _state(self, keys: AuditKeys | None, *, check_runs: bool = True) -> dict[str, str]:
        with self._lock:
            t = self._tables
            counts: dict[str, int] = {}
            for e in t.effects.values():
                counts[e.run_id] = counts.get(e.run_id, 0) + 1
            return {
                **{EFFECT + k: effect_digest(e) for k, e in t.effects.items()},
                **{APPROVAL + k: approval_digest(a) for k, a in t.approvals.items()},
                **{
                    RUN + k: run_value(
                        keys,
                        k,
                        (r.status, r.principal_id, r.tenant_id),
                        r.checkpoint_json,
                        counts.get(k, 0),
                    )
                    if check_runs
                    else ""
                    for k, r in t.runs.items()
                },
                **{CREDENTIAL + k: row_digest(c.row()) for k, c in t.credentials.items()},
            }
