"""The approver's minute over HTTP, against the real app and a real SQLite store: the
deep link kept through sign-in (and a cross-site click that keeps the session), sessions
that hold through rotation, expired approvals, triage, the consequence on the page, and the
smaller promises (HSTS, Allow, error codes, run ids of any shape)."""

from __future__ import annotations

import re
import time
from typing import Any

from click.testing import CliRunner
from fastapi.testclient import TestClient

from tests.web.inbox_app import LOCAL, approver, csrf, propose, propose_call, signed_in
from tether import SQLiteStore
from tether.gate.notify import sign, verify_signature
from tether.web.app import WebConfig, create_app
from tether.web.auth import COOKIE
from tether.web.triage import isolate, safe_next

CROSS_SITE = {"Sec-Fetch-Site": "cross-site"}


def form_action(html: str) -> str:
    found = re.search(r'<form method="post" action="([^"]+)"', html)
    assert found, html
    return found.group(1).replace("&amp;", "&")


def test_a_deep_link_survives_sign_in(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        r = client.get(f"/approvals/{aid}", headers=CROSS_SITE)
        assert r.status_code == 200 and "Sign in to approve" in r.text
        assert COOKIE not in r.cookies  # a visitor gets no session
        # From another site the Strict cookie was left out: look again from this origin.
        assert f'http-equiv="refresh" content="0;url=/approvals/{aid}"' in r.text
        action = form_action(r.text)
        assert action == f"/signin?next=/approvals/{aid}"
        r = client.post(action, data={"token": token, "csrf": csrf(r.text)}, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, f"/approvals/{aid}")
        assert 'id="approve"' in client.get(r.headers["location"]).text


def test_a_cross_site_click_does_not_replace_the_session(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        signed_in(client, token)
        session = client.cookies[COOKIE]
        # The browser sends no Strict cookie on a link from chat: the answer touches neither.
        r = client.get(f"/approvals/{aid}", headers={**CROSS_SITE, "Cookie": ""})
        assert not [c for c in r.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}=")]
        assert client.cookies[COOKIE] == session
        # The refresh from this origin carries the cookie: the approval, signed in.
        assert 'id="approve"' in client.get(f"/approvals/{aid}").text
        # Signing in again as the same approver keeps the session it has.
        page = client.get(f"/approvals/{aid}", headers={**CROSS_SITE, "Cookie": ""})
        r = client.post(
            form_action(page.text),
            data={"token": token, "csrf": csrf(page.text)},
            follow_redirects=False,
        )
        assert r.status_code == 303 and client.cookies[COOKIE] == session


def test_the_target_is_a_path_of_this_inbox_never_another_site(store: SQLiteStore) -> None:
    for bad in (
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "/%0d%0aSet-Cookie:x",
        "javascript:alert(1)",
        "/approvals/\u202eabc",
        "/signout",
        "",
    ):
        assert safe_next(bad) == "/", bad
    assert safe_next("/approvals/apr-1") == "/approvals/apr-1"
    token = approver(store, "alice", "acme")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        form = csrf(client.get("/").text)
        r = client.post(
            "/signin?next=//evil.example/",
            data={"token": token, "csrf": form},
            follow_redirects=False,
        )
        assert r.headers["location"] == "/"


def test_in_flight_requests_and_forms_survive_a_rotation(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    config = WebConfig(store, session_rotate_s=0.0, session_grace_s=30.0)
    with TestClient(create_app(config), base_url=LOCAL) as client:
        form = signed_in(client, token)
        old = client.cookies[COOKIE]
        # Two requests sent with the same (now due) id: the first rotates it, the second
        # still arrives with the old one, as would a request already in flight.
        for _ in range(3):
            r = client.get("/", headers={"Cookie": f"{COOKIE}={old}"})
            assert "Waiting for you" in r.text
        # A form from the page loaded before the rotation.
        r = client.post(
            f"/approvals/{aid}/approve",
            data={"csrf": form},
            headers={"Cookie": f"{COOKIE}={old}"},
        )
        assert r.status_code == 200 and "Approved." in r.text


def test_expired_approvals_leave_the_list_and_read_expired(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    gone = propose(store, ttl_s=0.2)
    live = propose(store)
    time.sleep(0.3)
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:

        def ids(status: str) -> list[str]:
            rows = client.get(f"/api/approvals?status={status}", headers=auth).json()
            return [a["approval_id"] for a in rows["approvals"]]

        assert ids("pending") == [live] and ids("expired") == [gone]
        shown = client.get(f"/api/approvals/{gone}", headers=auth).json()
        assert (shown["status"], shown["expired"], shown["seconds_left"]) == ("expired", True, 0)
        signed_in(client, token)
        inbox = client.get("/").text
        assert gone not in inbox and live in inbox
        assert re.search(r'id="inbox-count">1<', inbox)
        history = client.get("/history").text
        assert gone in history and "status-expired" in history
        assert gone in client.get("/history?status=expired").text


def test_rows_carry_what_triage_needs_and_filter(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme", "globex")
    refund = propose(store, amount=40, note="x" * 5000)
    wipe = propose_call(store, "delete_account", {"account_id": "A-9"}, tenant="globex")
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        rows = {
            a["approval_id"]: a
            for a in client.get("/api/approvals", headers=auth).json()["approvals"]
        }
        assert rows[wipe]["risk"] == "irreversible" and rows[refund]["risk"] == "write"
        assert rows[wipe]["reason_asked"].startswith("tier irreversible")
        assert rows[wipe]["summary"] == "account_id=A-9"
        assert len(rows[refund]["summary"]) <= 140  # one line, however long the arguments
        assert rows[refund]["requester"] == "agent-7" and rows[refund]["seconds_left"] > 3000
        signed_in(client, token)
        page = client.get("/?sort=risk").text
        assert page.index(wipe) < page.index(refund)  # most consequential first
        only = client.get("/?tier=write&tenant=acme").text
        assert refund in only and wipe not in only
        assert wipe in client.get("/?tenant=globex").text
        assert refund not in client.get("/?tool=delete_account").text
        found = client.get("/?q=a-9").text  # text anywhere in a row, any case
        assert wipe in found and refund not in found


def test_an_irreversible_call_needs_its_name_typed(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose_call(
        store, "delete_account", {"account_id": "A-9"}, request="please close account A-9"
    )
    with TestClient(
        create_app(WebConfig(store, app_ref="tests.web.inbox_app:app")), base_url=LOCAL
    ) as client:
        form = signed_in(client, token)
        page = client.get(f"/approvals/{aid}").text
        assert "cannot be undone" in page and 'id="confirm"' in page
        assert "Delete a customer&#39;s account" in page  # the tool's description
        assert "please close account A-9" in page  # the request that led to it
        # Approve comes before the arguments and the run's steps: above the fold.
        assert page.index('id="approve"') < page.index('id="arguments"')
        r = client.post(f"/approvals/{aid}/approve", data={"csrf": form})
        assert r.status_code == 422 and "type the tool" in r.text
        r = client.post(f"/approvals/{aid}/approve", data={"csrf": form, "confirm": "nope"})
        assert r.status_code == 422
        r = client.post(
            f"/approvals/{aid}/approve", data={"csrf": form, "confirm": "delete_account"}
        )
        assert r.status_code == 200 and "Approved." in r.text
        # Nothing in this process resumes runs: the notice does not promise it.
        assert "The run continues here" not in r.text


def test_bidirectional_text_is_isolated_and_its_controls_shown() -> None:
    html = str(isolate("run-\u202eevil"))
    assert html == "<bdi>run-[U+202E]evil</bdi>"
    assert "\u202e" not in html
    assert str(isolate("<b>")) == "<bdi>&lt;b&gt;</bdi>"


def test_https_base_url_means_secure_cookies_and_hsts(store: SQLiteStore) -> None:
    config = WebConfig(store, base_url="https://inbox.example", allowed_hosts=("localhost",))
    with TestClient(create_app(config), base_url=LOCAL) as client:
        r = client.get("/")
        assert "Secure" in r.headers["set-cookie"]
        assert r.headers["strict-transport-security"] == "max-age=31536000"
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as plain:
        assert "strict-transport-security" not in plain.get("/").headers


def test_documented_codes_allow_and_run_ids_of_any_shape(store: SQLiteStore) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        r = client.put(f"/api/approvals/{aid}/approve", headers=auth)
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert r.json()["code"] == "method_not_allowed"
        r = client.post(
            f"/api/approvals/{aid}/deny",
            content=b"{not json",
            headers={**auth, "Content-Type": "application/json"},
        )
        assert (r.status_code, r.json()["code"]) == (400, "invalid_json")
        signed_in(client, token)
        for run_id in ("run with spaces", "tenant/run/7", "urn:run:42"):
            propose_call(store, "refund", {"order_id": "O-1", "amount": 5}, run_id=run_id)
            from urllib.parse import quote

            page = client.get(f"/runs/{quote(run_id, safe='')}")
            assert page.status_code == 200, run_id
            assert "approval_requested" in page.text


def test_notify_without_a_base_url_warns(store: SQLiteStore, tmp_path: Any) -> None:
    from tether.cli.serve import notify

    result = CliRunner().invoke(
        notify,
        ["--db", store.url, "--slack-webhook", "https://hooks.slack.com/services/T/B/x", "--once"],
        catch_exceptions=False,
    )
    assert "no --base-url" in result.output + (result.stderr if result.stderr_bytes else "")


def test_the_notification_id_is_covered_by_the_signature() -> None:
    secret = b"s" * 32
    body = b'{"id":"ntf-apr-1","kind":"approval_requested"}'
    ts = str(int(time.time()))
    signature = sign(secret, ts, body)
    assert verify_signature(secret, ts, body, signature, notification_id="ntf-apr-1")
    assert not verify_signature(secret, ts, body, signature, notification_id="ntf-apr-2")


def test_slack_users_need_the_signing_secret(store: SQLiteStore, monkeypatch: Any) -> None:
    from tether.cli.serve import serve

    monkeypatch.delenv("TETHER_SLACK_SIGNING_SECRET", raising=False)
    result = CliRunner().invoke(serve, ["--db", store.url, "--slack-user", "U1=alice"])
    assert result.exit_code == 2 and "TETHER_SLACK_SIGNING_SECRET" in result.output
    result = CliRunner().invoke(serve, ["--db", store.url, "--slack-user", "alice"])
    assert result.exit_code == 2 and "SLACK_ID=APPROVER_NAME" in result.output


def test_provenance_never_calls_an_unchecked_value_trusted() -> None:
    from tether.web.pages import provenance_rows

    rows = provenance_rows(
        [
            # check "any": nothing of it was looked at, though its trust reads "none"
            {
                "argument": "repo",
                "value": "acme/infra",
                "trusted": True,
                "trust": "none",
                "checked": False,
            },
            {
                "argument": "to",
                "value": "a@evil.example",
                "trusted": False,
                "trust": "untrusted",
                "checked": True,
                "identifier": "evil.example",
                "tool": "read_email",
                "call_id": "c-2",
            },
            {
                "argument": "name",
                "value": "infra-prod",
                "trusted": False,
                "trust": "unknown",
                "checked": True,
            },
        ]
    )
    assert (rows[0]["verdict"], rows[0]["kind"]) == ("not checked", "unchecked")
    assert rows[1]["part"] == "evil.example" and "read_email" in rows[1]["verdict"]
    assert rows[2]["verdict"].startswith("untrusted") and rows[2]["kind"] == "untrusted"
    assert not any(r["verdict"] == "trusted" for r in rows)


def test_a_sealed_link_says_what_it_was_sent_for_and_a_crafted_one_is_named(
    store: SQLiteStore,
) -> None:
    from tether.gate.links import approval_link, link_seal

    token = approver(store, "alice", "acme")
    aid = propose(store)
    with store.read() as tx:
        approval = tx.get_approval(aid)
    assert approval is not None
    seal = link_seal(store.keys, aid, approval.expires_at)
    link = approval_link("http://localhost", aid, seal)
    assert link is not None and "?link=" in link
    path = link.removeprefix("http://localhost")
    with TestClient(create_app(WebConfig(store)), base_url=LOCAL) as client:
        page = client.get(path, headers=CROSS_SITE).text
        assert "tether sent you this link" in page and "refund" in page
        for crafted in (
            f"/approvals/{aid}?link=9999999999.forged:00",
            f"/approvals/{aid}?link=1.{(seal or '').partition('.')[2]}",  # past its end
        ):
            assert "not made by tether" in client.get(crafted).text
        # The seal opens nothing: sign-in still decides, and then lands on the approval.
        r = client.post(
            form_action(page),
            data={"token": token, "csrf": csrf(page)},
            follow_redirects=False,
        )
        assert r.headers["location"] == path
        assert 'id="approve"' in client.get(path).text
