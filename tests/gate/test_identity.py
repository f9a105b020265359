"""Authenticated identities (invariant I9): credentials, and decisions made with them."""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend
from tether.core.approvals import (
    Approval,
    ApprovalStatus,
    CallBinding,
    check_decider,
    grant_payload,
    resource_of,
)
from tether.core.digest import canonical_json
from tether.core.principal import Identity
from tether.demo import TicketWorld, build
from tether.errors import (
    ApprovalStateError,
    ApproverNotAuthorized,
    CredentialMissing,
    CredentialRefused,
    IdentityError,
)
from tether.gate.desk import approval_audit, decide_approval, edit_approval
from tether.identity import (
    add_identity,
    authenticate,
    list_identities,
    read_token,
    require_token,
    revoke_identity,
)
from tether.runs.app import App
from tether.store.base import Store

NOW = 1_000.0


def approver(store: Store, name: str = "reviewer-5", **kw: Any) -> tuple[Identity, str]:
    kw.setdefault("tenants", ("acme",))
    return add_identity(store, name, "approver", now=NOW, **kw)


def audit_bodies(store: Store) -> list[dict[str, Any]]:
    return [json.loads(e.body) for e in store.audit_entries()]


# -- credentials ---------------------------------------------------------------------------------
def test_a_token_is_prefixed_names_its_credential_and_is_stored_only_as_a_hash(
    backend: Backend, tmp_path: Path
) -> None:
    identity, token = approver(backend.store)
    assert token.startswith(f"tth_{identity.credential_id}_")
    secret = token.removeprefix(f"tth_{identity.credential_id}_")
    assert len(secret) == 43  # 32 random bytes, URL-safe base64
    [record] = backend.store.list_credentials()
    assert record.token_hash == "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    assert token not in record.record_json
    if backend.kind == "sqlite":
        assert secret.encode() not in (tmp_path / "t.db").read_bytes()
    for body in audit_bodies(backend.store):
        text = json.dumps(body)
        assert secret not in text and record.token_hash not in text


def test_the_credential_proves_the_identity(backend: Backend) -> None:
    made, token = approver(backend.store, tenants=("acme", "globex"))
    other = backend.open()  # another process, the same store
    who = authenticate(other, token, "approver")
    assert who == made
    assert (who.name, who.via) == ("reviewer-5", "token")
    assert who.tenants == frozenset({"acme", "globex"})
    assert who.allows_tenant("acme") and not who.allows_tenant("initech")


def test_every_bad_credential_is_refused_with_the_same_words(backend: Backend) -> None:
    made, token = approver(backend.store)
    _, principal_token = add_identity(
        backend.store, "user-42", "principal", now=NOW, tenants=("acme",), scopes=("t:r",)
    )
    _, revoked_token = approver(backend.store, "former")
    revoke_identity(backend.store, "former", "approver", now=NOW)
    forged_secret = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    unknown_id = token.replace(str(made.credential_id), "cred-0123456789abcdef")
    messages = set()
    for bad in ("not-a-token", "", forged_secret, unknown_id, revoked_token, principal_token):
        with pytest.raises(CredentialRefused) as refused:
            authenticate(backend.store, bad, "approver")
        messages.add(str(refused.value))
    assert len(messages) == 1
    [message] = messages
    assert "reviewer-5" not in message and "former" not in message and "user-42" not in message


def test_registration_is_audited_and_revocation_works_by_name_or_id(backend: Backend) -> None:
    first, t1 = approver(backend.store)
    second, t2 = approver(backend.store)  # a second credential for the same name (rotation)
    revoke_identity(backend.store, str(first.credential_id), "approver", now=NOW + 1)
    with pytest.raises(CredentialRefused):
        authenticate(backend.store, t1, "approver")
    assert authenticate(backend.store, t2, "approver").credential_id == second.credential_id
    [gone] = revoke_identity(backend.store, "reviewer-5", "approver", now=NOW + 2)
    assert gone.credential_id == second.credential_id
    with pytest.raises(CredentialRefused):
        authenticate(backend.store, t2, "approver")
    assert all(r.revoked_at is not None for r in list_identities(backend.store, "approver"))
    with pytest.raises(IdentityError, match="no active approver"):
        revoke_identity(backend.store, "reviewer-5", "approver", now=NOW + 3)
    kinds = [b["kind"] for b in audit_bodies(backend.store)]
    assert kinds.count("credential_added") == 2 and kinds.count("credential_revoked") == 2
    assert backend.store.verify_audit().intact


