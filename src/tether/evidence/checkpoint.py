"""Signed checkpoints of the audit log, after C2SP tlog-checkpoint and signed-note.

The database's own head records can be rewritten by whoever can write the database, so they
cannot show that the log was truncated, rewritten or wiped. A checkpoint, kept somewhere the
database's writers cannot reach, can::

    tether/<store id>
    <total entries>
    <base64 root hash>
    <chain> <seq> <hex hash>            one extension line per chain
                                        (a blank line)
    — <key name> <base64(4-byte key hash || Ed25519 signature)>

The root hash is SHA-256 over the canonical JSON of the heads; the signature (by the keyring's
Ed25519 key, named by the origin) covers every line above the blank one. Verifying against a
checkpoint proves the current log *extends* it: every chain still has the entry at the
checkpoint's sequence number, with the same hash (the hash chain then vouches for everything
before it), and the log as a whole verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote

from tether.core.digest import canonical_json
from tether.errors import CheckpointUnreadable
from tether.evidence.audit import MAIN, AuditHead, AuditReport, LogReplay
from tether.evidence.crosscheck import replay_evidence, verify_evidence
from tether.evidence.keys import AuditKeys
from tether.store.base import Store

ORIGIN_PREFIX = "tether/"
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space begin a signed-note signature line
_ED25519 = b"\x01"  # signed-note's signature type for Ed25519
_NAME_SAFE = "-_.:@+~"  # run ids stay readable; spaces and newlines are escaped


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    heads: dict[str, AuditHead]

    @property
    def root(self) -> str:
        return base64.b64encode(root_hash(self.heads)).decode()

    def note(self) -> str:
        """The signed text: origin, size, root, one line per chain; newline-terminated."""
        lines = [self.origin, str(self.size), self.root]
        lines += [
            f"{quote(c, safe=_NAME_SAFE)} {h.seq} {h.hash}" for c, h in sorted(self.heads.items())
        ]
        return "\n".join(lines) + "\n"


def root_hash(heads: Mapping[str, AuditHead]) -> bytes:
    canonical = canonical_json({c: [h.seq, h.hash] for c, h in heads.items()})
    return hashlib.sha256(canonical.encode()).digest()


def key_hash(name: str, public_key: bytes) -> bytes:
    """signed-note's key hash: the first 4 bytes of SHA-256(name, newline, type, key)."""
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + public_key).digest()[:4]


def origin_of(store: Store) -> str:
    return ORIGIN_PREFIX + (store.store_id or "unknown")


# -- making one ------------------------------------------------------------------------------
def create_checkpoint(store: Store) -> tuple[AuditReport, str | None]:
    """Verify the log and, only if it is intact, sign a checkpoint of it (signing a broken
    log would vouch for the damage)."""
    with store.evidence() as evidence:
        heads = evidence.heads
        report = verify_evidence(evidence, store.keys)
    if not report.intact:
        return report, None
    point = Checkpoint(origin_of(store), sum(h.seq for h in heads.values()), heads)
    return report, sign_note(point.note(), point.origin, store.keys)


def sign_note(note: str, name: str, keys: AuditKeys) -> str:
    signature = keys.sign(note.encode())
    blob = base64.b64encode(key_hash(name, keys.public_key) + signature).decode()
    return f"{note}\n{SIGNATURE_PREFIX}{name} {blob}\n"


# -- reading one -----------------------------------------------------------------------------
def parse_checkpoint(text: str) -> tuple[Checkpoint, str, list[tuple[str, bytes]]]:
    """The checkpoint, the exact text its signatures cover, and the signatures (name, blob)."""
    note, sep, signed = text.partition("\n\n")
    if not sep:
        raise CheckpointUnreadable("not a signed checkpoint: no blank line before a signature")
    note += "\n"
    lines = note.splitlines()
    if len(lines) < 3 or not lines[0].startswith(ORIGIN_PREFIX):
        raise CheckpointUnreadable(f"not a tether checkpoint: it should begin {ORIGIN_PREFIX}…")
    try:
        size = int(lines[1])
        heads = {
            unquote(c): AuditHead(int(s), h) for c, s, h in (ln.split(" ") for ln in lines[3:])
        }
    except ValueError as e:
        raise CheckpointUnreadable(f"the checkpoint is malformed: {e}") from None
    # Whether the root agrees with the chain lines is for the verifier to check along with
    # the signature, so that any alteration of a checkpoint is reported the same way.
    return Checkpoint(lines[0], size, heads), note, _signatures(signed)


