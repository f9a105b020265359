"""The hash-chained audit log: building entries and verifying the chain.

Each entry's ``body`` is the canonical JSON of what happened; its ``hash`` is
``sha256(prev_hash || body)``. The body is stored exactly as hashed, so verifying never
depends on re-serialising. A separate head record (last sequence number and hash, written in
the same transaction as every append) catches a deleted tail, which a chain alone cannot:
the shortened chain is still internally consistent.

None of that stops someone who can write the database from recomputing the chain, so every
entry also carries an HMAC of its hash made with the audit key (``tether.evidence.keys``), which
lives outside the database: a forged entry, however carefully chained, has no valid MAC. A signed
checkpoint (``tether.evidence.checkpoint``) kept elsewhere makes a truncated, rewritten or wiped log
detectable even though the database's own head record can be rewritten too.

An entry may also carry ``rows``: the digest of every effect, approval and run row its
transaction wrote (``tether.evidence.crosscheck``), so that verifying can check the state against
the log.

A store may keep one chain (``main``: SQLite, whose writers take turns anyway) or one chain
per run, so that workers appending for different runs never wait on one global head row
(PostgreSQL). With several chains, each new chain is first recorded in the ``_chains``
chain; verifying checks that every recorded chain still exists, so deleting a whole run —
its entries and its head — is detected too.

The module is long because an entry's format, the chain it joins and the verifier that checks
both are one contract: a change to one is a change to what verifies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from hashlib import sha256
from json.encoder import encode_basestring
from math import isfinite
from typing import Any, Literal

from tether.core.digest import canonical_json, sha256_hex
from tether.errors import AuditKeyMissing
from tether.evidence.keys import AuditKeys

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
    body = entry_body(
        chain=chain,
        seq=seq,
        at=at,
        kind=kind,
        run_id=run_id,
        actor=actor,
        data=data,
        redactions=redactions,
        rows=rows,
    )
    hashed = chain_hash(prev, body)
    key_id, mac = (None, None) if keys is None else keys.mac(hashed)
    # Built without the frozen dataclass's __init__, which sets each of nine fields through
    # object.__setattr__: on the gate's hot path that costs as much as hashing the entry.
    entry = object.__new__(AuditEntry)
    entry.__dict__.update(
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
    return entry


def _string_json(value: Any) -> str:
    """``canonical_json`` of a string, without the encoder's machinery (anything else goes
    through it)."""
    return encode_basestring(value) if type(value) is str else canonical_json(value)


def entry_body(
    *,
    chain: str,
    seq: int,
    at: float,
    kind: str,
    run_id: str | None,
    actor: str | None,
    data: Mapping[str, Any],
    redactions: Iterable[str],
    rows: Mapping[str, str] | None,
) -> str:
    """The canonical JSON of an entry's record, exactly as ``canonical_json`` gives it for
    ``{"actor", "at", ["chain"], "data", "kind", "redactions", ["rows"], "run_id", "seq"}``.

    Written out key by key, in sorted order, so that only ``data`` and ``rows`` go through
    the encoder: the record around them need not be built, merged, copied or sorted on every
    append. ``verify`` relies on this layout too (``_fast_fields``); a test compares it with
    ``canonical_json`` of the record."""
    t = round(at, 6)
    at_text = float.__repr__(t) if type(t) is float and isfinite(t) else canonical_json(t)
    marks = sorted(set(redactions))
    # A string is encoded by the function the canonical encoder itself calls for strings.
    text = _string_json
    return "".join(
        (
            '{"actor":',
            "null" if actor is None else text(actor),
            ',"at":',
            at_text,
            "" if chain == MAIN else ',"chain":' + canonical_json(chain),
            ',"data":',
            canonical_json(data if type(data) is dict else dict(data)),
            ',"kind":',
            text(kind),
            ',"redactions":',
            canonical_json(marks) if marks else "[]",
            ',"rows":' + canonical_json(rows if type(rows) is dict else dict(rows)) if rows else "",
            ',"run_id":',
            "null" if run_id is None else text(run_id),
            ',"seq":',
            str(seq),
            "}",
        )
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


# -- verifying -----------------------------------------------------------------------------
# An audit row as the stores read it for verifying: the stored text, no objects built.
AuditRow = tuple[str, int, str, "str | None", str, str, str, "str | None", "str | None"]
# (chain, seq, kind, run_id, prev_hash, hash, body, key_id, mac)


class _Chain:
    """What replaying one chain needs to remember: constant, whatever the chain's length."""

    __slots__ = ("count", "name", "prev", "problem", "seq", "top")

    def __init__(self, name: str) -> None:
        self.name = name
        self.seq = 0  # the last entry that verified
        self.prev = GENESIS
        self.count = 0  # entries that verified
        self.top = 0  # the highest sequence number seen at all
        self.problem: tuple[int, str] | None = None  # (seq, why) of the first bad entry