@pytest.mark.parametrize(
    ("name", "kind", "options", "needle"),
    [
        ("reviewer-5", "approver", {}, "--tenant T"),
        ("reviewer-5", "approver", {"tenants": ("a",), "any_tenant": True}, "not both"),
        ("user-42", "principal", {"tenants": ("a", "b")}, "exactly one tenant"),
        ("user-42", "principal", {"any_tenant": True}, "exactly one tenant"),
        ("two words", "approver", {"tenants": ("a",)}, "cannot name"),
        ("cred-1234", "approver", {"tenants": ("a",)}, "cannot name"),
        ("reviewer-5", "approver", {"tenants": ("a",), "scopes": ("x",)}, "scopes"),
    ],
)
def test_an_ambiguous_registration_is_refused(
    name: str, kind: Any, options: dict[str, Any], needle: str
) -> None:
    from tether.store import MemoryStore

    store = MemoryStore()
    with pytest.raises(IdentityError, match=needle):
        add_identity(store, name, kind, now=NOW, **options)
    assert store.list_credentials() == []


def test_any_tenant_is_an_explicit_choice() -> None:
    from tether.store import MemoryStore

    store = MemoryStore()
    _, token = add_identity(store, "auditor", "approver", now=NOW, any_tenant=True)
    assert authenticate(store, token).allows_tenant("whatever")


# -- reading a token -----------------------------------------------------------------------------
def test_a_token_comes_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    env = {"TETHER_APPROVER_TOKEN": " tok-env \n", "TETHER_PRINCIPAL_TOKEN": "tok-p"}
    assert read_token("approver", None, env) == "tok-env"
    assert read_token("principal", None, env) == "tok-p"
    assert read_token("approver", None, {}) is None
    path = tmp_path / "token"
    path.write_text("tok-file\n")
    path.chmod(0o600)
    assert read_token("approver", str(path), env) == "tok-file"  # the explicit file wins
    path.chmod(0o644)
    with pytest.raises(IdentityError, match=f"chmod 600 {path}"):
        read_token("approver", str(path), env)
    path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    with pytest.raises(IdentityError, match="chmod 600"):
        read_token("approver", str(path), env)


def test_no_credential_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_APPROVER_TOKEN", raising=False)
    with pytest.raises(CredentialMissing) as missing:
        require_token("approver", None, "deciding an approval")
    message = str(missing.value)
    assert "tether approvers add NAME --tenant T" in message
    assert "TETHER_APPROVER_TOKEN" in message
    assert message.count(". ") == 0  # one sentence


# -- deciding with an identity -------------------------------------------------------------------
def waiting_run(
    backend: Backend, tmp_path: Path, message: str = "close ticket T-7"
) -> tuple[App, Approval]:
    app = build(TicketWorld(tmp_path / "world.db"))
    result = app.runner(backend.store).start(message, app.principal)
    [approval] = backend.store.list_approvals(ApprovalStatus.PENDING, run_id=result.run_id)
    return app, approval


def test_a_decision_records_the_credential_that_made_it(backend: Backend, tmp_path: Path) -> None:
    _, pending = waiting_run(backend, tmp_path)
    _, token = approver(backend.store)
    who = authenticate(backend.store, token, "approver")
    decided = decide_approval(backend.store, pending.approval_id, who, approve=True, now=NOW + 1)
    assert (decided.approver, decided.approver_credential) == ("reviewer-5", who.credential_id)
    with backend.store.read() as tx:
        assert tx.get_approval(pending.approval_id) == decided
    [granted] = [b for b in audit_bodies(backend.store) if b["kind"] == "approval_granted"]
    assert granted["actor"] == "reviewer-5"
    assert granted["data"]["approver_credential"] == who.credential_id
    assert granted["data"]["via"] == "token"
    assert token not in json.dumps(granted)


