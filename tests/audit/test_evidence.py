"""Evidence that does not trust the database (I10): audit MACs with a key kept outside it,
row digests that tie the state to the log, signed checkpoints, and read-only verification.

Every attack here is plain SQL by someone who can write the database but not read the key
file: the MACs, the row digests and the checkpoint signature are what they cannot redo.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.audit.tamper import Opened, Raw
from tests.pg import schema_url
from tether.core.principal import Principal
from tether.errors import (
    ApprovalRequired,
    AuditKeyMissing,
    CheckpointUnreadable,
    ConfigurationError,
    IntegrityError,
    StoreMissing,
)
from tether.evidence.audit import MAIN, AuditHead, make_entry
from tether.evidence.checkpoint import create_checkpoint, parse_checkpoint, verify_checkpoint
from tether.evidence.keys import AuditKeys
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.store import MemoryStore, Store, keying, open_store
from tether.store.keying import AUDIT_KEY_ID
from tether.tools.registry import Manifest, Registry, Risk

USER = Principal(subject="user-42", tenant="acme")
REVIEWER = "reviewer-5"


# -- a store with some history, made through the real gate ---------------------------------
def obj(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def make_gate(store: Store) -> Gate:
    registry = Registry()
    registry.add(Manifest(name="lookup", parameters=obj({"q": {"type": "string"}})), _ok)
    registry.add(
        Manifest(name="transfer", parameters=obj({"amount": {"type": "integer"}}), risk=Risk.WRITE),
        _ok,
    )
    now = [1_000_000.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    policy = Policy(version="policy-1", approvers=frozenset({REVIEWER}))
    return Gate(registry, policy, store, clock=clock)


def _ok(**arguments: Any) -> dict[str, Any]:
    return {"ok": True, **arguments}


def populate(store: Store) -> None:
    """Two runs: one with a lookup and an approved, committed transfer; one waiting for an
    approval. Every kind of row the log vouches for, written the way tether writes it."""
    gate = make_gate(store)
    first = gate.start_run(USER)
    gate.call(first, ToolCall(call_id="c1", tool="lookup", arguments={"q": "T-1"}))
    transfer = ToolCall(call_id="c2", tool="transfer", arguments={"amount": 5})
    with pytest.raises(ApprovalRequired) as asked:
        gate.call(first, transfer)
    gate.approve(asked.value.approval_id, REVIEWER)
    gate.call(first, transfer)
    second = gate.start_run(USER)
    with pytest.raises(ApprovalRequired):
        gate.call(second, ToolCall(call_id="c1", tool="transfer", arguments={"amount": 7}))


# -- MACs --------------------------------------------------------------------------------------
def test_an_entry_forged_the_public_way_is_caught(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    assert store.verify_audit().intact
    chain = "_global" if raw.pg else MAIN
    heads = store.audit_heads()
    forged = make_entry(  # sha256(prev + body), exactly as the code does it, but no key
        heads.get(chain), chain=chain, at=2e6, kind="approval_granted", run_id=None,
        actor=REVIEWER, data={"note": "trust me"},
    )  # fmt: skip
    if raw.pg:
        raw.run(
            "INSERT INTO audit_log (chain, seq, kind, run_id, prev_hash, hash, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (chain, forged.seq, forged.kind, None, forged.prev_hash, forged.hash, forged.body),
        )
        raw.run(
            "UPDATE audit_heads SET seq = ?, hash = ? WHERE chain = ?",
            (forged.seq, forged.hash, chain),
        )
    else:  # the trigger moves the head along, as for a genuine append
        raw.run(
            "INSERT INTO audit_log (seq, kind, run_id, prev_hash, hash, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (forged.seq, forged.kind, None, forged.prev_hash, forged.hash, forged.body),
        )
    report = store.verify_audit()
    assert not report.intact
    assert (report.chain, report.first_bad) == (chain, forged.seq)
    assert "MAC" in (report.problem or "")


def test_an_entry_with_a_copied_mac_is_caught(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    entries = list(store.audit_entries())
    victim, donor = entries[-1], entries[0]
    where, params = raw.at(victim.chain, victim.seq)
    raw.run(f"UPDATE audit_log SET mac = ? WHERE {where}", (donor.mac, *params))
    report = store.verify_audit()
    assert not report.intact and report.first_bad == victim.seq
    assert "MAC does not verify" in (report.problem or "")


def test_every_entry_carries_a_mac_that_checks() -> None:
    store = MemoryStore()
    populate(store)
    entries = list(store.audit_entries())
    assert entries and all(e.key_id == store.keys.key_id for e in entries)
    assert all(store.keys.check(e.key_id or "", e.hash, e.mac or "") for e in entries)
    assert store.verify_audit().intact


# -- the state against the log -----------------------------------------------------------------
def _first_effect(raw: Raw) -> str:
    return str(raw.run("SELECT operation_key FROM agent_effects ORDER BY created_at")[0][0])


def _first_approval(raw: Raw) -> str:
    return str(raw.run("SELECT approval_id FROM approvals ORDER BY created_at")[0][0])


# Each attack edits the rows behind tether's back; what raw.run returns is not used.
ROW_ATTACKS: dict[str, Callable[[Raw], object]] = {
    "effect edited": lambda raw: raw.run(
        "UPDATE agent_effects SET status = 'failed' WHERE operation_key = ?", (_first_effect(raw),)
    ),
    "effect result edited": lambda raw: raw.run(
        "UPDATE agent_effects SET result_json = '{\"ok\":false}' WHERE operation_key = ?",
        (_first_effect(raw),),
    ),
    "effect deleted": lambda raw: raw.run(
        "DELETE FROM agent_effects WHERE operation_key = ?", (_first_effect(raw),)
    ),
    "effect inserted": lambda raw: raw.run(
        "INSERT INTO agent_effects (operation_key, run_id, call_id, tool_name, tool_version, "
        "argument_digest, status, attempts, created_at, updated_at) "
        "VALUES ('run-x:c9:transfer:1', 'run-x', 'c9', 'transfer', '1', 'sha256:00', "
        "'committed', 1, 1.0, 1.0)"
    ),
    "approval edited": lambda raw: raw.run(
        "UPDATE approvals SET status = 'approved' WHERE approval_id = ?", (_first_approval(raw),)
    ),
    "approval record edited": lambda raw: raw.run(
        "UPDATE approvals SET record_json = replace(record_json, 'reviewer', 'intruder')"
    ),
    "approval deleted": lambda raw: raw.run(
        "DELETE FROM approvals WHERE approval_id = ?", (_first_approval(raw),)
    ),
    "approval inserted": lambda raw: raw.run(
        "INSERT INTO approvals (approval_id, run_id, call_id, status, created_at, expires_at, "
        "record_json) SELECT 'apr-forged', run_id, call_id, status, created_at, expires_at, "
        "record_json FROM approvals WHERE approval_id = ?",
        (_first_approval(raw),),
    ),
    "run deleted": lambda raw: raw.run(
        "DELETE FROM agent_runs WHERE run_id = (SELECT min(run_id) FROM agent_runs)"
    ),
    "run inserted": lambda raw: raw.run(
        "INSERT INTO agent_runs (run_id, state_version, status, principal_id, tenant_id, "
        "policy_version, checkpoint_json, created_at, updated_at) "
        "VALUES ('run-ghost', 1, 'queued', 'user-42', 'acme', 'policy-1', '{}', 1.0, 1.0)"
    ),
}


@pytest.mark.parametrize("attack", sorted(ROW_ATTACKS))
def test_rows_changed_with_plain_sql_are_caught(sql_store: Opened, attack: str) -> None:
    populate(sql_store.store)
    before = sql_store.store.verify_audit()
    assert before.intact and before.rows >= 6, before.summary()
    ROW_ATTACKS[attack](sql_store.raw)
    report = sql_store.store.verify_audit()
    assert not report.intact, f"{attack} went unnoticed"
    assert "outside tether" in (report.problem or ""), report.summary()


def test_a_wiped_log_beside_existing_state_is_caught(sql_store: Opened) -> None:
    store = sql_store.store
    populate(store)
    _, checkpoint = create_checkpoint(store)
    assert checkpoint is not None
    sql_store.raw.wipe_audit()
    report = store.verify_audit()
    assert not report.intact
    assert "the log was wiped" in report.summary()
    against = verify_checkpoint(store, checkpoint)
    assert not against.intact and "wiped" in (against.problem or "")


def test_an_empty_store_verifies() -> None:
    report = MemoryStore().verify_audit()
    assert report.intact and report.entries == 0


# -- checkpoints -------------------------------------------------------------------------------
def test_a_checkpoint_is_a_signed_note(sql_store: Opened) -> None:
    store = sql_store.store
    populate(store)
    report, text = create_checkpoint(store)
    assert text is not None and report.intact
    point, note, signatures = parse_checkpoint(text)
    lines = text.splitlines()
    assert lines[0] == f"tether/{store.store_id}" == point.origin
    assert int(lines[1]) == report.entries == sum(h.seq for h in point.heads.values())
    assert lines[2] == point.root
    assert lines[-2] == "" and lines[-1].startswith(f"\u2014 {point.origin} ")
    assert [n for n, _ in signatures] == [point.origin]
    assert note == text[: text.index("\n\n") + 1]
    assert verify_checkpoint(store, text).intact
    # Only the public key: the signature and the extension are still checked.
    public = verify_checkpoint(store, text, public_key=store.keys.public_key)
    assert public.intact and public.checkpoint == report.entries


def test_an_altered_checkpoint_does_not_verify(sql_store: Opened) -> None:
    store = sql_store.store
    populate(store)
    _, text = create_checkpoint(store)
    assert text is not None
    lines = text.splitlines(keepends=True)
    lines[1] = "1\n"  # claim a shorter log, so that a truncation would pass
    altered = verify_checkpoint(store, "".join(lines))
    assert not altered.intact and "signature" in (altered.problem or "")
    with pytest.raises(CheckpointUnreadable):
        verify_checkpoint(store, "tether/x\nnot a number\n\n")
    other = AuditKeys.ephemeral()
    report = verify_checkpoint(store, text, public_key=other.public_key)
    assert not report.intact and "signature" in (report.problem or "")


def test_a_truncated_log_with_its_head_moved_back_is_caught(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    _, text = create_checkpoint(store)
    assert text is not None
    chain, head = max(store.audit_heads().items(), key=lambda item: item[1].seq)
    keep = head.seq - 2
    (kept_hash,) = [e.hash for e in store.audit_entries() if (e.chain, e.seq) == (chain, keep)]
    if raw.pg:
        raw.run("DELETE FROM audit_log WHERE chain = ? AND seq > ?", (chain, keep))
        raw.run(
            "UPDATE audit_heads SET seq = ?, hash = ? WHERE chain = ?", (keep, kept_hash, chain)
        )
    else:
        raw.run("DELETE FROM audit_log WHERE seq > ?", (keep,))
        raw.run("UPDATE audit_head SET seq = ?, hash = ?", (keep, kept_hash))
    report = verify_checkpoint(store, text)
    assert not report.intact
    assert "truncated" in (report.problem or "") and report.chain == chain


def test_a_rewritten_tail_is_caught(sql_store: Opened) -> None:
    # The attacker holds a key of their own: their entries are internally perfect.
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    _, text = create_checkpoint(store)
    assert text is not None
    rogue = AuditKeys.ephemeral()
    chain, head = next(iter(sorted(store.audit_heads().items())))
    where, params = raw.at(chain, head.seq)
    raw.run(f"DELETE FROM audit_log WHERE {where}", params)
    prev = [e for e in store.audit_entries() if e.chain == chain][-1]
    forged = make_entry(
        AuditHead(prev.seq, prev.hash), chain=chain, at=3e6, kind="x", run_id=None,
        actor=None, data={}, keys=rogue,
    )  # fmt: skip
    if raw.pg:
        raw.run(
            "INSERT INTO audit_log (chain, seq, kind, run_id, prev_hash, hash, body, key_id, mac)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (chain, forged.seq, forged.kind, None, forged.prev_hash, forged.hash, forged.body,
             forged.key_id, forged.mac),
        )  # fmt: skip
        raw.run("UPDATE audit_heads SET hash = ? WHERE chain = ?", (forged.hash, chain))
    else:
        raw.run(
            "INSERT INTO audit_log (seq, kind, run_id, prev_hash, hash, body, key_id, mac)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (forged.seq, forged.kind, None, forged.prev_hash, forged.hash, forged.body,
             forged.key_id, forged.mac),
        )  # fmt: skip
    report = verify_checkpoint(store, text)
    assert not report.intact and "rewritten" in (report.problem or "")


# -- the key -----------------------------------------------------------------------------------
def test_the_keyring_macs_seals_and_signs() -> None:
    import base64
    import hmac

    ring = AuditKeys.ephemeral()
    key_id, mac = ring.mac("hello")
    secret = base64.b64decode(json.loads(ring.to_json())["hmac"][key_id])
    assert mac == hmac.new(secret, b"hello", "sha256").hexdigest()  # plain HMAC-SHA256
    # Each MAC starts from a copy of the key's state: the second is not over "hellohello",
    # and the pure-Python HMAC (where no OpenSSL object is inside it) agrees byte for byte.
    assert ring.mac("hello") == (key_id, mac)
    from tether.evidence import keys as keys_module

    assert keys_module._hmac(hmac.new(secret, digestmod="sha256"), "hello") == mac
    rotated = ring.rotated()
    assert rotated.key_id != key_id and rotated.check(key_id, "hello", mac)
    assert not rotated.check(key_id, "hellp", mac)
    with pytest.raises(AuditKeyMissing, match="restore the keyring"):
        AuditKeys.ephemeral().check(key_id, "hello", mac)
    seal = rotated.seal("grant", {"a": 1})
    assert rotated.verify_seal("grant", {"a": 1}, seal)
    for purpose, value, candidate in [
        ("grant", {"a": 2}, seal),  # another value
        ("run", {"a": 1}, seal),  # another purpose
        ("grant", {"a": 1}, None),
        ("grant", {"a": 1}, "garbage"),
        ("grant", {"a": 1}, "0123456789abcdef:00"),  # a key the ring does not hold
    ]:
        assert not rotated.verify_seal(purpose, value, candidate)
    signature = rotated.sign(b"note")
    assert rotated.verify_signature(b"note", signature)
    assert not rotated.verify_signature(b"nope", signature)
    again = AuditKeys.from_env_value(rotated.export())
    assert (again.key_id, again.public_key) == (rotated.key_id, rotated.public_key)
    assert again.check(key_id, "hello", mac)
    assert "secret" not in repr(again) and again.export() not in repr(again)


def test_a_key_file_is_made_private_and_beside_the_database(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        populate(store)
        key_id = store.keys.key_id
    key = tmp_path / "t.db.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key_id in json.loads(key.read_text())["hmac"]
    with closing(sqlite3.connect(tmp_path / "t.db")) as c:
        assert (
            c.execute("SELECT value FROM tether_meta WHERE key = ?", (AUDIT_KEY_ID,)).fetchone()[0]
            == key_id
        )
        assert key.read_text() not in "".join(str(r) for r in c.execute("SELECT * FROM audit_log"))


def test_a_lost_key_is_a_clear_error_and_no_new_key_is_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        populate(store)
        key_id = store.keys.key_id
    key = tmp_path / "t.db.key"
    key.unlink()
    for read_only in (False, True):
        with pytest.raises(AuditKeyMissing) as lost:
            open_store(url, read_only=read_only)
        assert str(lost.value) == (
            f"audit key {key_id} is not in {key} or $TETHER_AUDIT_KEY; restore the key file"
        )
    assert not key.exists()  # a writer did not quietly make a fresh one
    out = _tether("audit", "verify", "--db", url, cwd=tmp_path)
    assert out.returncode == 2 and "restore the key file" in out.stderr


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    open_store(url).close()
    (tmp_path / "t.db.key").chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        open_store(url)


def test_the_keyring_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        populate(store)
        exported = store.keys.export()
    (tmp_path / "t.db.key").unlink()  # another machine: only the environment has it
    monkeypatch.setenv("TETHER_AUDIT_KEY", exported)
    with open_store(url) as store:
        assert store.verify_audit().intact
        populate(store)  # and writes with it
        assert store.verify_audit().intact
    monkeypatch.setenv("TETHER_AUDIT_KEY", AuditKeys.ephemeral().export())
    with pytest.raises(AuditKeyMissing, match=r"is not in \$TETHER_AUDIT_KEY"):
        open_store(url)


def test_the_key_file_can_be_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "secrets" / "tether.key"
    monkeypatch.setenv("TETHER_AUDIT_KEY_FILE", str(elsewhere))
    with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        populate(store)
        assert store.key_file == elsewhere
    assert elsewhere.exists() and not (tmp_path / "t.db.key").exists()
    with open_store(f"sqlite:///{tmp_path}/t.db", read_only=True) as reader:
        assert reader.verify_audit().intact


def test_rotation_keeps_old_entries_verifiable(sql_store: Opened) -> None:
    store, url = sql_store.store, sql_store.url
    populate(store)
    old = store.keys.key_id
    new = store.rotate_audit_key()
    assert new.key_id != old and new.has(old)
    populate(store)
    used = {e.key_id for e in store.audit_entries()}
    assert used == {old, new.key_id}
    assert store.verify_audit().intact
    with open_store(url, read_only=True) as again:  # the rotated ring was saved
        assert again.keys.key_id == new.key_id
        assert again.verify_audit().intact
    assert [e.kind for e in store.audit_entries()].count("audit_key_rotated") == 1


def test_a_log_without_macs_is_adopted_only_when_the_operator_says(sql_store: Opened) -> None:
    """A log made before audit keys and one whose MACs and key record were stripped (the key
    file deleted) look the same: a writer opening it makes a key but vouches for nothing
    written before, so verify fails until ``trust_unkeyed_log`` (``tether migrate
    --trust-unkeyed-log``) records the operator's word."""
    store, raw, url = sql_store.store, sql_store.raw, sql_store.url
    populate(store)
    count = store.verify_audit().entries
    key_file = store.key_file
    assert key_file is not None
    store.close()
    raw.run("UPDATE audit_log SET key_id = NULL, mac = NULL")  # as an older tether left it
    raw.run("DELETE FROM tether_meta WHERE key = ?", (AUDIT_KEY_ID,))
    key_file.unlink()
    with open_store(url, read_only=True) as reader, pytest.raises(AuditKeyMissing):
        reader.verify_audit()  # nothing to check the log with, and a reader makes no key
    with open_store(url) as again:
        assert not [e for e in again.audit_entries() if e.kind == "audit_key_adopted"]
        report = again.verify_audit()
        assert not report.intact and "MAC" in (report.problem or ""), report.summary()
        assert keying.trust_unkeyed_log(again) == count
        adopted = [e for e in again.audit_entries() if e.kind == "audit_key_adopted"]
        assert len(adopted) == 1 and adopted[0].record["data"]["entries"] == count
        assert again.verify_audit().intact
        assert keying.trust_unkeyed_log(again) == 0  # nothing left to adopt


