"""The inbox under attack, in process (real SQLite store, real gate): DNS rebinding (the Host
allow-list), cross-origin form posts, cookie flags and session fixation, CSRF on sign-out,
the API refusing the session cookie, forwarded addresses believed only from trusted proxies,
ids in URLs, and the cost of the history page (the audit verdict and the reasons are not
recomputed for every view and row)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.web.inbox_app import APP, LOCAL, approver, csrf, propose, signed_in
from tether import SQLiteStore
from tether.web.app import WebConfig, create_app
from tether.web.auth import COOKIE, VISITOR_COOKIE, ProxyAuth, limiter_key
from tether.web.hosts import allowed_hosts, host_name


def status(store: SQLiteStore, approval_id: str) -> str:
    with store.read() as tx:
        found = tx.get_approval(approval_id)
    assert found is not None
    return found.status.value


# -- DNS rebinding: the Host allow-list -----------------------------------------------------
def test_a_request_for_another_host_is_refused(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    app = create_app(WebConfig(store))
    for base in ("http://localhost", "http://127.0.0.1:8700", "http://[::1]:8700"):
        with TestClient(app, base_url=base) as ok:
            assert ok.get("/").status_code == 200, base
    # A page on evil.example re-pointed at 127.0.0.1: its requests still name evil.example.
    with TestClient(app, base_url="http://evil.example:8700") as rebound:
        api = rebound.get("/api/approvals", headers={"Authorization": f"Bearer {token}"})
        assert api.json()["code"] == "host_not_allowed"
        for r in (rebound.get("/"), api, rebound.get("/events")):
            assert r.status_code == 400
            assert "--allowed-host" in r.text and "evil.example" not in r.text
            assert "default-src 'none'" in r.headers["content-security-policy"]
    configured = create_app(WebConfig(store, allowed_hosts=("inbox.corp",)))
    with TestClient(configured, base_url="https://inbox.corp") as named:
        assert named.get("/").status_code == 200
    with TestClient(configured, base_url=LOCAL) as local:
        assert local.get("/").status_code == 400  # told its names: localhost is not one
    with TestClient(create_app(WebConfig(store, allowed_hosts=("*",))), base_url="http://x") as c:
        assert c.get("/").status_code == 200


def test_the_default_hosts_are_the_bound_local_and_public_names() -> None:
    assert allowed_hosts("127.0.0.1", None, ()) == ("localhost", "127.0.0.1", "::1")
    assert allowed_hosts("0.0.0.0", "https://Inbox.Example/", ["approvals.corp", " "]) == (
        "localhost",
        "127.0.0.1",
        "::1",
        "inbox.example",
        "approvals.corp",
    )
    assert allowed_hosts("10.1.2.3", None, ["[fd00::1]"])[-2:] == ("10.1.2.3", "fd00::1")
    assert [host_name(h) for h in ("A.example.:80", "[::1]:1", "::1", "x:y", "[::1]z")] == [
        "a.example",
        "::1",
        None,
        None,
        None,
    ]


# -- cross-origin form posts ----------------------------------------------------------------
def test_a_form_post_from_another_origin_is_refused(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(create_app(WebConfig(store)), base_url="http://localhost:8700") as client:
        form = signed_in(client, token)
        url = f"/approvals/{aid}/approve"
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "http://localhost:3000"},  # a sibling site: SameSite lets its posts by
            {"Origin": "null"},
            {"Sec-Fetch-Site": "same-site"},
            {"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost:8700"},
        ):
            r = client.post(url, data={"csrf": form}, headers=headers)
            assert r.status_code == 403, headers
            assert status(store, aid) == "pending"
        # Signing out is a state change too, and is refused the same way.
        r = client.post("/signout", data={"csrf": form}, headers={"Origin": "null"})
        assert r.status_code == 403
        assert "Waiting for you" in client.get("/").text
        own = {"Origin": "http://localhost:8700", "Sec-Fetch-Site": "same-origin"}
        r = client.post(url, data={"csrf": form}, headers=own)
        assert r.status_code == 200 and "Approved." in r.text
    assert status(store, aid) == "approved"


def test_behind_a_proxy_that_rewrites_host_the_public_origin_may_post(
    store: SQLiteStore,
) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    # The proxy sends Host: 127.0.0.1:8700; the browser's Origin is the public address.
    config = WebConfig(store, base_url="https://Approvals.Corp:443/")
    # (https to the proxy: with an https base URL the cookies are Secure.)
    with TestClient(create_app(config), base_url="https://127.0.0.1:8700") as client:
        form = signed_in(client, token)
        url = f"/approvals/{aid}/approve"
        for other in ("https://approvals.corp:8443", "http://approvals.corp", "https://evil.corp"):
            assert (
                client.post(url, data={"csrf": form}, headers={"Origin": other}).status_code == 403
            )
        r = client.post(url, data={"csrf": form}, headers={"Origin": "https://approvals.corp"})
        assert r.status_code == 200 and "Approved." in r.text


def test_the_referrer_policy_lets_the_browser_send_its_origin(store: SQLiteStore) -> None:
    # Under "no-referrer" a browser sends "Origin: null" with the inbox's own form posts,
    # which the origin check must refuse; "same-origin" still sends no Referer elsewhere.
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        assert client.get("/").headers["referrer-policy"] == "same-origin"


def test_no_other_site_may_load_a_response_and_the_api_is_not_cached(
    store: SQLiteStore,
) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        api = client.get("/api/approvals", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 200 and api.headers["cache-control"] == "no-store"
        assert client.get("/api/approvals").headers["cache-control"] == "no-store"  # 401 too
        for r in (api, client.get("/"), client.get("/static/inbox.js")):
            assert r.headers["cross-origin-resource-policy"] == "same-origin"
            assert r.headers["cross-origin-opener-policy"] == "same-origin"


def test_a_body_too_large_is_refused_before_it_is_read(store: SQLiteStore) -> None:
    aid = propose(store)
    with TestClient(create_app(WebConfig(store, max_body_bytes=1000)), base_url=LOCAL) as client:
        big = client.post(f"/api/approvals/{aid}/deny", json={"reason": "x" * 2000})
        assert big.status_code == 413 and big.json()["code"] == "body_too_large"
        assert "1000 bytes" in big.json()["message"]
        assert client.post("/signin", data={"token": "y" * 2000}).status_code == 413

        def chunks() -> Iterator[bytes]:
            yield b'{"reason": "'
            yield b'x"}'

        r = client.post(f"/api/approvals/{aid}/deny", content=chunks())
        assert r.status_code == 411
        small = client.post(f"/api/approvals/{aid}/deny", json={"reason": "no"})
        assert small.status_code == 401  # under the limit: on to the credential
    assert status(store, aid) == "pending"


# -- the session cookie ---------------------------------------------------------------------
def cookie_header(response: Any) -> str:
    (header,) = [v for k, v in response.headers.multi_items() if k == "set-cookie"]
    return str(header)


def test_the_session_cookie_is_httponly_strict_and_secure_over_https(store: SQLiteStore) -> None:
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as plain:
        header = cookie_header(plain.get("/"))
        assert "HttpOnly" in header and "SameSite=strict" in header and "Path=/" in header
        assert "Secure" not in header  # over http a Secure cookie would not come back
    with TestClient(create_app(WebConfig(store)), base_url="https://localhost") as tls:
        assert "Secure" in cookie_header(tls.get("/"))
    with TestClient(create_app(WebConfig(store, secure_cookies=True)), base_url=LOCAL) as proxied:
        assert "Secure" in cookie_header(proxied.get("/"))


def test_a_planted_session_id_is_not_signed_in_by_its_victim(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    app = create_app(WebConfig(store))
    with TestClient(app, base_url=LOCAL) as attacker, TestClient(app, base_url=LOCAL) as victim:
        attacker.get("/")
        # Not signed in, the attacker holds no session id at all: only a visitor's nonce.
        assert COOKIE not in attacker.cookies
        planted = attacker.cookies[VISITOR_COOKIE]
        # The victim's browser is made to hold it; signing in makes a session of its own.
        victim.get("/", headers={"Cookie": f"{VISITOR_COOKIE}={planted}"})
        signed_in(victim, token)
        assert victim.cookies[COOKIE] not in (planted, "")
        attacker.cookies.set(COOKIE, planted)
        assert "Sign in to approve" in attacker.get("/").text  # the planted value signs no one in


def test_signing_out_needs_the_csrf_token(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        signed_in(client, token)
        assert client.post("/signout").status_code == 403
        assert client.post("/signout", data={"csrf": "guess"}).status_code == 403
        assert "Waiting for you" in client.get("/").text


def test_a_non_ascii_csrf_token_is_refused_not_a_server_error(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        client.get("/")
        assert client.post("/signin", data={"token": token, "csrf": "é"}).status_code == 403
        signed_in(client, token)
        r = client.post(f"/approvals/{aid}/approve", data={"csrf": "jeton-é"})
        assert r.status_code == 403
    assert status(store, aid) == "pending"


def test_signing_in_always_goes_home(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        form = csrf(client.get("/signin?next=https://evil.example").text)
        r = client.post(
            "/signin?next=https://evil.example",
            data={"token": token, "csrf": form, "next": "//evil.example"},
            follow_redirects=False,
        )
        assert (r.status_code, r.headers["location"]) == (303, "/")


def test_the_api_never_takes_the_session_cookie(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        signed_in(client, token)
        assert client.get("/api/approvals").status_code == 401
        r = client.post(f"/api/approvals/{aid}/approve", json={})
        assert (r.status_code, r.json()["code"]) == (401, "credential_missing")
    assert status(store, aid) == "pending"


# -- forwarded addresses and the sign-in limiter --------------------------------------------
def test_forwarded_addresses_are_believed_only_from_trusted_proxies() -> None:
    proxy = ProxyAuth.parse(None, ["10.0.0.0/24"])
    assert proxy.header is None
    assert proxy.client_address("10.0.0.7", "203.0.113.5") == "203.0.113.5"
    # The client wrote the left part; the proxy appended the real address on the right.
    assert proxy.client_address("10.0.0.7", "1.2.3.4, 203.0.113.5, 10.0.0.2") == "203.0.113.5"
    assert proxy.client_address("10.0.0.7", "garbage") == "10.0.0.7"
    assert proxy.client_address("192.0.2.9", "203.0.113.5") == "192.0.2.9"
    assert limiter_key("2001:db8::1") == limiter_key("2001:db8::ffff") == "2001:db8::/64"
    assert limiter_key("::ffff:192.0.2.1") == "192.0.2.1"


def test_the_sign_in_limiter_counts_the_client_behind_the_proxy(store: SQLiteStore) -> None:
    proxy = ProxyAuth.parse(None, ["10.0.0.0/24"])
    app = create_app(WebConfig(store, proxy=proxy, signin_limit=2))
    wrong = {"Authorization": "Bearer tth_cred-0000000000000000_" + "y" * 43}

    def codes(client: TestClient, forwarded: str, n: int) -> list[int]:
        headers = {**wrong, "X-Forwarded-For": forwarded}
        return [client.get("/api/approvals", headers=headers).status_code for _ in range(n)]

    with TestClient(app, base_url=LOCAL, client=("10.0.0.7", 5000)) as via_proxy:
        assert codes(via_proxy, "203.0.113.5", 3) == [401, 401, 429]
        # Another person behind the same proxy is not locked out by the first one.
        other = {"Authorization": "Bearer tth_cred-1111111111111111_" + "y" * 43}
        r = via_proxy.get("/api/approvals", headers={**other, "X-Forwarded-For": "203.0.113.6"})
        assert r.status_code == 401
        # The client's own line first, the proxy's after it: the proxy's is the one counted.
        for n in range(3):
            headers = [
                *wrong.items(),
                ("X-Forwarded-For", f"198.51.100.{n}"),
                ("X-Forwarded-For", "203.0.113.7"),
            ]
            last = via_proxy.get("/api/approvals", headers=headers).status_code
        assert last == 429
    # Not from the proxy, the header is the client's own text: rotating it does not help
    # (another wrong credential: the first one is slowed wherever it comes from).
    wrong = {"Authorization": "Bearer tth_cred-2222222222222222_" + "y" * 43}
    with TestClient(app, base_url=LOCAL, client=("192.0.2.9", 5000)) as direct:
        assert [codes(direct, f"198.51.100.{n}", 1)[0] for n in range(3)] == [401, 401, 429]


# -- ids in URLs, and what error pages repeat -------------------------------------------------
def test_a_malformed_id_is_not_found_and_not_repeated(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        form = signed_in(client, token)
        payload = "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"  # no "/": it must reach the route
        for r in (
            client.get(f"/approvals/{payload}"),
            client.get(f"/runs/{payload}"),
            client.get(f"/approvals/{'a' * 300}"),
            client.post(f"/approvals/{payload}/approve", data={"csrf": form}),
        ):
            assert r.status_code == 404
            assert "onerror" not in r.text and "a" * 300 not in r.text
            assert "no such" in r.text
        r = client.get(f"/api/approvals/{payload}", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 422 and "onerror" not in r.text


# -- what the history page costs --------------------------------------------------------------
def test_the_audit_verdict_is_kept_while_the_log_is_unchanged(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    verified = []
    real = store.verify_audit

    def counted() -> Any:
        verified.append(1)
        return real()

    monkeypatch.setattr(store, "verify_audit", counted)
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        form = signed_in(client, token)
        for _ in range(3):
            assert "intact" in client.get("/history").text
        assert len(verified) == 1
        client.post(f"/approvals/{aid}/deny", data={"csrf": form, "reason": "no"})
        history = client.get("/history").text  # the log grew: verified again
        assert "intact" in history and aid in history
        assert len(verified) == 2


def test_the_audit_verdict_is_renewed_after_its_max_age(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.web.service import Inbox

    now = [1000.0]
    propose(store)
    inbox = Inbox(store, clock=lambda: now[0], verify_max_age_s=60)
    assert inbox.verify()["intact"] is True
    calls = []
    real = store.verify_audit

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(store, "verify_audit", counted)
    now[0] += 30
    inbox.verify()
    assert calls == []
    now[0] += 31  # a row changed behind tether's back moves no head: looked at again anyway
    assert inbox.verify()["intact"] is True
    assert calls == [1]


def test_listing_approvals_reads_each_ones_reasons_once(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = approver(store, "alice", "acme")
    for n in range(5):
        propose(store, amount=n + 1)
    tails = []
    real = store.audit_tail

    def counted(**kwargs: Any) -> Any:
        tails.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(store, "audit_tail", counted)
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(WebConfig(store, app_ref=APP)), base_url=LOCAL) as client:
        first = client.get("/api/approvals", headers=headers).json()["approvals"]
        assert len(first) == 5 and all(a["reasons"] for a in first)
        read = len(tails)
        assert read == 5
        again = client.get("/api/approvals", headers=headers).json()["approvals"]
        assert [a["reasons"] for a in again] == [a["reasons"] for a in first]
        assert len(tails) == read  # remembered: not read again


# -- the database names no code the server runs ------------------------------------------------
def test_an_app_planted_in_a_run_row_is_never_imported(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone who can write the database names their own module as the run's app; opening
    # the approval (whose edit form needs the app's schemas) must not import it.
    marker = tmp_path / "imported"
    (tmp_path / "planted_app.py").write_text(
        f"open({str(marker)!r}, 'w').close()\napp = None\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    token = approver(store, "alice", "acme")
    approval_id = propose(store)
    with store.read() as tx:
        approval = tx.get_approval(approval_id)
    assert approval is not None
    import sqlite3

    db = sqlite3.connect(tmp_path / "t.db")
    with db:
        db.execute(
            "UPDATE agent_runs SET checkpoint_json = json_set(checkpoint_json, '$.app', ?) "
            "WHERE run_id = ?",
            ("planted_app:app", approval.run_id),
        )
    db.close()
    with TestClient(create_app(WebConfig(store, app_ref=APP)), base_url=LOCAL) as client:
        signed_in(client, token)
        page = client.get(f"/approvals/{approval_id}")
        assert page.status_code == 200
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        signed_in(client, token)
        assert client.get(f"/approvals/{approval_id}").status_code == 200
    assert not marker.exists()
