"""Digests, MACs, seals and stored texts pinned over fixtures made by the code before the
hot path's "encode once" work: a fixed scenario (fixed clock, keys, ids and latency) run
through the gate must give, byte for byte, the audit entries (body, hash, MAC), row digests,
checkpoints and approval records recorded in ``fixtures/pinned_digests.json``; and a SQLite
file written then (``fixtures/pinned.db`` with its keyring) must still verify, read back and
take new calls whose entries chain on.

Regenerate the JSON only on purpose (a deliberate format change): ``python -m
tests.unit.test_pinned_digests --write``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether import Gate, Policy, Principal, Registry, Risk, ToolCall
from tether.errors import ApprovalRequired, PolicyDenied, ToolFailed
from tether.evidence.keys import AuditKeys, key_id_of
from tether.gate import pipeline
from tether.store import MemoryStore, SQLiteStore, Store

HERE = Path(__file__).parent / "fixtures"
PINNED = HERE / "pinned_digests.json"
SECRET = bytes(range(32))
KEYS = AuditKeys({key_id_of(SECRET): SECRET}, key_id_of(SECRET), bytes(range(32, 64)))


def scenario(store: Store, monkeypatch: Any) -> None:
    """Every kind of record the hot path writes: an approval requested, granted and used; a
    plain allowed call; a redacted argument; a failed tool (its cost refunded); a policy
    denial; a replay."""
    ids = iter(f"apr-{i:016d}" for i in range(100))
    monkeypatch.setattr(pipeline, "new_id", lambda prefix: next(ids))
    monkeypatch.setattr(pipeline, "time", SimpleNamespace(perf_counter=lambda: 1.0))
    clock = iter(1_800_000_000.0 + i * 0.25 for i in range(10_000))
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write", cost=2)
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "status": "closed", "note": "caf\u00e9 \u2713"}

    @registry.tool(risk=Risk.READ, sensitive_fields=["token"])
    def lookup(ticket_id: str, token: str) -> dict[str, Any]:
        """Look a ticket up."""
        return {"ticket_id": ticket_id, "n": [1, 2.5, None, True]}

    @registry.tool(risk=Risk.READ, cost=1)
    def flaky(x: int) -> str:
        """Fail."""
        raise RuntimeError("down")

    @registry.tool(risk=Risk.READ, required_scope="billing:admin")
    def drop_all() -> str:
        """Never allowed."""
        return "gone"

    policy = Policy(version="policy-3", approvers=frozenset({"reviewer-5"}))
    gate = Gate(registry, policy, store, clock=lambda: next(clock))
    from tether.core.budget import Budget

    principal = Principal(
        subject="user-42", tenant="acme", scopes=frozenset({"ticket:write", "admin"})
    )
    run = gate.start_run(
        principal, run_id="run-pinned", budget=Budget(max_cost=100, max_bytes=100_000)
    )
    for i in range(3):
        call = ToolCall(call_id=f"c{i}", tool="close_ticket", arguments={"ticket_id": f"T-{i}"})
        with pytest.raises(ApprovalRequired) as asked:
            gate.call(run, call)
        gate.approve(asked.value.approval_id, "reviewer-5")
        gate.call(run, call)
        gate.call(run, call)  # replayed
    gate.call(
        run,
        ToolCall(
            call_id="r1", tool="lookup", arguments={"ticket_id": "T-9", "token": "s3cr3t-v4lue"}
        ),
    )
    with pytest.raises(ToolFailed):
        gate.call(run, ToolCall(call_id="f1", tool="flaky", arguments={"x": 1}))
    with pytest.raises(PolicyDenied):
        gate.call(run, ToolCall(call_id="d1", tool="drop_all", arguments={}))


def snapshot(store: Store) -> dict[str, Any]:
    return {
        "audit": [
            [e.seq, e.kind, e.run_id, e.prev_hash, e.hash, e.key_id, e.mac, e.body]
            for e in store.audit_entries()
        ],
        "state": dict(sorted(store.state_digests().items())),
        "runs": {r.run_id: [r.state_version, r.checkpoint_json] for r in store.list_runs()},
        "effects": [list(e.row()) for e in store.list_effects()],
        "approvals": [a.to_dict() for a in store.list_approvals()],
    }


def sqlite_snapshot(store: SQLiteStore) -> dict[str, Any]:
    """What a SQL store holds beyond the records: the approvals' stored text."""
    rows = store._query("SELECT approval_id, record_json FROM approvals ORDER BY approval_id")
    return {str(r[0]): str(r[1]) for r in rows}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_digests_macs_and_texts_are_as_pinned(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = json.loads(PINNED.read_text())
    store: Store = (
        MemoryStore(keys=KEYS)
        if kind == "memory"
        else SQLiteStore(f"sqlite:///{tmp_path}/p.db", keys=KEYS)
    )
    scenario(store, monkeypatch)
    got = snapshot(store)
    # The store's own setup entries carry its random id: only the gate's entries are pinned.
    got["audit"] = [e for e in got["audit"] if e[2] is not None]
    assert got == pinned["snapshot"]
    if isinstance(store, SQLiteStore):
        assert sqlite_snapshot(store) == pinned["approval_texts"]
    assert store.verify_audit().intact


def test_a_file_written_before_still_verifies_and_chains_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "pinned.db"
    shutil.copy(HERE / "pinned.db", db)
    keys = AuditKeys.from_json((HERE / "pinned.db.key").read_text(), source="fixture")
    store = SQLiteStore(f"sqlite:///{db}", keys=keys)
    pinned = json.loads(PINNED.read_text())
    before = snapshot(store)
    assert [e for e in before["audit"] if e[2] is not None] == pinned["snapshot"]["audit"]
    assert before["state"] == pinned["snapshot"]["state"]
    assert sqlite_snapshot(store) == pinned["approval_texts"]
    report = store.verify_audit()
    assert report.intact, report.summary()
    registry = Registry()

    @registry.tool(risk=Risk.READ)
    def ping() -> str:
        """Ping."""
        return "pong"

    gate = Gate(registry, Policy(version="policy-3"), store)
    gate.call("run-pinned", ToolCall(call_id="later", tool="ping"))
    assert store.verify_audit().intact
    store.close()


def write(tmp: Path) -> None:  # pragma: no cover - run by hand, on purpose only
    monkeypatch = pytest.MonkeyPatch()
    try:
        store = SQLiteStore(f"sqlite:///{tmp}/p.db", keys=KEYS)
        scenario(store, monkeypatch)
        snap = snapshot(store)
        snap["audit"] = [e for e in snap["audit"] if e[2] is not None]
        data = {"snapshot": snap, "approval_texts": sqlite_snapshot(store)}
        PINNED.write_text(json.dumps(data, indent=1, ensure_ascii=True) + "\n")
        store.close()
        shutil.copy(tmp / "p.db", HERE / "pinned.db")
        (HERE / "pinned.db.key").write_text(KEYS.to_json())
    finally:
        monkeypatch.undo()


if __name__ == "__main__" and "--write" in sys.argv:  # pragma: no cover
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write(Path(d))