def test_a_log_with_some_macs_stripped_is_never_adopted(sql_store: Opened) -> None:
    store, raw = sql_store.store, sql_store.raw
    populate(store)
    raw.run("UPDATE audit_log SET key_id = NULL, mac = NULL WHERE seq > 1")
    with pytest.raises(IntegrityError, match="stripped or inserted"):
        keying.trust_unkeyed_log(store)
    assert not store.verify_audit().intact


def test_a_keyed_log_whose_key_record_vanished_is_not_re_keyed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        populate(store)
    with closing(sqlite3.connect(tmp_path / "t.db")) as c, c:
        c.execute("DELETE FROM tether_meta")
    (tmp_path / "t.db.key").unlink()
    with pytest.raises(AuditKeyMissing, match="authenticated with key"):
        open_store(url)
    assert not (tmp_path / "t.db.key").exists()


# -- read-only -----------------------------------------------------------------------------
def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def test_verify_works_on_a_read_only_copy_and_writes_nothing(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        populate(store)
        _, checkpoint = create_checkpoint(store)
    assert checkpoint is not None
    (tmp_path / "cp").write_text(checkpoint)
    copy = tmp_path / "ro"
    copy.mkdir()
    for name in ("t.db", "t.db.key"):
        shutil.copy2(tmp_path / name, copy / name)
    (copy / "t.db").chmod(0o444)
    copy.chmod(0o555)
    before = _snapshot(copy)
    try:
        url = f"sqlite:///{copy}/t.db"
        with open_store(url, read_only=True) as reader:
            assert reader.verify_audit().intact
        out = _tether("audit", "verify", "--json", "--db", url, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert len(out.stdout.splitlines()) == 1 and json.loads(out.stdout)["intact"] is True
        out = _tether(
            "audit", "verify", "--checkpoint", str(tmp_path / "cp"), "--db", url, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
        assert "extends the checkpoint" in out.stdout
        assert _tether("audit", "checkpoint", "--db", url, cwd=tmp_path).returncode == 0
        assert _snapshot(copy) == before
    finally:
        copy.chmod(0o755)


def test_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    for args in (("verify",), ("checkpoint",), ("head",)):
        out = _tether("audit", *args, "--db", f"sqlite:///{tmp_path}/nope/x.db", cwd=tmp_path)
        assert out.returncode == 2, out
        assert "no tether store at" in out.stderr
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreMissing):
        open_store(f"sqlite:///{tmp_path}/x.db", create=False)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_catches_a_wipe_with_and_without_a_checkpoint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        populate(store)
    cp = tmp_path / "cp"
    assert (
        _tether("audit", "checkpoint", "--db", url, "--out", str(cp), cwd=tmp_path).returncode == 0
    )
    ok = _tether("audit", "verify", "--db", url, "--checkpoint", str(cp), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    raw = Raw(url)
    raw.wipe_audit()
    raw.close()
    plain = _tether("audit", "verify", "--db", url, cwd=tmp_path)
    assert plain.returncode == 1 and "wiped" in plain.stderr
    against = _tether(
        "audit", "verify", "--db", url, "--checkpoint", str(cp), "--json", cwd=tmp_path
    )
    assert against.returncode == 1
    assert "wiped" in json.loads(against.stdout)["problem"]
    refused = _tether("audit", "checkpoint", "--db", url, cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""


def _tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- any single mutation after a checkpoint is detected ---------------------------------------
# The columns that are evidence: every one, except the read-order serials PostgreSQL adds
# (``audit_log.id``, ``approvals.seq``: they decide only the order rows are listed in) and
# SQLite's single head row's fixed key (``CHECK (id = 1)``).
NOT_EVIDENCE = {("audit_log", "id"), ("approvals", "seq"), ("audit_head", "id")}
TABLES = ("audit_log", "head", "agent_effects", "approvals")
OPS = ("edit", "delete", "insert", "reorder", "truncate", "wipe")


@dataclass(frozen=True)
class Mutation:
    op: str
    table: str
    row: int  # which row (modulo the table's size)
    column: int  # which column (modulo the evidence columns)
    count: int  # how many entries a truncation removes


mutations = st.builds(
    Mutation,
    op=st.sampled_from(OPS),
    table=st.sampled_from(TABLES),
    row=st.integers(0, 1000),
    column=st.integers(0, 100),
    count=st.integers(1, 5),
)


def every_kind_of_mutation(test: Callable[[Mutation], None]) -> Callable[[Mutation], None]:
    """Each operation on each table it applies to, whatever else Hypothesis draws."""
    for op in OPS:
        for table in TABLES if op in ("edit", "delete", "insert") else TABLES[:1]:
            test = example(mutation=Mutation(op, table, row=3, column=5, count=2))(test)
    return test


class World:
    """A populated store, its checkpoint, and a pristine copy to restore between examples."""

    def __init__(self, url: str, raw: Raw, store: Store, checkpoint: str) -> None:
        self.url, self.raw, self.store, self.checkpoint = url, raw, store, checkpoint
        self.tables = ["audit_log", raw.head_table, "agent_effects", "approvals", "agent_runs"]
        self._save()

    def _save(self) -> None:
        if self.raw.pg:
            for t in self.tables:
                self.raw.run(f"CREATE TABLE pristine_{t} AS SELECT * FROM {t}")
        else:
            self.raw.run("ATTACH ':memory:' AS pristine")
            for t in self.tables:
                self.raw.run(f"CREATE TABLE pristine.{t} AS SELECT * FROM main.{t}")
            self.triggers = self.raw.run("SELECT sql FROM sqlite_master WHERE type = 'trigger'")

    def restore(self) -> None:
        prefix = "pristine_" if self.raw.pg else "pristine."
        self.raw.run("BEGIN")
        if not self.raw.pg:
            for (name,) in self.raw.run(
                "SELECT name FROM main.sqlite_master WHERE type = 'trigger'"
            ):
                self.raw.run(f'DROP TRIGGER main."{name}"')
        for t in self.tables:
            self.raw.run(f"DELETE FROM {t}")
            self.raw.run(f"INSERT INTO {t} SELECT * FROM {prefix}{t}")
        if not self.raw.pg:
            for (sql,) in self.triggers:
                self.raw.run(sql)
        self.raw.run("COMMIT")

    def table(self, name: str) -> str:
        return self.raw.head_table if name == "head" else name

    def apply(self, m: Mutation) -> None:
        table = self.table(m.table)
        if m.op == "wipe":
            self.raw.wipe_audit()
        elif m.op == "truncate":
            self._truncate(m.count)
        elif m.op == "reorder":
            self._reorder(m.row)
        elif m.op == "delete":
            self._delete(table, m.row)
        elif m.op == "insert":
            self._insert(table, m.row)
        else:
            self._edit(table, m.row, m.column)

    # Rows are named by a key the backend keeps stable: rowid in SQLite, ctid in PostgreSQL.
    # Each table's natural order, so that "the row-th row" is the same row every time.
    ORDER: ClassVar[dict[str, str]] = {
        "audit_log": "chain, seq",
        "audit_heads": "chain",
        "audit_head": "id",
        "agent_effects": "operation_key",
        "approvals": "approval_id",
    }

    def _rows(self, table: str) -> list[Any]:
        key = "ctid" if self.raw.pg else "rowid"
        order = "seq" if table == "audit_log" and not self.raw.pg else self.ORDER[table]
        return [r[0] for r in self.raw.run(f"SELECT {key} FROM {table} ORDER BY {order}")]

    def _row(self, table: str, row: int) -> tuple[str, tuple[Any, ...]]:
        """The WHERE clause naming the ``row``-th row (modulo the table's size)."""
        rows = self._rows(table)
        target = rows[row % len(rows)]
        return ("ctid = ?::tid", (str(target),)) if self.raw.pg else ("rowid = ?", (target,))

    def _evidence_columns(self, table: str) -> list[str]:
        return sorted(c for c in self.raw.columns(table) if (table, c) not in NOT_EVIDENCE)

    def _delete(self, table: str, row: int) -> None:
        where, params = self._row(table, row)
        self.raw.run(f"DELETE FROM {table} WHERE {where}", params)

    def _edit(self, table: str, row: int, column: int) -> None:
        where, params = self._row(table, row)
        columns = self._evidence_columns(table)
        name = columns[column % len(columns)]
        (value,) = self.raw.run(f"SELECT {name} FROM {table} WHERE {where}", params)[0]
        self.raw.run(f"UPDATE {table} SET {name} = ? WHERE {where}", (_changed(value), *params))

    # What a copy of each table's row must change to be accepted beside the original.
    COPY_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "audit_log": ("seq",),
        "audit_heads": ("chain",),
        "agent_effects": ("operation_key", "call_id"),
        "approvals": ("approval_id",),
    }

    def _insert(self, table: str, row: int) -> None:
        """A copy of a row, its keys changed just enough for the table to take it."""
        if table == "audit_head":
            self._edit(table, row, 0)  # SQLite holds one head row only: alter it instead
            return
        where, params = self._row(table, row)
        columns = self._evidence_columns(table)
        keys = self.COPY_KEYS[table]
        select = [
            f"(SELECT max(seq) + 1 FROM {table})"
            if c == "seq" and c in keys
            else f"{c} || '-copy'"
            if c in keys
            else c
            for c in columns
        ]
        self.raw.run(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(select)} FROM {table} "
            f"WHERE {where}",
            params,
        )

    def _chain_of_longest(self) -> tuple[str, int]:
        chain, head = max(self.store.audit_heads().items(), key=lambda item: item[1].seq)
        return chain, head.seq

    def _reorder(self, row: int) -> None:
        """Swap two entries' sequence numbers (through a value no entry uses)."""
        chain, length = self._chain_of_longest()
        a = 1 + row % length
        b = 1 + (a % length)  # the next one, wrapping round
        scope = "chain = ? AND " if self.raw.pg else ""
        p = (chain,) if self.raw.pg else ()
        self.raw.run(f"UPDATE audit_log SET seq = -1 WHERE {scope}seq = ?", (*p, a))
        self.raw.run(f"UPDATE audit_log SET seq = ? WHERE {scope}seq = ?", (a, *p, b))
        self.raw.run(f"UPDATE audit_log SET seq = ? WHERE {scope}seq = -1", (b, *p))

    def _truncate(self, count: int) -> None:
        """Delete the last ``count`` entries of the longest chain and move its head back to
        the new last entry: a log that is consistent in itself."""
        chain, length = self._chain_of_longest()
        keep = max(0, length - count)
        scope = "chain = ? AND " if self.raw.pg else ""
        p = (chain,) if self.raw.pg else ()
        self.raw.run(f"DELETE FROM audit_log WHERE {scope}seq > ?", (*p, keep))
        found = self.raw.run(f"SELECT hash FROM audit_log WHERE {scope}seq = ?", (*p, keep))
        head_where = "chain = ?" if self.raw.pg else "id = 1"
        if not found:
            self.raw.run(f"DELETE FROM {self.raw.head_table} WHERE {head_where}", p)
        else:
            self.raw.run(
                f"UPDATE {self.raw.head_table} SET seq = ?, hash = ? WHERE {head_where}",
                (keep, found[0][0], *p),
            )


def _changed(value: Any) -> Any:
    if value is None:
        return "x"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1_000_003  # past every sequence number: no unique key refuses it
    if isinstance(value, float):
        return value + 1.5
    return str(value) + "x"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_any_single_mutation_after_a_checkpoint_is_detected(kind: str, tmp_path: Path) -> None:
    urls: Iterator[str] = iter([f"sqlite:///{tmp_path}/t.db"]) if kind == "sqlite" else schema_url()
    url = next(urls)
    store = open_store(url)
    raw = Raw(url)
    try:
        populate(store)
        report, checkpoint = create_checkpoint(store)
        assert checkpoint is not None and report.intact
        world = World(url, raw, store, checkpoint)

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(mutation=mutations)
        @every_kind_of_mutation
        def detected(mutation: Mutation) -> None:
            world.restore()
            assert verify_checkpoint(store, checkpoint).intact
            world.apply(mutation)
            after = verify_checkpoint(store, checkpoint)
            assert not after.intact, f"{mutation} went unnoticed"
            assert after.problem

        detected()
    finally:
        raw.close()
        store.close()
        for _ in urls:
            pass
