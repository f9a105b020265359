"""The JSON API in process, on a real SQLite store with approvals requested through the real
gate: the same rules as the command line, stable error codes, and a fuzzed OpenAPI contract."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.web.inbox_app import LOCAL, approver, propose
from tether import SQLiteStore
from tether.web.app import WebConfig, create_app
from tether.web.context import CSP


@pytest.fixture
def client(store: SQLiteStore) -> Iterator[TestClient]:
    with TestClient(
        base_url=LOCAL, app=create_app(WebConfig(store, app_ref="tests.web.inbox_app:app"))
    ) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_credential_is_401_with_a_stable_code(client: TestClient) -> None:
    r = client.get("/api/approvals?status=pending")
    assert r.status_code == 401
    assert r.json()["code"] == "credential_missing"
    assert r.headers["www-authenticate"] == "Bearer"
    r = client.get("/api/approvals", headers=bearer("tth_cred-0000000000000000_" + "x" * 43))
    assert (r.status_code, r.json()["code"]) == (401, "credential_refused")


def test_list_show_and_approve(client: TestClient, store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store, card_token="tok_live_secret_value")
    r = client.get("/api/approvals?status=pending", headers=bearer(token))
    assert r.status_code == 200
    rows = r.json()["approvals"]
    assert [a["approval_id"] for a in rows] == [aid]
    shown = client.get(f"/api/approvals/{aid}", headers=bearer(token)).json()
    assert shown["can_decide"] is True
    assert shown["risk"] == "write"
    assert shown["arguments"]["card_token"] != "tok_live_secret_value"  # masked
    assert "card_token" in shown["redacted"]
    r = client.post(f"/api/approvals/{aid}/approve", headers=bearer(token), json={})
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["approver"]) == ("approved", "alice")
    granted = [e for e in store.audit_entries() if e.kind == "approval_granted"]
    assert granted[-1].record["actor"] == "alice"
    again = client.post(f"/api/approvals/{aid}/approve", headers=bearer(token))
    assert (again.status_code, again.json()["code"]) == (409, "not_pending")


def test_deny_needs_a_reason_and_records_it(client: TestClient, store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    r = client.post(f"/api/approvals/{aid}/deny", headers=bearer(token), json={})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_request")
    r = client.post(
        f"/api/approvals/{aid}/deny", headers=bearer(token), json={"reason": "wrong order"}
    )
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["reason"]) == ("denied", "wrong order")


def test_the_decision_rules_are_the_command_lines(client: TestClient, store: SQLiteStore) -> None:
    aid = propose(store)
    # The requester itself, registered as an approver (the policy names neither it nor
    # carol, an approver of the tenant): to them the approval does not exist, as another
    # tenant's does not.
    for name in ("agent-7", "carol"):
        token = approver(store, name, "acme")
        r = client.post(f"/api/approvals/{aid}/approve", headers=bearer(token))
        assert (r.status_code, r.json()["code"]) == (404, "not_found")
        assert client.get("/api/approvals", headers=bearer(token)).json()["approvals"] == []
    assert store.list_approvals()[0].status.value == "pending"


def test_another_tenants_approval_is_not_found(client: TestClient, store: SQLiteStore) -> None:
    alice = approver(store, "alice", "acme")
    theirs = propose(store, tenant="globex")
    listed = client.get("/api/approvals", headers=bearer(alice)).json()["approvals"]
    assert theirs not in [a["approval_id"] for a in listed]
    for r in (
        client.get(f"/api/approvals/{theirs}", headers=bearer(alice)),
        client.post(f"/api/approvals/{theirs}/approve", headers=bearer(alice)),
    ):
        assert (r.status_code, r.json()["code"]) == (404, "not_found")
    assert store.list_approvals()[0].status.value == "pending"


def test_edit_is_judged_again(client: TestClient, store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    url = f"/api/approvals/{aid}/edit"
    bad = client.post(url, headers=bearer(token), json={"arguments": {"order_id": "O-1"}})
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_arguments")
    over = {"arguments": {"order_id": "O-1", "amount": 501}}
    assert client.post(url, headers=bearer(token), json=over).status_code == 422
    good = {"arguments": {"order_id": "O-1", "amount": 20}, "reason": "partial"}
    r = client.post(url, headers=bearer(token), json=good)
    assert r.status_code == 200, r.text
    new = r.json()
    assert (new["status"], new["replaces"], new["arguments"]["amount"]) == ("approved", aid, 20)
    assert client.get(f"/api/approvals/{aid}", headers=bearer(token)).json()["status"] == "edited"


def test_an_expired_approval_cannot_be_approved(client: TestClient, store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store, ttl_s=0.2)
    time.sleep(0.3)
    assert client.get(f"/api/approvals/{aid}", headers=bearer(token)).json()["expired"] is True
    r = client.post(f"/api/approvals/{aid}/approve", headers=bearer(token))
    assert (r.status_code, r.json()["code"]) == (409, "expired")
    assert store.list_approvals()[0].status.value == "expired"


def test_refused_credentials_are_rate_limited(client: TestClient) -> None:
    wrong = bearer("tth_cred-0000000000000000_" + "y" * 43)
    codes = [client.get("/api/approvals", headers=wrong).status_code for _ in range(7)]
    assert codes[:5] == [401] * 5
    assert codes[5:] == [429, 429]


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/", "/api/approvals", "/static/inbox.js", "/nowhere"):
        headers = client.get(path).headers
        assert headers["content-security-policy"] == CSP, path
        assert headers["x-frame-options"] == "DENY"
    assert "'unsafe-inline'" not in CSP
    assert client.get("/nowhere").status_code == 404
    assert client.get("/api/nowhere").json()["code"] == "not_found"


def test_the_openapi_document_names_every_operation(client: TestClient) -> None:
    doc = client.get("/api/openapi.json").json()
    assert set(doc["paths"]) == {
        "/api/approvals",
        "/api/approvals/{approval_id}",
        "/api/approvals/{approval_id}/approve",
        "/api/approvals/{approval_id}/deny",
        "/api/approvals/{approval_id}/edit",
    }
    assert "HTTPBearer" in doc["components"]["securitySchemes"]