class LogReplay:
    """Verifies audit rows as they stream past, in one pass and in constant memory per entry.

    Each entry is hashed and MAC-checked from its stored text. Its indexed columns (seq,
    chain, kind, run_id) are compared with the hashed body without parsing it when the MAC
    verified: the body was then made by ``entry_body``, whose layout is known, so the
    columns' values must stand at known places (``_fast_fields``). Without a MAC to vouch for
    the layout, or if the text is not where it should be, the body is parsed and checked as
    before, so every problem is still named the same way.

    What is kept grows with the chains (one small record each) and with the rows the log
    records (``recorded``: each row's last digest, for the state cross-check), never with
    the entries."""

    def __init__(self, keys: AuditKeys | None, *, watch: Mapping[str, int] | None = None):
        self.keys = keys
        self.chains: dict[str, _Chain] = {}
        self.registered: set[str] = set()  # chains recorded in _chains
        self.recorded: dict[str, tuple[str, str, int]] = {}  # row -> (digest, chain, seq)
        self.entries = 0  # every row seen, good or bad
        self.watch = dict(watch or {})  # chain -> seq whose hash a checkpoint vouches for
        self.watched: dict[str, str] = {}  # chain -> the hash found there

    def feed(self, rows: Iterable[AuditRow]) -> None:
        chains, keys, watch, recorded = self.chains, self.keys, self.watch, self.recorded
        count = 0
        for chain, seq, kind, run_id, prev_hash, hashed, body, key_id, mac in rows:
            count += 1
            st = chains.get(chain)
            if st is None:
                st = chains[chain] = _Chain(chain)
            st.top = max(st.top, seq)
            if watch and watch.get(chain) == seq:
                self.watched[chain] = hashed
            if st.problem is not None:
                continue
            if seq != st.seq + 1:
                st.problem = (seq, f"sequence number {seq} where {st.seq + 1} was expected")
                continue
            if prev_hash != st.prev:
                st.problem = (seq, "prev_hash does not match the previous entry's hash")
                continue
            if sha256((prev_hash + body).encode()).hexdigest() != hashed:
                st.problem = (
                    seq,
                    "hash does not match the entry's contents (the entry was edited)",
                )
                continue
            mac_problem = None if keys is None else _mac_problem(keys, key_id, hashed, mac)
            rows_text = (
                _fast_fields(body, st.name, seq, kind, run_id)
                if keys is not None and mac_problem is None
                else False
            )
            if rows_text is False:
                checked = _slow_fields(body, st.name, seq, kind, run_id)
                if isinstance(checked, str):
                    st.problem = (seq, checked)
                    continue
                if mac_problem is not None:
                    st.problem = (seq, mac_problem)
                    continue
                found = checked.get("rows")
                entry_rows = found if isinstance(found, dict) else None
            else:
                entry_rows = None if rows_text is None else _rows_of(rows_text)
            if entry_rows:
                name = st.name
                for key, value in entry_rows.items():
                    recorded[str(key)] = (str(value), name, seq)
            if chain == CHAINS:
                started = json.loads(body).get("data", {}).get("chain")
                self.registered.add(str(started))
            st.seq, st.prev, st.count = seq, hashed, st.count + 1
        self.entries += count

    def report(self, heads: Mapping[str, AuditHead]) -> AuditReport:
        """The verdict on the chains fed so far and ``heads``, naming the first problem in
        chain order (as ``verify_chains`` always has)."""
        total = 0
        for chain in sorted(set(self.chains) | set(heads)):
            report = _chain_report(self.chains.get(chain), heads.get(chain))
            if not report.intact:
                return replace(report, entries=total + report.entries, chain=chain)
            total += report.entries
        present = (set(self.chains) | set(heads)) - {CHAINS, MAIN}
        if present or CHAINS in self.chains:
            for chain in sorted(self.registered - present):
                return AuditReport(
                    False,
                    total,
                    1,
                    "this chain was recorded but its entries are gone "
                    "(a run's audit trail was deleted)",
                    chain,
                )
            for chain in sorted(present - self.registered):
                return AuditReport(
                    False, total, 1, "this chain was never recorded in _chains (inserted)", chain
                )
        return AuditReport(True, total)


def _chain_report(st: _Chain | None, head: AuditHead | None) -> AuditReport:
    count, prev = (0, GENESIS) if st is None else (st.count, st.prev)
    if st is not None and st.problem is not None:
        return AuditReport(False, count, st.problem[0], st.problem[1])
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


