"""The inbox pages in process (real SQLite store, real gate): sessions, CSRF on sign-in, the
trusted-proxy header, revocation, the sign-in limiter, history and a run's trail; and the
rendering of provenance and of the schema-generated form, as units."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from tests.web.inbox_app import APP, LOCAL, approver, csrf, propose, registry, signed_in
from tether import SQLiteStore
from tether.identity import revoke_identity
from tether.web.app import WebConfig, create_app
from tether.web.auth import COOKIE, ProxyAuth, Session, Sessions
from tether.web.context import make_templates
from tether.web.forms import form_fields, read_form
from tether.web.pages import provenance_rows


def test_signing_in_needs_the_forms_csrf_token(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store))) as client:
        client.get("/")
        r = client.post("/signin", data={"token": token})
        assert r.status_code == 403
        assert "Waiting for you" not in client.get("/").text
        signed_in(client, token)


def test_a_revoked_credential_ends_its_session(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store))) as client:
        signed_in(client, token)
        revoke_identity(store, "alice", "approver", now=time.time())
        assert "Sign in to approve" in client.get("/").text


def test_signing_out_ends_the_session(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store))) as client:
        form = signed_in(client, token)
        old = client.cookies[COOKIE]
        client.post("/signout", data={"csrf": form})
        assert client.cookies.get(COOKIE) != old
        assert "Sign in to approve" in client.get("/", headers={"Cookie": f"{COOKIE}={old}"}).text


def test_failed_sign_ins_are_limited(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store, signin_limit=3))) as client:
        codes = []
        for _ in range(4):
            form = csrf(client.get("/").text)
            codes.append(client.post("/signin", data={"token": "nope", "csrf": form}).status_code)
        assert codes == [401, 401, 401, 429]
        form = csrf(client.get("/").text)
        # The right credential is not locked out by the failures of others at the address:
        # only refused credentials are slowed (a guess at 256 random bits is never right).
        r = client.post("/signin", data={"token": token, "csrf": form})
        assert r.status_code == 200 and "Waiting for you" in r.text


def test_sessions_rotate_and_expire() -> None:
    now = [1000.0]
    sessions = Sessions(ttl_s=100, idle_s=30, rotate_s=20, grace_s=5, clock=lambda: now[0])
    visitor = sessions.visitor(None)
    assert visitor.sid == "" and sessions.current(None) is None  # a visitor stores nothing
    assert sessions.visitor(visitor.nonce).csrf == visitor.csrf  # the nonce makes the token
    alice = sessions.sign_in("cred-1")
    assert alice.sid and alice.csrf != visitor.csrf
    now[0] += 10
    assert found(sessions, alice.sid).sid == alice.sid
    now[0] += 15  # past rotate_s: a new id, the same sign-in and CSRF token
    rotated = found(sessions, alice.sid)
    assert rotated.sid != alice.sid and rotated.credential_id == "cred-1"
    assert rotated.csrf == alice.csrf
    # Within the grace the old id still answers, as the new session (a request in flight).
    now[0] += 4
    assert found(sessions, alice.sid).sid == rotated.sid
    now[0] += 2
    assert sessions.current(alice.sid) is None  # past the grace, the old id is gone
    now[0] += 31  # idle too long
    assert sessions.current(rotated.sid) is None
    # Used all along, rotated again and again, it still ends ttl_s after it began.
    kept = sessions.sign_in("cred-2")
    for _ in range(9):
        now[0] += 11
        kept = found(sessions, kept.sid)
        assert kept.credential_id == "cred-2"
    now[0] += 11  # 110 s since it began
    assert sessions.current(kept.sid) is None


def test_an_open_live_page_keeps_its_session_up_to_its_ttl() -> None:
    now = [1000.0]
    sessions = Sessions(ttl_s=100, idle_s=30, rotate_s=1000, clock=lambda: now[0])
    alice = sessions.sign_in("cred-1")
    for _ in range(8):  # the stream's heartbeat, 80 s without any other request
        now[0] += 10
        assert sessions.touch(alice.sid) is not None
    assert sessions.ends_at(found(sessions, alice.sid)) == 1100.0
    now[0] += 25  # the heartbeat is bounded: past ttl_s the session ends, open or not
    assert sessions.touch(alice.sid) is None


def test_ten_thousand_cookieless_requests_evict_no_open_sign_in_form(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    app = create_app(WebConfig(store))
    with TestClient(app, base_url=LOCAL) as waiting, TestClient(app, base_url=LOCAL) as flood:
        form = csrf(waiting.get("/").text)  # a sign-in form left open
        for _ in range(10_000):
            flood.cookies.clear()
            assert flood.get("/signin").status_code == 200
        r = waiting.post("/signin", data={"token": token, "csrf": form})
        assert r.status_code == 200 and "Waiting for you" in r.text


def found(sessions: Sessions, sid: str) -> Session:
    session = sessions.current(sid)
    assert session is not None
    return session


def test_the_proxy_header_is_believed_only_from_the_proxy(store: SQLiteStore) -> None:
    approver(store, "bob", "acme")
    aid = propose(store)
    proxy = ProxyAuth.parse("X-Forwarded-User", ["10.0.0.0/24"])
    app = create_app(WebConfig(store, proxy=proxy))
    header = {"X-Forwarded-User": "bob"}
    with TestClient(base_url=LOCAL, app=app, client=("10.0.0.7", 5000)) as via_proxy:
        page = via_proxy.get("/", headers=header)
        assert aid in page.text and "(via proxy)" in page.text
        r = via_proxy.post(
            f"/approvals/{aid}/approve", headers=header, data={"csrf": csrf(page.text)}
        )
        assert r.status_code == 200
    granted = store.audit_tail(kind="approval_granted", limit=1)[0].record
    assert (granted["actor"], granted["data"]["via"]) == ("bob", "proxy")
    with TestClient(base_url=LOCAL, app=app, client=("192.168.1.9", 5000)) as elsewhere:
        assert "Sign in to approve" in elsewhere.get("/", headers=header).text
    with TestClient(base_url=LOCAL, app=app, client=("10.0.0.7", 5000)) as unknown:
        assert "Sign in" in unknown.get("/", headers={"X-Forwarded-User": "mallory"}).text
    with pytest.raises(Exception, match="trusted-proxy"):
        ProxyAuth.parse("X-Forwarded-User", [])


def test_history_and_a_runs_trail_show_the_audit_verdict(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store, app_ref=APP))) as client:
        form = signed_in(client, token)
        client.post(f"/approvals/{aid}/deny", data={"csrf": form, "reason": "no"})
        history = client.get("/history").text
        assert aid in history and "denied" in history
        assert "intact" in history and "NOT" not in history
        run_id = store.list_approvals()[0].run_id
        trail = client.get(f"/runs/{run_id}").text
        assert "approval_requested" in trail and "approval_denied" in trail
        other = propose(store, tenant="globex")
        other_run = next(a.run_id for a in store.list_approvals() if a.approval_id == other)
        assert client.get(f"/runs/{other_run}").status_code == 404


def test_a_deny_without_a_reason_is_refused_in_the_page(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store))) as client:
        form = signed_in(client, token)
        r = client.post(f"/approvals/{aid}/deny", data={"csrf": form, "reason": "  "})
        assert r.status_code == 422 and "Say why" in r.text
    assert store.list_approvals()[0].status.value == "pending"


def test_provenance_is_rendered_as_text_when_present() -> None:
    provenance = [
        {"argument": "order_id", "value": "O-1", "trusted": True, "source": "user"},
        {
            "argument": "amount",
            "value": "<b>400</b>",
            "trusted": False,
            "call_id": "c-3",
            "tool": "read_email",
        },
    ]
    rows = provenance_rows(provenance)
    assert rows[1] == {
        "argument": "amount",
        "value": "<b>400</b>",
        "part": None,
        "verdict": "untrusted: first seen in the output of read_email (call c-3)",
        "kind": "untrusted",
    }
    html = render_approval(rows)
    assert 'id="provenance"' in html
    assert "&lt;b&gt;400&lt;/b&gt;" in html and "<b>400" not in html
    assert 'class="untrusted"' in html
    assert 'id="provenance"' not in render_approval(provenance_rows(None))


def render_approval(provenance: list[dict[str, object]]) -> str:
    a = {
        "approval_id": "apr-1",
        "tool": "refund",
        "status": "pending",
        "expired": False,
        "risk": "write",
        "resource": "order:O-1",
        "actor": "agent-7",
        "tenant": "acme",
        "created_at": 0.0,
        "run_id": "run-1",
        "call_id": "c-1",
        "policy_version": "p-1",
        "approvers": ["alice"],
        "expires_at": 60.0,
        "argument_digest": "sha256:a",
        "call_digest": "sha256:b",
        "reasons": [],
        "decision": None,
        "replaced_by": None,
        "replaces": None,
        "redacted": [],
        "can_decide": False,
        "requester": "agent-7",
        "tool_info": None,
    }
    return (
        make_templates()
        .get_template("approval.html")
        .render(
            a=a,
            arguments_json="{}",
            provenance=provenance,
            steps=[],
            fields=[],
            edit_note="",
            edit_open=False,
            who=None,
            csrf="t",
            notice=None,
            error=None,
            session_ends=None,
            idle_s=1800,
            turns=[],
            confirm=False,
            previous=None,
            following=None,
        )
    )


def test_the_form_follows_the_schema_and_reads_back() -> None:
    schema = registry.get("refund").manifest.parameters
    original = {"order_id": "O-1", "amount": 5, "card_token": "secret-card"}
    fields = {f.name: f for f in form_fields(schema, original, frozenset({"card_token"}))}
    assert fields["amount"].kind == "integer" and fields["amount"].attrs["max"] == "500"
    assert fields["order_id"].required and not fields["note"].required
    assert fields["card_token"].value == "" and fields["card_token"].masked
    assert fields["notify_customer"].kind == "checkbox"
    assert [v for v, _ in fields["currency"].options] == ['"EUR"', '"USD"']
    form = {
        "arg.order_id": "O-9",
        "arg.amount": "12",
        "arg.currency": '"USD"',
        "arg.card_token": "",
        "arg.notify_customer": "on",
    }
    arguments, problems = read_form(list(fields.values()), form, original)
    assert problems == []
    assert arguments == {
        "order_id": "O-9",
        "amount": 12,
        "currency": "USD",
        "card_token": "secret-card",
        "notify_customer": True,
    }
    _, problems = read_form(list(fields.values()), {"arg.amount": "twelve"}, original)
    assert problems == ["'order_id' is required", "'amount' must be a whole number"]


def test_live_updates_need_a_signed_in_approver(store: SQLiteStore) -> None:
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store))) as client:
        r = client.get("/events")
        assert r.status_code == 401
        assert client.get("/fragments/inbox").text.count("Sign in to approve") == 1


def test_a_live_stream_ends_when_its_credential_is_revoked(store: SQLiteStore) -> None:
    import threading

    token = approver(store, "alice", "acme")
    with TestClient(base_url=LOCAL, app=create_app(WebConfig(store, live_poll_s=0.05))) as client:
        signed_in(client, token)
        revoke = threading.Timer(
            0.5, lambda: revoke_identity(store, "alice", "approver", now=time.time())
        )
        revoke.start()
        try:
            with client.stream("GET", "/events") as r:
                assert r.status_code == 200
                body = "".join(r.iter_text())
        finally:
            revoke.join()
    assert body.startswith("retry: 2000") and "event: inbox" in body
    assert body.rstrip().endswith("event: signed-out\ndata: 0")