def test_a_name_from_code_is_recorded_as_such(backend: Backend, tmp_path: Path) -> None:
    _, pending = waiting_run(backend, tmp_path)
    decided = decide_approval(
        backend.store, pending.approval_id, "reviewer-5", approve=True, now=NOW + 1
    )
    assert (decided.approver, decided.approver_credential) == ("reviewer-5", None)
    [granted] = [b for b in audit_bodies(backend.store) if b["kind"] == "approval_granted"]
    assert granted["data"]["via"] == "code"


def test_the_requester_cannot_approve_with_its_own_approver_credential(
    backend: Backend, tmp_path: Path
) -> None:
    _, pending = waiting_run(backend, tmp_path)
    _, token = approver(backend.store, "user-42")  # the requester registers itself
    who = authenticate(backend.store, token, "approver")
    with pytest.raises(ApproverNotAuthorized, match="user-42 requested this call"):
        decide_approval(backend.store, pending.approval_id, who, approve=True, now=NOW + 1)
    with backend.store.read() as tx:
        assert tx.get_approval(pending.approval_id) == pending


def test_an_approver_of_another_tenant_cannot_decide(backend: Backend, tmp_path: Path) -> None:
    _, pending = waiting_run(backend, tmp_path)
    _, token = approver(backend.store, tenants=("globex",))
    who = authenticate(backend.store, token, "approver")
    with pytest.raises(ApproverNotAuthorized, match="not valid for tenant acme"):
        decide_approval(backend.store, pending.approval_id, who, approve=False, now=NOW + 1)


def test_a_principal_credential_cannot_decide(backend: Backend, tmp_path: Path) -> None:
    _, pending = waiting_run(backend, tmp_path)
    _, token = add_identity(
        backend.store, "reviewer-5", "principal", now=NOW, tenants=("acme",), scopes=()
    )
    who = authenticate(backend.store, token)
    with pytest.raises(CredentialRefused, match="approver credential"):
        decide_approval(backend.store, pending.approval_id, who, approve=True, now=NOW + 1)


def test_an_edit_records_the_credential_and_refuses_other_tenants(
    backend: Backend, tmp_path: Path
) -> None:
    app, pending = waiting_run(backend, tmp_path)
    _, foreign = approver(backend.store, tenants=("globex",))
    with pytest.raises(ApproverNotAuthorized, match="tenant"):
        edit_approval(
            backend.store,
            app.registry,
            app.policy,
            pending.approval_id,
            authenticate(backend.store, foreign, "approver"),
            {"ticket_id": "T-8"},
            now=NOW + 1,
        )
    _, token = approver(backend.store)
    who = authenticate(backend.store, token, "approver")
    edited = edit_approval(
        backend.store,
        app.registry,
        app.policy,
        pending.approval_id,
        who,
        {"ticket_id": "T-8"},
        now=NOW + 1,
    )
    assert (edited.approver, edited.approver_credential) == ("reviewer-5", who.credential_id)
    with backend.store.read() as tx:
        original = tx.get_approval(pending.approval_id)
    assert original is not None and original.approver_credential == who.credential_id


def test_a_refusal_does_not_list_the_approvers() -> None:
    pending = request()
    with pytest.raises(ApproverNotAuthorized) as refused:
        check_decider(
            pending, approver="mallory", authorized=frozenset({"reviewer-5", "boss"}), now=NOW
        )
    assert "mallory" in str(refused.value)
    assert "reviewer-5" not in str(refused.value) and "boss" not in str(refused.value)


def test_an_unknown_approval_is_one_sentence(backend: Backend) -> None:
    with pytest.raises(ApprovalStateError, match="no approval apr-nope"):
        decide_approval(backend.store, "apr-nope", "reviewer-5", approve=True, now=NOW)