def _fast_fields(
    body: str, chain: str, seq: int, kind: str, run_id: str | None
) -> str | Literal[False] | None:
    """Whether the columns agree with a body laid out by ``entry_body``, read off the text:
    the body's ``rows`` object as text (``None`` if it records no row), or ``False`` if the
    text is not where that layout puts it (then the caller parses the body).

    Sound for a body ``entry_body`` made (which a verified MAC shows): a comma followed by an
    unescaped quote never occurs inside a JSON string, so ``,"key":`` is always an object key;
    ``seq`` and ``run_id`` are the last two top-level keys, and after the top-level ``kind``
    come only ``redactions`` (a list of strings) and ``rows`` (row keys, which begin
    ``effect:``, ``approval:`` or ``run:``), so the last ``,"kind":`` is the top-level one."""
    if type(kind) is not str or not (run_id is None or type(run_id) is str):
        return False  # a column edited to another type: let the parser say what is wrong
    tail = (
        ',"run_id":'
        + ("null" if run_id is None else encode_basestring(run_id))
        + ',"seq":'
        + str(seq)
        + "}"
    )
    if not body.endswith(tail):
        return False
    k = body.rfind(',"kind":')
    if k < 0 or not body.startswith(',"kind":' + encode_basestring(kind) + ',"redactions":[', k):
        return False
    d = body.find(',"data":')
    c = body.find(',"chain":', 0, d)
    if chain == MAIN:
        if c >= 0:
            return False
    elif c < 0 or body[c + 9 : d] != canonical_json(chain):
        return False
    r = body.rfind(',"rows":{', k)
    if r < 0:
        return None
    return body[r + 8 : len(body) - len(tail)]


def _rows_of(text: str) -> dict[str, str]:
    """A ``rows`` object's text as a dict. Row keys and digests need no escapes as a rule,
    so the text splits on its quotes; anything else goes through the JSON parser."""
    if "\\" not in text and text.startswith('{"') and text.endswith('"}'):
        out = {}
        for pair in text[2:-2].split('","'):
            key, sep, value = pair.partition('":"')
            if not sep or '"' in value:
                break
            out[key] = value
        else:
            return out
    parsed = json.loads(text)
    return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}


def _slow_fields(
    body: str, chain: str, seq: int, kind: str, run_id: str | None
) -> dict[str, Any] | str:
    """The parsed body, or why it disagrees with the entry's columns."""
    try:
        record = json.loads(body)
    except ValueError:
        return "body is not valid JSON (the entry was edited)"
    if not isinstance(record, dict):
        return "body is not a JSON object (the entry was edited)"
    if record.get("seq") != seq:
        return "body's sequence number differs from the row's"
    if record.get("chain", MAIN) != chain:
        return "body's chain differs from the row's"
    if record.get("kind") != kind or record.get("run_id") != run_id:
        return "indexed columns (kind, run_id) differ from the hashed body"
    return record


def _mac_problem(keys: AuditKeys, key_id: str | None, hashed: str, mac: str | None) -> str | None:
    if mac is None or key_id is None:
        return (
            "the entry carries no MAC: it was written without the audit key "
            "(inserted outside tether)"
        )
    try:
        if keys.check(key_id, hashed, mac):
            return None
    except AuditKeyMissing:
        return (
            f"the entry claims audit key {key_id}, which is not in the keyring "
            f"({keys.source}): forged, or the keyring lost an old key"
        )
    return (
        "the MAC does not verify: the entry was forged or rewritten by someone without "
        "the audit key"
    )


def entry_row(entry: AuditEntry) -> AuditRow:
    return (
        entry.chain,
        entry.seq,
        entry.kind,
        entry.run_id,
        entry.prev_hash,
        entry.hash,
        entry.body,
        entry.key_id,
        entry.mac,
    )


def verify_chains(
    entries: Iterable[AuditEntry],
    heads: Mapping[str, AuditHead],
    keys: AuditKeys | None = None,
) -> AuditReport:
    """Verify every chain of a store, and (with several) that none has vanished. With
    ``keys``, every entry must also carry a MAC that verifies."""
    replay = LogReplay(keys)
    replay.feed(map(entry_row, entries))
    return replay.report(heads)


def verify_chain(
    entries: Iterable[AuditEntry], head: AuditHead | None, keys: AuditKeys | None = None
) -> AuditReport:
    """Replay one chain in stored order; name the first entry that does not verify."""
    replay = LogReplay(keys)
    replay.feed(map(entry_row, entries))
    chain = next(iter(replay.chains.values()), None)
    return _chain_report(chain, head)