def _signatures(block: str) -> list[tuple[str, bytes]]:
    found = []
    for line in block.splitlines():
        if not line.startswith(SIGNATURE_PREFIX):
            continue
        name, _, blob = line[len(SIGNATURE_PREFIX) :].rpartition(" ")
        try:
            found.append((name, base64.b64decode(blob, validate=True)))
        except binascii.Error:
            continue  # an unreadable signature is no signature
    return found


def signed_by(note: str, name: str, signatures: list[tuple[str, bytes]], keys: AuditKeys) -> bool:
    """Whether one of the signatures is ``name``'s, by ``keys``, over ``note``."""
    if not keys.public_key:
        raise keys.missing("public key to check a checkpoint's signature with")
    expected = key_hash(name, keys.public_key)
    return any(
        n == name and blob[:4] == expected and keys.verify_signature(note.encode(), blob[4:])
        for n, blob in signatures
    )


# -- checking the log against one ------------------------------------------------------------
def verify_checkpoint(store: Store, text: str, *, public_key: bytes | None = None) -> AuditReport:
    """Whether the store's log is intact *and* extends the checkpoint ``text``.

    Raises ``CheckpointUnreadable`` for a file that is no checkpoint and ``AuditKeyMissing``
    if there is no key to check the signature with (both: could not check)."""
    point, note, signatures = parse_checkpoint(text)
    keys = (
        store.keys
        if public_key is None
        else AuditKeys.public_only(public_key, source="--public-key")
    )
    # The note rebuilt from its parts differs from the text if the root was altered.
    if point.note() != note or not signed_by(note, point.origin, signatures, keys):
        return _broken(
            "the checkpoint's signature does not verify with this store's key: it was altered, "
            "forged, or is another store's"
        )
    if store.store_id is None:
        return _broken("the store no longer records its id: its tether_meta table was emptied")
    if point.origin != origin_of(store):
        return _broken(
            f"the checkpoint is for {point.origin}, but this store is {origin_of(store)}"
        )
    # One pass over the log: the replay notes the hash at each chain's checkpointed entry.
    watch = {chain: head.seq for chain, head in point.heads.items() if head.seq}
    with store.evidence() as evidence:
        report, replay = replay_evidence(evidence, store.keys, watch=watch)
    problem = extension_problem(point, replay)
    if problem is not None:
        return replace(problem, checkpoint=point.size)
    return replace(report, checkpoint=point.size)


def extension_problem(point: Checkpoint, replay: LogReplay) -> AuditReport | None:
    """Why the log does not extend the checkpoint, naming the first chain that does not."""
    total = replay.entries
    if point.size and not total:
        return _broken(
            f"the checkpoint vouches for {point.size} entries, but the audit log is empty: "
            "it was wiped"
        )
    for chain, head in sorted(point.heads.items()):
        if head.seq == 0:
            continue
        where = "the log" if chain == MAIN else f"chain {chain}"
        found = replay.watched.get(chain)
        if found is None:
            seen = replay.chains.get(chain)
            now = 0 if seen is None else seen.top
            return AuditReport(
                False,
                total,
                head.seq,
                f"{where} had {head.seq} entries at the checkpoint and has {now} now: "
                + ("it was deleted" if now == 0 else "it was truncated"),
                chain,
            )
        if found != head.hash:
            return AuditReport(
                False,
                total,
                head.seq,
                "this entry is not the one the checkpoint vouches for: the log was rewritten",
                chain,
            )
    return None


def _broken(problem: str) -> AuditReport:
    return AuditReport(False, 0, None, problem)
