"""The store conformance suite. Every backend runs it by subclassing ``StoreContract`` and
providing a ``store`` fixture (see test_store_memory.py and test_store_sqlite.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tether.core.approvals import Approval, ApprovalStatus, CallBinding
from tether.core.budget import Budget
from tether.core.ledger import Effect, EffectStatus, operation_key
from tether.core.principal import Principal
from tether.core.runseal import PRINCIPAL_SEAL, sealed_identity
from tether.errors import (
    AlreadyExists,
    InvalidTransition,
    OperationConflict,
    StaleState,
    StoreError,
)
from tether.evidence.audit import CHAINS
from tether.evidence.keys import AuditKeys
from tether.gate.state import RunState, sealed
from tether.store.base import Store, Tx
from tether.store.rows import CallView, RunRecord


def run_record(
    run_id: str = "run-1", version: int = 1, *, keys: AuditKeys | None = None, effects: int = 0
) -> RunRecord:
    """A run row; with ``keys``, one whose checkpoint is sealed as the gate seals it (so the
    audit verifies), recording ``effects`` effects."""
    checkpoint = '{"n":0}'
    if keys is not None:
        principal = Principal(subject="user-42", tenant="acme", scopes=frozenset())
        budget = Budget()
        identity = keys.seal(PRINCIPAL_SEAL, sealed_identity(run_id, principal, budget))
        state = RunState(
            principal=principal, budget=budget, effects=effects, principal_seal=identity
        )
        checkpoint = sealed(state, run_id, keys).dump()
    return RunRecord(
        run_id=run_id,
        state_version=version,
        status="running",
        principal_id="user-42",
        tenant_id="acme",
        policy_version="policy-3",
        checkpoint_json=checkpoint,
        created_at=1.0,
        updated_at=1.0,
    )


def as_requested(stored: Approval | None) -> Approval | None:
    """``stored`` without the request seal the store adds (``approval()`` has none)."""
    assert stored is None or stored.request_seal is not None
    return None if stored is None else replace(stored, request_seal=None)


def effect(key_suffix: str = "call-1", status: EffectStatus = EffectStatus.DISPATCHED) -> Effect:
    return Effect(
        operation_key=operation_key("run-1", key_suffix, "close_ticket", "2"),
        run_id="run-1",
        call_id=key_suffix,
        tool_name="close_ticket",
        tool_version="2",
        argument_digest="sha256:aa",
        status=status,
        attempts=1,
        created_at=2.0,
        updated_at=2.0,
    )


def approval(approval_id: str = "apr-1", call_id: str = "call-1", at: float = 3.0) -> Approval:
    binding = CallBinding(
        run_id="run-1",
        call_id=call_id,
        tool="close_ticket",
        tool_version="2",
        tool_schema_digest="sha256:bb",
        arguments={"ticket_id": "T-100"},
        tenant="acme",
        actor="user-42",
    )
    return Approval.request(approval_id, binding, policy_version="policy-3", now=at, ttl_s=60)


class StoreContract:
    # -- runs ----------------------------------------------------------------------------------
    def test_run_round_trip(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
        with store.read() as tx:
            assert tx.get_run("run-1") == run_record()
        assert [r.run_id for r in store.list_runs()] == ["run-1"]
        assert store.list_runs(status="completed") == []

    def test_duplicate_run_refused(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
        with pytest.raises(AlreadyExists, match="already exists"), store.transaction() as tx:
            tx.insert_run(run_record())

    def test_update_run_is_compare_and_swap(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
        with store.transaction() as tx:
            new = tx.update_run(run_record())
        assert new.state_version == 2
        stale = run_record()  # still says version 1
        with (
            pytest.raises(StaleState, match="expected version 1, found 2"),
            store.transaction() as tx,
        ):
            tx.update_run(stale)
        with store.read() as tx:
            current = tx.get_run("run-1")
        assert current is not None and current.state_version == 2

    def test_write_checkpoint_is_compare_and_swap_of_checkpoint_and_time(
        self, store: Store
    ) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
        with store.transaction() as tx:
            read = tx.get_run("run-1")
            assert read is not None
            new = tx.write_checkpoint(read, '{"n":2}', 99.5)
        assert (new.state_version, new.checkpoint_json, new.updated_at) == (2, '{"n":2}', 99.5)
        with store.read() as tx:
            assert tx.get_run("run-1") == new
        with (
            pytest.raises(StaleState, match="expected version 1, found 2"),
            store.transaction() as tx,
        ):
            tx.write_checkpoint(run_record(), "{}", 100.0)
        with store.read() as tx:
            assert tx.get_run("run-1") == new

    # -- effects -------------------------------------------------------------------------------
    def test_effect_insert_and_get(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_effect(effect())
        with store.read() as tx:
            assert tx.get_effect(effect().operation_key) == effect()
            assert tx.get_effect("nope") is None
        assert store.list_effects("run-1") == [effect()]
        assert store.list_effects("other") == []

    def test_effect_key_is_unique(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_effect(effect())
        with pytest.raises(OperationConflict), store.transaction() as tx:
            tx.insert_effect(effect())

    def test_effect_update_checks_expected_status(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_effect(effect())
        done = effect().advance(EffectStatus.COMMITTED, 5.0, result_digest="sha256:cc")
        with store.transaction() as tx:
            tx.update_effect(done, EffectStatus.DISPATCHED)
        with pytest.raises(InvalidTransition), store.transaction() as tx:
            tx.update_effect(done, EffectStatus.DISPATCHED)
        [stored] = store.list_effects()
        assert stored.status is EffectStatus.COMMITTED and stored.result_digest == "sha256:cc"

    # -- the gate's one read per call ------------------------------------------------------------
    def test_call_view_without_a_run(self, store: Store) -> None:
        with store.read() as tx:
            view = tx.call_view("run-1", "call-1")
            assert view == CallView(run=None, effect=None, approval=None, effect_count=0)
            assert view == Tx.call_view(tx, "run-1", "call-1")  # the four separate reads

    def test_call_view_of_a_run_with_nothing_for_the_call(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
            tx.insert_effect(effect("call-2"))
            tx.insert_approval(approval("apr-2", call_id="call-2"))
        with store.read() as tx:
            view = tx.call_view("run-1", "call-1")
            assert view == CallView(run=run_record(), effect=None, approval=None, effect_count=1)
            assert view == Tx.call_view(tx, "run-1", "call-1")

    def test_call_view_finds_the_latest_approval(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
            tx.insert_approval(approval("apr-1", at=3.0))
            tx.insert_approval(approval("apr-3", at=5.0))
            tx.insert_approval(approval("apr-2", at=4.0))  # made later, but dated earlier
            tx.insert_approval(approval("apr-4", call_id="call-2", at=9.0))  # another call
        with store.read() as tx:
            found = tx.call_view("run-1", "call-1").approval
            assert as_requested(found) == approval("apr-3", at=5.0)
        with store.transaction() as tx:
            tx.insert_approval(approval("apr-5", at=5.0))  # a tie: the one made last wins
        with store.read() as tx:
            view = tx.call_view("run-1", "call-1")
            assert view.approval is not None and view.approval.approval_id == "apr-5"
            assert view == Tx.call_view(tx, "run-1", "call-1")

    def test_call_view_counts_the_runs_effects(self, store: Store) -> None:
        from dataclasses import replace

        done = effect("call-1").advance(EffectStatus.COMMITTED, 5.0, result_json='{"ok":1}')
        with store.transaction() as tx:
            tx.insert_run(run_record())
            tx.insert_effect(effect("call-1"))
            tx.update_effect(done, EffectStatus.DISPATCHED)
            tx.insert_effect(effect("call-2"))
            other = effect("call-3")
            tx.insert_effect(replace(other, run_id="run-2", operation_key="k-run-2"))
        with store.read() as tx:
            view = tx.call_view("run-1", "call-1")
            assert (view.effect, view.effect_count) == (done, 2)
            assert view.run == run_record()
            assert view == Tx.call_view(tx, "run-1", "call-1")
            assert tx.call_view("run-2", "call-3").effect_count == 1
            assert tx.call_view("run-9", "call-1").effect_count == 0

    # -- approvals -----------------------------------------------------------------------------
    def test_approval_round_trip_and_find_latest(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_approval(approval("apr-1", at=3.0))
            tx.insert_approval(approval("apr-2", at=4.0))
        with store.read() as tx:
            assert as_requested(tx.get_approval("apr-1")) == approval("apr-1", at=3.0)
            found = tx.find_approval("run-1", "call-1")
            assert found is not None and found.approval_id == "apr-2"
            assert tx.find_approval("run-1", "call-9") is None
        assert [a.approval_id for a in store.list_approvals(ApprovalStatus.PENDING)] == [
            "apr-1",
            "apr-2",
        ]

    def test_approval_update_checks_expected_status(self, store: Store) -> None:
        from dataclasses import replace

        with store.transaction() as tx:
            tx.insert_approval(approval())
        granted = replace(approval(), status=ApprovalStatus.APPROVED, approver="reviewer-5")
        with store.transaction() as tx:
            tx.update_approval(granted, ApprovalStatus.PENDING)
        with pytest.raises(StoreError), store.transaction() as tx:
            tx.update_approval(granted, ApprovalStatus.PENDING)
        assert store.list_approvals(ApprovalStatus.APPROVED) == [granted]
        assert store.list_approvals(run_id="other") == []

    # -- transactions and audit ----------------------------------------------------------------
    def test_rollback_discards_everything(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.append_audit("first", at=1.0)
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.insert_run(run_record())
            tx.insert_effect(effect())
            tx.insert_approval(approval())
            tx.append_audit("lost", at=2.0)
            raise RuntimeError("boom")
        assert store.list_runs() == []
        assert store.list_effects() == []
        assert store.list_approvals() == []
        assert [e.kind for e in store.audit_entries() if e.chain != CHAINS] == ["first"]
        assert store.verify_audit().intact

    def test_audit_chain_and_head(self, store: Store) -> None:
        assert store.audit_heads() == {}
        assert store.verify_audit().intact
        with store.transaction() as tx:
            a = tx.append_audit("one", at=1.0, run_id="run-1", actor="user-42", data={"x": 1})
            b = tx.append_audit("two", at=2.0, run_id="run-1")
        entries = [e for e in store.audit_entries() if e.chain == a.chain]
        assert [e.seq for e in entries] == [1, 2]
        assert entries[1].prev_hash == a.hash
        head = store.audit_head(a.chain)
        assert head is not None and (head.seq, head.hash) == (2, b.hash)
        assert entries[0].record["data"] == {"x": 1}
        report = store.verify_audit()
        assert report.intact and report.entries >= 2

    def test_audit_appends_to_several_runs_all_verify(self, store: Store) -> None:
        with store.transaction() as tx:
            for i in range(3):
                tx.append_audit("step", at=float(i), run_id=f"run-{i % 2}")
            tx.append_audit("about no run", at=9.0)
        report = store.verify_audit()
        assert report.intact
        assert report.entries == len(list(store.audit_entries()))

    # -- messages and steps --------------------------------------------------------------------
    def test_messages_and_steps_append_in_order(self, store: Store) -> None:
        from tether.store.rows import StepRecord

        with store.transaction() as tx:
            tx.append_message("run-1", 2, '{"b":2}')
            tx.append_message("run-1", 1, '{"a":1}')
            tx.append_message("run-2", 1, '{"c":3}')
            tx.append_step("run-1", StepRecord(seq=1, turn=0, kind="tool_call", detail="x", at=1.0))
        with store.read() as tx:
            assert tx.messages("run-1") == ['{"a":1}', '{"b":2}']
            assert tx.messages("run-9") == []
            assert [s.kind for s in tx.steps("run-1")] == ["tool_call"]
        with pytest.raises(AlreadyExists, match="already has message 1"), store.transaction() as tx:
            tx.append_message("run-1", 1, "{}")
        with pytest.raises(AlreadyExists, match="already has step 1"), store.transaction() as tx:
            tx.append_step("run-1", StepRecord(seq=1, turn=0, kind="final", detail="", at=2.0))

    def test_lease_fields_round_trip(self, store: Store) -> None:
        from dataclasses import replace

        with store.transaction() as tx:
            tx.insert_run(replace(run_record(), lease_owner="w1", lease_expires_at=9.5))
        with store.transaction() as tx:
            current = tx.get_run("run-1")
            assert current is not None
            assert (current.lease_owner, current.lease_expires_at) == ("w1", 9.5)
            tx.update_run(replace(current, lease_owner=None, lease_expires_at=None))
        with store.read() as tx:
            released = tx.get_run("run-1")
        assert released is not None and released.lease_owner is None

    def test_claimable_leaves_runs_without_a_conversation_alone(self, store: Store) -> None:
        from dataclasses import replace

        with store.transaction() as tx:
            tx.insert_run(replace(run_record("driven"), updated_at=1.0))
            tx.append_message("driven", 1, '{"role":"user","content":"hi"}')
            # A framework's run: running, no lease, but no conversation to drive here.
            tx.insert_run(replace(run_record("framework"), updated_at=0.5))
            tx.insert_run(replace(run_record("queued-bare"), status="queued", updated_at=0.1))
            tx.insert_run(replace(run_record("queued"), status="queued", updated_at=2.0))
            tx.append_message("queued", 1, '{"role":"user","content":"hi"}')
            tx.insert_run(
                replace(
                    run_record("leased"), lease_owner="w1", lease_expires_at=50.0, updated_at=1.5
                )
            )
            tx.append_message("leased", 1, '{"role":"user","content":"hi"}')
        with store.transaction() as tx:
            assert [r.run_id for r in tx.claimable(10.0, 10)] == ["driven", "queued"]
            assert [r.run_id for r in tx.claimable(10.0, 1)] == ["driven"]
        with store.transaction() as tx:  # the lease expired: claimable again
            assert [r.run_id for r in tx.claimable(60.0, 10)] == ["driven", "leased", "queued"]

    def test_a_run_waiting_for_its_model_is_claimable_a_minute_later(self, store: Store) -> None:
        from dataclasses import replace

        from tether.core.lifecycle import MODEL_RETRY_AFTER_S

        with store.transaction() as tx:
            tx.insert_run(replace(run_record("waits"), status="awaiting_model", updated_at=100.0))
            tx.append_message("waits", 1, '{"role":"user","content":"hi"}')
        with store.transaction() as tx:
            assert tx.claimable(100.0 + MODEL_RETRY_AFTER_S / 2, 10) == []  # not yet
            later = [r.run_id for r in tx.claimable(101.0 + MODEL_RETRY_AFTER_S, 10)]
            assert later == ["waits"]

    # -- evidence: MACs and row digests (I10) ----------------------------------------------------
    def test_the_store_records_its_id_and_key(self, store: Store) -> None:
        from tether.store.keying import AUDIT_KEY_ID, STORE_ID

        with store.read() as tx:
            assert tx.get_meta(AUDIT_KEY_ID) == store.keys.key_id
            assert tx.get_meta(STORE_ID) == store.store_id is not None

    def test_every_entry_is_authenticated(self, store: Store) -> None:
        with store.transaction() as tx:
            entry = tx.append_audit("one", at=1.0, run_id="run-1")
        (stored,) = [e for e in store.audit_entries() if e.chain == entry.chain]
        assert (stored.key_id, stored.mac) == (store.keys.key_id, entry.mac)
        assert store.keys.check(stored.key_id or "", stored.hash, stored.mac or "")

    def test_rows_written_are_recorded_by_the_next_entry(self, store: Store) -> None:
        from tether.evidence.crosscheck import effect_digest

        with store.transaction() as tx:
            tx.insert_run(run_record(keys=store.keys, effects=1))
            tx.insert_effect(effect())
            tx.insert_approval(approval())
            first = tx.append_audit("written", at=1.0, run_id="run-1")
            second = tx.append_audit("nothing written since", at=2.0, run_id="run-1")
        rows = first.record["rows"]
        assert set(rows) == {"run:run-1", f"effect:{effect().operation_key}", "approval:apr-1"}
        assert rows[f"effect:{effect().operation_key}"] == effect_digest(effect())
        assert "rows" not in second.record
        report = store.verify_audit()
        assert report.intact and report.rows == 3, report.summary()

    def test_a_write_no_entry_records_fails_verification(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.insert_run(run_record())
            tx.append_audit("run_started", at=1.0, run_id="run-1")
        with store.transaction() as tx:
            tx.insert_effect(effect())  # and no audit entry in its transaction
        report = store.verify_audit()
        assert not report.intact
        assert "no audit entry records it" in (report.problem or "")

    # -- the notification outbox ---------------------------------------------------------------
    def test_notification_outbox_due_and_claimed_once(self, store: Store) -> None:
        from dataclasses import replace

        from tether.gate.notify import notification_for

        first, second = (notification_for(approval(f"apr-{n}", at=n), now=n) for n in (1, 2))
        with store.transaction() as tx:
            tx.enqueue_notification(second)
            tx.enqueue_notification(first)
        with pytest.raises(AlreadyExists, match="already exists"), store.transaction() as tx:
            tx.enqueue_notification(first)
        with store.read() as tx:
            assert tx.due_notifications(now=0.5, limit=10) == []
            assert tx.due_notifications(now=5.0, limit=10) == [first, second]  # oldest first
            assert tx.due_notifications(now=5.0, limit=1) == [first]
        claimed = replace(first, attempts=1, next_attempt_at=60.0)
        with store.transaction() as tx:
            assert tx.update_notification(claimed, expected_attempts=0)
            assert not tx.update_notification(claimed, expected_attempts=0)  # already claimed
        delivered = replace(claimed, delivered_at=7.0, record_json='{"x":1}')
        with store.transaction() as tx:
            assert tx.update_notification(delivered, expected_attempts=1)
            assert tx.get_notification(first.notification_id) == delivered
            assert tx.get_notification("ntf-none") is None
            assert tx.due_notifications(now=100.0, limit=10) == [second]
        assert store.list_notifications() == [delivered, second]

    def test_a_rolled_back_request_leaves_no_notification(self, store: Store) -> None:
        from tether.gate.notify import notification_for

        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.insert_approval(approval())
            tx.enqueue_notification(notification_for(approval(), now=1.0))
            raise RuntimeError("boom")
        assert store.list_notifications() == []
