"""A store's audit keyring as it opens, rotates, and adopts what was written before keys.

Opening finds the keyring (``tether.evidence.keys``), makes one only for a writer opening a
store that records none, and refuses a store whose recorded key the ring lacks. Nothing here
trusts what it finds without being told to:

- a log none of whose entries carries a MAC is either one made before audit keys or one whose
  MACs and key record were stripped, and the two look the same. A writer records its key and
  authenticates what it writes from then on, but leaves the old entries unauthenticated, so
  ``tether audit verify`` fails until the operator says which it is
  (``tether migrate --trust-unkeyed-log``: the entries, runs and credentials as they stand
  are authenticated and sealed, recorded in the log as trust on first use);
- a credential row with no seal is one made before credentials were sealed, or one inserted
  outside tether; it decides nothing until the key holder seals it
  (``tether migrate --seal-credentials``, which lists each one in the log).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from tether.core.ledger import Effect
from tether.core.runseal import resealed
from tether.errors import AuditKeyMissing, IntegrityError, ReadOnlyStore
from tether.evidence import keys as keyring
from tether.evidence.audit import AuditEntry
from tether.evidence.keys import AuditKeys
from tether.store.rows import CredentialRecord, RunRecord

# tether_meta keys
STORE_ID = "store_id"  # names the store in checkpoints and in its default key file
AUDIT_KEY_ID = "audit_key_id"  # the current audit key; a ring without it cannot open the store


class Store(Protocol):
    """What of ``tether.store.base.Store`` this module uses (the store imports this module,
    so it is named by shape)."""

    url: str
    keys: AuditKeys
    store_id: str | None
    read_only: bool
    key_file: Path | None

    def transaction(self) -> AbstractContextManager[Any]: ...

    def read(self) -> AbstractContextManager[Any]: ...

    def _setup_transaction(self) -> AbstractContextManager[Any]: ...

    def audit_entries(self) -> Iterator[AuditEntry]: ...

    def default_key_path(self, store_id: str | None) -> Path | None: ...

    def list_credentials(self) -> list[CredentialRecord]: ...

    def list_runs(self) -> list[RunRecord]: ...

    def list_effects(self, run_id: str | None = None) -> list[Effect]: ...

    def state_digests(self) -> dict[str, str]: ...


def attach_keys(store: Store, keys: AuditKeys | None) -> None:
    """Find (or make) ``store``'s keyring and record it in the store."""
    store.key_file = None
    with store.read() as tx:
        store.store_id, recorded = tx.get_meta(STORE_ID), tx.get_meta(AUDIT_KEY_ID)
    if store.store_id is None and not store.read_only:
        store.store_id = _ensure_store_id(store)
    store.keys = keys if keys is not None else _find_keys(store, recorded)
    if store.read_only and not store.keys.key_ids and store.keys.public_key:
        return  # a public key only: enough to check checkpoint signatures, not MACs
    if recorded is not None and not store.keys.has(recorded):
        raise AuditKeyMissing(
            f"audit key {recorded} is not in {store.keys.source}; restore the key file"
        )
    if not store.read_only and recorded != store.keys.key_id:
        _record_key(store)


def _ensure_store_id(store: Store) -> str:
    with store._setup_transaction() as tx:
        if tx.get_meta(STORE_ID) is None:
            tx._insert_meta(STORE_ID, uuid.uuid4().hex[:16])  # a racing opener may win
        found: str | None = tx.get_meta(STORE_ID)
    assert found is not None
    return found


def _find_keys(store: Store, recorded: str | None) -> AuditKeys:
    default = store.default_key_path(store.store_id)
    found = keyring.find_keys(default)
    path = keyring.key_file(default)
    if found is not None:
        store.key_file = path if found.source == str(path) else None
        return found
    looked = keyring.where(default)
    if recorded is not None:
        raise AuditKeyMissing(f"audit key {recorded} is not in {looked}; restore the key file")
    if store.read_only:  # a reader makes no key; verifying a non-empty log will say so
        return AuditKeys.empty(
            f"there is no audit key for {store.url} in {looked}; if the store was made "
            "before audit keys, open it once with a writer (`tether migrate`) to make one"
        )
    if path is None:
        return AuditKeys.ephemeral()  # nowhere to keep one: a database in memory
    _refuse_if_keyed(store, looked)
    store.key_file = path
    return keyring.create_key_file(path)


