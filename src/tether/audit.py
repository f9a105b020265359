"""The hash-chained audit log: building entries and verifying the chain.

Each entry's ``body`` is the canonical JSON of what happened; its ``hash`` is
``sha256(prev_hash || body)``. The body is stored exactly as hashed, so verifying never
depends on re-serialising. A separate head record (last sequence number and hash, written in
the same transaction as every append) catches a deleted tail, which a chain alone cannot:
the shortened chain is still internally consistent. Copy ``tether audit head`` somewhere the
database's writers cannot reach to make even a rewritten head detectable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.digest import canonical_json, sha256_hex

GENESIS = "0" * 64


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    seq: int
    kind: str
    run_id: str | None
    body: str
    prev_hash: str
    hash: str

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
    at: float,
    kind: str,
    run_id: str | None,
    actor: str | None,
    data: Mapping[str, Any],
    redactions: Iterable[str] = (),
) -> AuditEntry:
    """The next entry after ``head``. ``data`` must already be redacted (I7)."""
    seq = 1 if head is None else head.seq + 1
    prev = GENESIS if head is None else head.hash
    body = canonical_json(
        {
            "seq": seq,
            "at": round(at, 6),
            "kind": kind,
            "run_id": run_id,
            "actor": actor,
            "data": dict(data),
            "redactions": sorted(set(redactions)),
        }
    )
    return AuditEntry(
        seq=seq, kind=kind, run_id=run_id, body=body, prev_hash=prev, hash=chain_hash(prev, body)
    )


@dataclass(frozen=True)
class AuditReport:
    intact: bool
    entries: int
    first_bad: int | None = None
    problem: str | None = None

    def summary(self) -> str:
        if self.intact:
            return f"audit intact: {self.entries} entries verified"
        return f"audit broken at entry {self.first_bad}: {self.problem}"


def verify_chain(entries: Iterable[AuditEntry], head: AuditHead | None) -> AuditReport:
    """Replay the chain in stored order; name the first entry that does not verify."""
    expected_seq, prev, count = 1, GENESIS, 0
    for entry in entries:
        problem = _entry_problem(entry, expected_seq, prev)
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
    if record.get("kind") != entry.kind or record.get("run_id") != entry.run_id:
        return "indexed columns (kind, run_id) differ from the hashed body"
    return None
