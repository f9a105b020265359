"""Deciding from Slack's interactive message: requests signed as Slack signs them (v0 HMAC
of ``v0:{ts}:{body}`` under the app's signing secret, as a form with ``payload=<json>``),
against the real inbox app and store; the message is replaced through a ``response_url``
served by a real HTTP server on this machine."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from tests.web.inbox_app import LOCAL, approver, propose
from tether import ApprovalStatus, SQLiteStore
from tether.gate.notify import Webhook, notification_for, render
from tether.web.app import WebConfig, create_app
from tether.web.slack import slack_signature

SECRET = b"8f742231b10e8888abcd99yyyzzz85a5"
ROUTE = "/api/slack/interactions"


class Replies:
    def last(self) -> dict[str, Any]:
        """The latest replacement Slack was sent (they are sent apart from the request)."""
        deadline = time.monotonic() + 10
        while not self.received:
            assert time.monotonic() < deadline, "no message was replaced"
            time.sleep(0.02)
        return self.received[-1]

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        replies = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                replies.received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/actions/T1/B1/x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def replies() -> Iterator[Replies]:
    r = Replies()
    yield r
    r.server.shutdown()
    r.server.server_close()


def app_for(store: SQLiteStore) -> Any:
    config = WebConfig(
        store,
        slack_signing_secret=SECRET,
        slack_users={"U_ALICE": "alice"},
        slack_reply_hosts=("127.0.0.1",),
    )
    return create_app(config)


def slack_request(
    user: str, action: str, approval_id: str, response_url: str, reason: str | None = None
) -> bytes:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": user, "username": "someone"},
        "response_url": response_url,
        "actions": [{"action_id": action, "value": approval_id, "type": "button"}],
        "state": {"values": {"tether_reason": {"reason": {"value": reason}}}},
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def signed(body: bytes, ts: str | None = None, secret: bytes = SECRET) -> dict[str, str]:
    ts = ts or str(int(time.time()))
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": slack_signature(secret, ts, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }


def status(store: SQLiteStore, aid: str) -> ApprovalStatus:
    with store.read() as tx:
        found = tx.get_approval(aid)
    assert found is not None
    return found.status


def test_a_linked_approver_approves_from_slack_and_the_message_is_replaced(
    store: SQLiteStore, replies: Replies
) -> None:
    approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(app_for(store), base_url=LOCAL) as client:
        body = slack_request("U_ALICE", "tether_approve", aid, replies.url)
        r = client.post(ROUTE, content=body, headers=signed(body))
        assert r.status_code == 200, r.text
    assert status(store, aid) is ApprovalStatus.APPROVED
    granted = store.audit_tail(kind="approval_granted", limit=1)[0].record
    assert granted["actor"] == "alice"  # the linked approver, not "whoever clicked"
    assert replies.last()["replace_original"] is True
    assert "Approved by `alice`" in replies.last()["text"]


def test_forged_replayed_stale_and_unlinked_requests_decide_nothing(
    store: SQLiteStore, replies: Replies
) -> None:
    approver(store, "alice", "acme")
    approver(store, "bob", "acme")  # registered, but not linked to any Slack user
    aid = propose(store)
    with TestClient(app_for(store), base_url=LOCAL) as client:
        body = slack_request("U_ALICE", "tether_approve", aid, replies.url)
        forged = client.post(ROUTE, content=body, headers=signed(body, secret=b"x" * 32))
        assert (forged.status_code, forged.json()["code"]) == (401, "slack_signature")
        stale_ts = str(int(time.time()) - 301)
        stale = client.post(ROUTE, content=body, headers=signed(body, ts=stale_ts))
        assert stale.status_code == 401 and "five minutes" in stale.json()["message"]
        unsigned = client.post(ROUTE, content=body, headers={"Content-Type": "text/plain"})
        assert unsigned.status_code == 401
        # A body changed after signing (another approval, another action).
        headers = signed(body)
        other = slack_request("U_ALICE", "tether_deny", aid, replies.url, reason="x")
        assert client.post(ROUTE, content=other, headers=headers).status_code == 401
        assert status(store, aid) is ApprovalStatus.PENDING
        # A Slack user linked to nobody: refused, whoever they are in Slack.
        unlinked = slack_request("U_BOB", "tether_approve", aid, replies.url)
        r = client.post(ROUTE, content=unlinked, headers=signed(unlinked))
        assert r.status_code == 200 and "not linked" in r.json()["text"]
        assert status(store, aid) is ApprovalStatus.PENDING
        # Deny needs the typed reason; with it, alice denies, once.
        no_reason = slack_request("U_ALICE", "tether_deny", aid, replies.url)
        r = client.post(ROUTE, content=no_reason, headers=signed(no_reason))
        assert "reason" in r.json()["text"] and status(store, aid) is ApprovalStatus.PENDING
        deny = slack_request("U_ALICE", "tether_deny", aid, replies.url, reason="not today")
        deny_headers = signed(deny)
        assert client.post(ROUTE, content=deny, headers=deny_headers).status_code == 200
        assert status(store, aid) is ApprovalStatus.DENIED
        # The very same signed request again: a replay, refused before anything is read.
        replay = client.post(ROUTE, content=deny, headers=deny_headers)
        assert (replay.status_code, replay.json()["code"]) == (401, "slack_signature")
        assert "replay" in replay.json()["message"]


def test_a_decision_elsewhere_replaces_the_message_too(
    store: SQLiteStore, replies: Replies
) -> None:
    token = approver(store, "alice", "acme")
    aid = propose(store)
    with TestClient(app_for(store), base_url=LOCAL) as client:
        opened = slack_request("U_ALICE", "tether_open", aid, replies.url)
        assert client.post(ROUTE, content=opened, headers=signed(opened)).status_code == 200
        assert replies.received == []
        r = client.post(
            f"/api/approvals/{aid}/deny",
            json={"reason": "decided in the API"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200
    assert "Denied by `alice`" in replies.last()["text"]


def test_the_slack_message_carries_the_buttons() -> None:
    from tether.core.approvals import Approval  # noqa: F401 - the type notification_for takes

    store = SQLiteStore("sqlite:///:memory:")
    try:
        aid = propose(store)
        with store.read() as tx:
            approval = tx.get_approval(aid)
        assert approval is not None
        row = notification_for(approval, time.time())
        hook = Webhook("https://hooks.slack.com/services/T/B/x", "slack")
        body, _ = render(row, hook, "https://inbox.example", time.time())
        blocks = json.loads(body)["blocks"]
        buttons = {b["action_id"]: b for b in blocks[-1]["elements"]}
        assert set(buttons) == {"tether_approve", "tether_deny", "tether_open"}
        assert buttons["tether_open"]["url"] == f"https://inbox.example/approvals/{aid}"
        assert buttons["tether_approve"]["value"] == aid
    finally:
        store.close()


def test_an_irreversible_call_is_approved_only_from_its_page(
    store: SQLiteStore, replies: Replies
) -> None:
    from tests.web.inbox_app import propose_call

    approver(store, "alice", "acme")
    aid = propose_call(store, "delete_account", {"account_id": "A-1"})
    with TestClient(app_for(store), base_url=LOCAL) as client:
        body = slack_request("U_ALICE", "tether_approve", aid, replies.url)
        r = client.post(ROUTE, content=body, headers=signed(body))
        assert r.status_code == 200 and "on its" in r.json()["text"]
        assert status(store, aid) is ApprovalStatus.PENDING
        # Denying it from chat is fine: nothing happens that cannot be undone.
        deny = slack_request("U_ALICE", "tether_deny", aid, replies.url, reason="no")
        assert client.post(ROUTE, content=deny, headers=signed(deny)).status_code == 200
    assert status(store, aid) is ApprovalStatus.DENIED