# -- the grant seal ------------------------------------------------------------------------------
def test_a_grant_is_sealed_over_what_it_grants(backend: Backend, tmp_path: Path) -> None:
    _, pending = waiting_run(backend, tmp_path)
    keys = backend.store.keys
    decided = decide_approval(
        backend.store, pending.approval_id, "reviewer-5", approve=True, now=NOW + 1
    )
    assert decided.seal is not None
    assert keys.verify_seal("grant", grant_payload(decided), decided.seal)
    used = replace(decided, status=ApprovalStatus.USED, used_at=NOW + 2)
    assert keys.verify_seal("grant", grant_payload(used), decided.seal)  # use does not unseal
    for forged in (
        replace(decided, approver="mallory"),
        replace(decided, approver_credential="cred-0000000000000000"),
        replace(decided, argument_digest="sha256:00"),
        replace(decided, expires_at=decided.expires_at + 3600),
        replace(decided, policy_version="policy-4"),
    ):
        assert not keys.verify_seal("grant", grant_payload(forged), decided.seal)
    # A hand-written grant (status set with SQL, no key) carries no valid seal.
    assert not keys.verify_seal("grant", grant_payload(pending), pending.seal)


def test_a_denial_is_not_sealed_and_an_edit_is(backend: Backend, tmp_path: Path) -> None:
    app, pending = waiting_run(backend, tmp_path)
    keys = backend.store.keys
    edited = edit_approval(
        backend.store,
        app.registry,
        app.policy,
        pending.approval_id,
        "reviewer-5",
        {"ticket_id": "T-8"},
        now=NOW + 1,
    )
    assert keys.verify_seal("grant", grant_payload(edited), edited.seal)
    _, other = waiting_run(backend, tmp_path, "close ticket T-9")
    denied = decide_approval(
        backend.store, other.approval_id, "reviewer-5", approve=False, now=NOW + 1, reason="no"
    )
    assert denied.seal is None


# -- what an approval shows ----------------------------------------------------------------------
def request(arguments: dict[str, Any] | None = None, sensitive: tuple[str, ...] = ()) -> Approval:
    binding = CallBinding(
        run_id="run-1",
        call_id="call-1",
        tool="send",
        tool_version="1",
        tool_schema_digest="sha256:bb",
        arguments=arguments or {"ticket_id": "T-1"},
        tenant="acme",
        actor="user-42",
    )
    return Approval.request(
        "apr-1",
        binding,
        policy_version="policy-3",
        now=NOW,
        ttl_s=60,
        approvers=frozenset({"reviewer-5"}),
        sensitive_fields=sensitive,
    )


def test_shown_approvals_mask_secrets_but_the_record_keeps_the_exact_call() -> None:
    arguments = {
        "account_id": "A-1",
        "pin": "4242",
        "note": "use sk-abcdefghijklmnopqrstuvwx",
        "tth": "tth_cred-0123456789abcdef_" + "x" * 43,
    }
    approval = request(arguments, sensitive=("pin",))
    shown = approval.public_dict()
    assert shown["arguments"]["pin"] == "[REDACTED]"
    assert "sk-abcdefghijklmnopqrstuvwx" not in json.dumps(shown)
    assert "x" * 43 not in json.dumps(shown)
    assert shown["redacted"] == ["note", "pin", "tth"]
    assert shown["arguments"]["account_id"] == "A-1"
    assert approval.public_dict(reveal=True)["arguments"] == arguments
    record = approval.to_dict()
    assert record["arguments"] == arguments  # what an edit or a grant runs
    assert Approval.from_dict(json.loads(canonical_json(record))) == approval


def test_the_resource_label_never_uses_a_secret() -> None:
    assert resource_of("t", {"ticket_id": "T-1"}) == "ticket:T-1"
    assert resource_of("t", {"card_id": "4111"}, ("card_id",)) == "tool:t"
    assert resource_of("t", {"token_id": "abc"}) == "tool:t"
    assert resource_of("t", {"key_id": "AKIAABCDEFGHIJKLMNOP"}) == "tool:t"
    assert resource_of("t", {"a_id": "sk-abcdefghijklmnopqrstuv", "b_id": "B-2"}) == "b:B-2"
    assert request({"card_id": "4111"}, sensitive=("card_id",)).resource == "tool:send"


def test_a_secret_stays_out_of_the_audit_of_a_request() -> None:
    approval = request({"card_id": "4111-1111"}, sensitive=("card_id",))
    assert "4111-1111" not in json.dumps(approval_audit(approval))