def _refuse_if_keyed(store: Store, looked: str) -> None:
    """Never make a new key for a log some key already authenticates (its record in
    ``tether_meta`` was lost): that would be silently trusting whatever is there."""
    used = sorted({e.key_id for e in store.audit_entries() if e.key_id is not None})
    if used:
        raise AuditKeyMissing(
            f"the audit log is authenticated with key {used[0]}, which is not in {looked}, "
            "and the store records no key; restore the key file"
        )


def _record_key(store: Store) -> None:
    """Record the ring's current key. Entries already there without a MAC stay so: they
    are adopted only when the operator says (``trust_unkeyed_log``)."""
    now = time.time()
    with store._setup_transaction() as tx:
        tx.lock_setup()
        recorded = tx.get_meta(AUDIT_KEY_ID)
        if recorded == store.keys.key_id:
            return  # another opener did it first
        tx.set_meta(AUDIT_KEY_ID, store.keys.key_id)
        if recorded is not None:
            change = {"from": recorded, "to": store.keys.key_id}
            tx.append_audit("audit_key_changed", at=now, data=change)


def trust_unkeyed_log(store: Store) -> int:
    """Authenticate every entry that has no MAC, and record the state as it stands: the
    operator's word that the log was made before audit keys (trust on first use), itself
    recorded. Refused when some entries are authenticated already: a log with a MAC anywhere
    was made with keys, and entries without one were stripped or inserted."""
    if store.read_only:
        raise ReadOnlyStore(f"{store.url} is open read-only; cannot adopt its log")
    entries = list(store.audit_entries())
    unkeyed = [e for e in entries if e.mac is None]
    keyed = [e for e in entries if e.mac is not None]
    if not unkeyed:
        return 0
    first_keyed: dict[str, int] = {}
    for e in keyed:
        first_keyed[e.chain] = min(e.seq, first_keyed.get(e.chain, e.seq))
    if any(e.seq > first_keyed.get(e.chain, e.seq) for e in unkeyed):
        raise IntegrityError(
            f"the audit log mixes {len(unkeyed)} entries without a MAC with {len(keyed)} "
            "authenticated ones: entries were stripped or inserted outside tether, so none "
            "is adopted; restore the store from a backup"
        )
    with store.transaction() as tx:
        count: int = tx.authenticate_unkeyed()
        # The operator's word is for the whole store as it stands: its runs are sealed
        # afresh too (they carry no seals, or ones made with a key that is gone).
        for run in store.list_runs():
            effects = len(store.list_effects(run.run_id))
            text = resealed(store.keys, run.run_id, run.checkpoint_json, effects)
            tx.update_run(run, checkpoint_json=text)
        for credential in store.list_credentials():
            tx.update_credential(credential)
        tx.record_rows(store.state_digests())
        adopted = {"key_id": store.keys.key_id, "entries": count, "trust": "first use"}
        tx.append_audit("audit_key_adopted", at=time.time(), data=adopted)
    return count


def seal_credentials(store: Store, *, actor: str) -> list[dict[str, Any]]:
    """Seal every credential row that has no seal at all (made before credentials were
    sealed), each listed in one audit entry: the key holder's word that they are genuine.
    A row whose seal is present but wrong was edited, and is left refused."""
    if store.read_only:
        raise ReadOnlyStore(f"{store.url} is open read-only; cannot seal its credentials")
    with store.transaction() as tx:
        found = [r for r in store.list_credentials() if r.seal is None]
        sealed = [tx.update_credential(r) for r in found]
        listed = [
            {"credential_id": r.credential_id, "name": r.name, "kind": r.kind} for r in sealed
        ]
        if listed:
            tx.append_audit(
                "credentials_sealed",
                at=time.time(),
                actor=actor,
                data={"credentials": listed, "trust": "the key holder's word"},
            )
    return listed


def rotate_audit_key(store: Store) -> AuditKeys:
    """A new current audit key, saved where the ring came from before the store records it."""
    if store.read_only:
        raise ReadOnlyStore(f"{store.url} is open read-only; cannot rotate its key")
    old, new = store.keys, store.keys.rotated()
    if store.key_file is not None:
        keyring.save_key_file(store.key_file, new)
    store.keys = new
    with store.transaction() as tx:
        tx.set_meta(AUDIT_KEY_ID, new.key_id)
        data = {"from": old.key_id, "to": new.key_id}
        tx.append_audit("audit_key_rotated", at=time.time(), data=data)
    return new
