"""The hash-chained audit log: building entries and verifying the chain.

Each entry's ``body`` is the canonical JSON of what happened; its ``hash`` is
``sha256(prev_hash || body)``. The body is stored exactly as hashed, so verifying never
depends on re-serialising. A separate head record (last sequence number and hash, written in
the same transaction as every append) catches a deleted tail, which a chain alone cannot:
the shortened chain is still internally consistent.

None of that stops someone who can write the database from recomputing the chain, so every
entry also carries an HMAC of its hash made with the audit key (``tether.keys``), which lives
outside the database: a forged entry, however carefully chained, has no valid MAC. A signed
checkpoint (``tether.checkpoint``) kept elsewhere makes a truncated, rewritten or wiped log
detectable even though the database's own head record can be rewritten too.

An entry may also carry ``rows``: the digest of every effect, approval and run row its
transaction wrote (``tether.evidence``), so that verifying can check the state against the log.

A store may keep one chain (``main``: SQLite, whose writers take turns anyway) or one chain
per run, so that workers appending for different runs never wait on one global head row
(PostgreSQL). With several chains, each new chain is first recorded in the ``_chains``
chain; verifying checks that every recorded chain still exists, so deleting a whole run —
its entries and its head — is detected too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tether.digest import canonical_json, sha256_hex
from tether.errors import AuditKeyMissing
from tether.keys import AuditKeys

GENESIS = "0" * 64
MAIN = "main"  # the single chain of a store that keeps one
CHAINS = "_chains"  # where a multi-chain store records each chain it starts
GLOBAL = "_global"  # entries about no run, in a multi-chain store


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    seq: int
    kind: str
    run_id: str | None
    body: str
    prev_hash: str
    hash: str
    chain: str = MAIN
    key_id: str | None = None  # which audit key made ``mac``
    mac: str | None = None  # HMAC-SHA256 of ``hash`` with that key

    @property
    def where(self) -> str:
        return str(self.seq) if self.chain == MAIN else f"{self.chain}#{self.seq}"

    @property
    def record(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass(frozen=True)
class AuditHead:
    seq: int
    hash: str


def chain_hash(prev_hash: str, body: str) -> str:
    return sha256_hex(prev_hash + body)


def make_entry(
    head: AuditHead | None,
    *,
    chain: str = MAIN,
    at: float,
    kind: str,
    run_id: str | None,
    actor: str | None,
    data: Mapping[str, Any],
    redactions: Iterable[str] = (),
    rows: Mapping[str, str] | None = None,
    keys: AuditKeys | None = None,
) -> AuditEntry:
    """The next entry after ``head``, authenticated with ``keys`` if given. ``data`` must
    already be redacted (I7); ``rows`` are the digests of the rows this entry records."""
    seq = 1 if head is None else head.seq + 1
    prev = GENESIS if head is None else head.hash
    record: dict[str, Any] = {} if chain == MAIN else {"chain": chain}
    if rows:
        record["rows"] = dict(rows)
    body = canonical_json(
        {
            **record,
            "seq": seq,
            "at": round(at, 6),
            "kind": kind,
            "run_id": run_id,
            "actor": actor,
            "data": dict(data),
            "redactions": sorted(set(redactions)),
        }
    )
    hashed = chain_hash(prev, body)
    key_id, mac = (None, None) if keys is None else keys.mac(hashed)
    return AuditEntry(
        seq=seq,
        kind=kind,
        run_id=run_id,
        body=body,
        prev_hash=prev,
        hash=hashed,
        chain=chain,
        key_id=key_id,
        mac=mac,
    )


@dataclass(frozen=True)
class AuditReport:
    """What verifying the audit log found: intact or not, how much was checked, and the
    first problem with where it is."""

    intact: bool
    entries: int
    first_bad: int | None = None
    problem: str | None = None
    chain: str = MAIN
    rows: int = 0  # state rows checked against the log
    checkpoint: int | None = None  # entries the checkpoint vouched for, if one was checked
    macs_checked: bool = True  # False when only a public key was at hand

    @property
    def where(self) -> str:
        return str(self.first_bad) if self.chain == MAIN else f"{self.chain}#{self.first_bad}"

    def summary(self) -> str:
        if self.intact:
            extra = f", {self.rows} rows match it" if self.rows else ""
            if self.checkpoint is not None:
                extra += f", and it extends the checkpoint of {self.checkpoint} entries"
            if not self.macs_checked:
                extra += " (entry MACs not checked: public key only)"
            return f"audit intact: {self.entries} entries verified{extra}"
        if self.first_bad is None:
            return f"audit not intact: {self.problem}"
        return f"audit broken at entry {self.where}: {self.problem}"


def verify_chains(
    entries: Iterable[AuditEntry],
    heads: Mapping[str, AuditHead],
    keys: AuditKeys | None = None,
) -> AuditReport:
    """Verify every chain of a store, and (with several) that none has vanished. With
    ``keys``, every entry must also carry a MAC that verifies."""
    by_chain: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        by_chain.setdefault(entry.chain, []).append(entry)
    total = 0
    for chain in sorted(set(by_chain) | set(heads)):
        report = verify_chain(by_chain.get(chain, []), heads.get(chain), keys)
        if not report.intact:
            return replace(report, entries=total + report.entries, chain=chain)
        total += report.entries
    present = (set(by_chain) | set(heads)) - {CHAINS, MAIN}
    if present or CHAINS in by_chain:
        registered = {str(e.record["data"].get("chain")) for e in by_chain.get(CHAINS, [])}
        for chain in sorted(registered - present):
            return AuditReport(
                False,
                total,
                1,
                "this chain was recorded but its entries are gone "
                "(a run's audit trail was deleted)",
                chain,
            )
        for chain in sorted(present - registered):
            return AuditReport(
                False, total, 1, "this chain was never recorded in _chains (inserted)", chain
            )
    return AuditReport(True, total)


def verify_chain(
    entries: Iterable[AuditEntry], head: AuditHead | None, keys: AuditKeys | None = None
) -> AuditReport:
    """Replay the chain in stored order; name the first entry that does not verify."""
    expected_seq, prev, count = 1, GENESIS, 0
    for entry in entries:
        problem = _entry_problem(entry, expected_seq, prev) or _mac_problem(entry, keys)
        if problem is not None:
            return AuditReport(False, count, entry.seq, problem)
        expected_seq, prev, count = entry.seq + 1, entry.hash, count + 1
    if head is None:
        if count:
            return AuditReport(False, count, count, "entries exist but the head record is missing")
        return AuditReport(True, 0)
    if count > head.seq:
        return AuditReport(
            False,
            count,
            head.seq + 1,
            f"the head says the log ends at entry {head.seq}, but entries follow it "
            "(appended without going through the store, or the head was rolled back)",
        )
    if head.seq != count or head.hash != prev:
        return AuditReport(
            False,
            count,
            count + 1 if count < head.seq else count,
            f"the head says {head.seq} entries ending in {head.hash[:12]}…, the log has {count}"
            " (entries were removed from the end, or the head was altered)",
        )
    return AuditReport(True, count)


def _entry_problem(entry: AuditEntry, expected_seq: int, prev: str) -> str | None:
    if entry.seq != expected_seq:
        return f"sequence number {entry.seq} where {expected_seq} was expected"
    if entry.prev_hash != prev:
        return "prev_hash does not match the previous entry's hash"
    if chain_hash(entry.prev_hash, entry.body) != entry.hash:
        return "hash does not match the entry's contents (the entry was edited)"
    try:
        record = entry.record
    except ValueError:
        return "body is not valid JSON (the entry was edited)"
    if record.get("seq") != entry.seq:
        return "body's sequence number differs from the row's"
    if record.get("chain", MAIN) != entry.chain:
        return "body's chain differs from the row's"
    if record.get("kind") != entry.kind or record.get("run_id") != entry.run_id:
        return "indexed columns (kind, run_id) differ from the hashed body"
    return None


def _mac_problem(entry: AuditEntry, keys: AuditKeys | None) -> str | None:
    if keys is None:
        return None
    if entry.mac is None or entry.key_id is None:
        return (
            "the entry carries no MAC: it was written without the audit key "
            "(inserted outside tether)"
        )
    try:
        if keys.check(entry.key_id, entry.hash, entry.mac):
            return None
    except AuditKeyMissing:
        return (
            f"the entry claims audit key {entry.key_id}, which is not in the keyring "
            f"({keys.source}): forged, or the keyring lost an old key"
        )
    return (
        "the MAC does not verify: the entry was forged or rewritten by someone without "
        "the audit key"
    )
