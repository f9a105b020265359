"""Records are declared once (``tether.core.records``): what is derived from the declaration must
be what the schema, the stored JSON and the evidence digests have always been."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.store.store_contract import approval, effect, run_record
from tether.core.approvals import Approval, ApprovalStatus
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import Effect, EffectStatus
from tether.evidence.crosscheck import (
    APPROVAL_COLUMNS,
    EFFECT_COLUMNS,
    approval_digest,
    effect_digest,
)
from tether.store import sql
from tether.store.rows import CredentialRecord, RunRecord, StepRecord


def full_effect() -> Effect:
    # Integer timestamps on purpose: the digest must be of the floats the row reads back.
    return replace(
        effect(),
        schema_digest="sha256:dd",
        result_digest="sha256:ee",
        external_reference="ref-1",
        result_json='{"ok":true}',
        created_at=2,
        updated_at=5,
    )


def full_approval() -> Approval:
    return replace(
        approval(),
        approvers=("rev-1", "rev-2"),
        sensitive_fields=("note",),
        approver="rev-1",
        decided_at=4,
    )


# Computed by the code before records were declared once; a change here breaks every
# existing store's verification.
def test_evidence_digests_are_unchanged() -> None:
    assert effect_digest(full_effect()) == (
        "f139576877a66be1dcb7488e136614571600e5036d2149d5e1fa5546106d58c5"
    )
    assert effect_digest(effect()) == (
        "1b28c6f3a9d07a9ab1ec035d0a9f7d937c8a20d5465d6436c07a0a0213b8a047"
    )
    assert approval_digest(full_approval()) == (
        "08d91645895d493854f5eb5e43de195034bd5eaca8db497c863b62ad6edddb12"
    )
    assert approval_digest(approval()) == (
        "42757cba742dc99cd1c5c0fb86fffbf140c034f2694f620ff8d41316c92d028c"
    )
    run = replace(run_record(), lease_owner="w", lease_expires_at=3.5)
    assert sha256_hex(canonical_json(run.to_dict())) == (
        "4cbde6ed3fed8490adf57794d5a4f4c07f547b55e7660032d44adee2aa83409e"
    )


def test_column_lists_are_the_schemas() -> None:
    assert EFFECT_COLUMNS == (
        "operation_key, run_id, call_id, tool_name, tool_version, argument_digest, status, "
        "result_digest, external_reference, result_json, error, attempts, created_at, "
        "updated_at, schema_digest"
    )
    assert APPROVAL_COLUMNS == (
        "approval_id, run_id, call_id, status, created_at, expires_at, record_json"
    )
    assert sql.RUN_COLUMNS == (
        "run_id, state_version, status, principal_id, tenant_id, policy_version, "
        "checkpoint_json, created_at, updated_at, lease_owner, lease_expires_at"
    )
    assert sql.CREDENTIAL_COLUMNS == (
        "credential_id, name, kind, token_hash, record_json, created_at, revoked_at, seal"
    )
    assert sql.STEP_COLUMNS == "seq, turn, kind, detail, at"


def test_updates_write_only_what_changes() -> None:
    assert RunRecord.changing_columns() == (
        "state_version",
        "status",
        "policy_version",
        "checkpoint_json",
        "updated_at",
        "lease_owner",
        "lease_expires_at",
    )
    assert Effect.changing_columns() == (
        "status",
        "result_digest",
        "external_reference",
        "result_json",
        "error",
        "attempts",
        "updated_at",
    )
    assert CredentialRecord.changing_columns() == ("record_json", "revoked_at", "seal")


def test_an_effect_is_its_row_and_its_dict() -> None:
    e = full_effect()
    row = e.row()
    assert row[6] == "dispatched" and type(row[6]) is str
    assert (row[12], row[13]) == (2.0, 5.0) and isinstance(row[12], float)
    back = Effect.from_row(row)
    assert back.status is EffectStatus.DISPATCHED and back == replace(e, created_at=2.0)
    data = e.to_dict()
    assert data["status"] == "dispatched" and type(data["status"]) is str
    assert data["created_at"] == 2 and type(data["created_at"]) is int  # as given
    assert set(data) == set(EFFECT_COLUMNS.split(", "))
    assert Effect.from_dict(json.loads(json.dumps(data))) == e


def test_an_approval_dict_keeps_its_shape_and_order() -> None:
    a = full_approval()
    data = a.to_dict()
    # The order `tether approvals list --json` has always printed.
    assert list(data) == [
        "approval_id",
        "run_id",
        "call_id",
        "actor",
        "tenant",
        "tool",
        "tool_version",
        "resource",
        "tool_schema_digest",
        "argument_digest",
        "call_digest",
        "arguments",
        "policy_version",
        "status",
        "approver",
        "decision",
        "reason",
        "created_at",
        "expires_at",
        "decided_at",
        "used_at",
        "approvers",
        "replaced_by",
        "replaces",
        "approver_credential",
        "sensitive_fields",
        "seal",
    ]
    assert data["approvers"] == ["rev-1", "rev-2"] and data["status"] == "pending"
    back = Approval.from_dict(json.loads(canonical_json(data)))
    assert back == a and back.approvers == ("rev-1", "rev-2")
    assert back.status is ApprovalStatus.PENDING
    # A record stored before a field existed reads with that field's default.
    old = {k: v for k, v in data.items() if k not in ("sensitive_fields", "seal", "approvers")}
    assert Approval.from_dict(old) == replace(a, sensitive_fields=(), seal=None, approvers=())


def test_steps_and_credentials_round_trip_through_rows() -> None:
    step = StepRecord(seq=1, turn=0, kind="tool_call", detail="x", at=1)
    assert step.row() == (1, 0, "tool_call", "x", 1.0)
    assert StepRecord.from_row(step.row()) == step
    cred = CredentialRecord("c-1", "alice", "approver", "h", "{}", 1.0)
    assert CredentialRecord.from_row(cred.row()) == cred


def test_a_record_missing_a_required_field_is_refused() -> None:
    data = effect().to_dict()
    del data["run_id"], data["status"]
    with pytest.raises(TypeError, match="Effect needs run_id, status"):
        Effect.from_dict(data)
