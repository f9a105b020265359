"""Notifications: an outbox row commits with each approval request (on every store), and a
sender delivers it to a real local HTTP receiver that fails the first attempts; every
notification arrives, correctly signed, exactly once after deduplication by its id."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.web.inbox_app import propose
from tether import SQLiteStore
from tether.gate.links import link_is_sound
from tether.gate.notify import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Sender,
    Webhook,
    verify_signature,
)

SECRET = b"receiver-shared-secret"


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 500 to the first ``fail_first`` POSTs of
    each notification id, then 200; it keeps every request it was sent."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.requests: list[tuple[dict[str, str], bytes, int]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    tries = sum(
                        1
                        for h, _, _ in receiver.requests
                        if h.get("x-tether-notification-id")
                        == headers.get("x-tether-notification-id")
                    )
                    code = 500 if tries < receiver.fail_first else 200
                    receiver.requests.append((headers, body, code))
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self) -> dict[str, dict[str, object]]:
        """What was accepted, deduplicated by notification id."""
        out: dict[str, dict[str, object]] = {}
        for headers, body, code in self.requests:
            if code == 200:
                out.setdefault(headers[ID_HEADER.lower()], json.loads(body))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail_first=2)
    yield r
    r.close()


def test_an_approval_request_writes_its_outbox_row_in_the_same_transaction(
    backend: Backend,
) -> None:
    aid = propose(backend.store, card_token="tok_live_abcdef123456")
    rows = backend.open().list_notifications()
    assert [r.notification_id for r in rows] == [f"ntf-{aid}"]
    about = json.loads(rows[0].record_json)["about"]
    assert about["approval_id"] == aid and about["tenant"] == "acme"
    assert "tok_live" not in rows[0].record_json  # no arguments, sensitive or not
    assert rows[0].delivered_at is None


def test_every_notification_arrives_signed_exactly_once(tmp_path: Path, receiver: Receiver) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        # Requested while no sender runs: the gate never waited on a webhook.
        ids = [propose(store, amount=n + 1) for n in range(3)]
        sender = Sender(
            store,
            [Webhook(receiver.url, "json", SECRET)],
            base_url="https://inbox.example",
            retry_base_s=0.05,
            timeout_s=2,
        )
        deadline = time.monotonic() + 20
        while any(n.delivered_at is None for n in store.list_notifications()):
            assert time.monotonic() < deadline, receiver.requests
            sender.send_due()
            time.sleep(0.02)
        delivered = receiver.delivered()
        assert sorted(delivered) == sorted(f"ntf-{a}" for a in ids)
        for headers, body, _ in receiver.requests:
            timestamp = headers[TIMESTAMP_HEADER.lower()]
            assert verify_signature(SECRET, timestamp, body, headers[SIGNATURE_HEADER.lower()])
            assert not verify_signature(b"another secret", timestamp, body, "sha256=00")
        # Each was refused twice, then taken once: retried, and never sent again after.
        assert len(receiver.requests) == 3 * 3
        for nid, payload in delivered.items():
            approval_id = nid.removeprefix("ntf-")
            # The approval's page, with the seal that shows tether made the link.
            link, _, seal = str(payload["link"]).partition("?link=")
            assert link == f"https://inbox.example/approvals/{approval_id}"
            assert link_is_sound(store.keys, approval_id, seal, time.time())
            assert not link_is_sound(store.keys, "apr-other", seal, time.time())
            assert payload["approval"]["approval_id"] == approval_id  # type: ignore[index]
        assert all(n.attempts == 3 for n in store.list_notifications())
        sender.send_due()
        assert len(receiver.requests) == 9  # nothing left to send
    finally:
        store.close()


def test_two_senders_never_deliver_one_attempt_twice(tmp_path: Path) -> None:
    receiver = Receiver(fail_first=0)
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    other = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        for n in range(10):
            propose(store, amount=n + 1)
        hooks = [Webhook(receiver.url, "json", SECRET)]
        senders = [Sender(s, hooks, retry_base_s=5) for s in (store, other)]
        threads = [threading.Thread(target=s.send_due) for s in senders]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(receiver.requests) == 10
        assert len(receiver.delivered()) == 10
    finally:
        other.close()
        store.close()
        receiver.close()


def test_slack_gets_its_own_format_with_the_link(tmp_path: Path) -> None:
    receiver = Receiver()
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        # The resource label is made from an argument: attacker text, here a phishing line.
        phish = "<https://evil.example/login|Approve here> *URGENT* <!channel> evil.example"
        aid = propose(store, case_id=phish)
        with store.read() as tx:
            approval = tx.get_approval(aid)
        assert approval is not None and "evil.example" in approval.resource
        Sender(store, [Webhook(receiver.url, "slack")], base_url="https://i.example").send_due()
        ((headers, body, _),) = receiver.requests
        message = json.loads(body)
        text = message["text"]
        assert f" <https://i.example/approvals/{aid}?link=" in text
        assert text.endswith("|Review it in the inbox>")
        assert "`refund`" in text and "`acme`" in text and "`agent-7`" in text
        for injected in ("evil", "URGENT", "channel", "Approve here"):
            assert injected not in text
        assert (message["unfurl_links"], message["unfurl_media"]) == (False, False)
        assert headers[ID_HEADER.lower()] == f"ntf-{aid}"
    finally:
        store.close()
        receiver.close()


def test_slack_fields_cannot_leave_their_code_span() -> None:
    from tether.gate.slack_message import slack_code as _slack_code

    assert _slack_code("a`<b|c>`&\n*x*") == "`a'&lt;b|c&gt;'&amp; *x*`"
    assert len(_slack_code("x" * 500)) == 102


def test_a_signature_is_checked_in_time_and_in_full() -> None:
    from tether.gate.notify import sign

    body, now = b'{"id":"ntf-1"}', 1_800_000_000.0
    timestamp = f"{now:.0f}"
    good = sign(SECRET, timestamp, body)
    assert verify_signature(SECRET, timestamp, body, good, now=now + 299)
    assert verify_signature(SECRET, timestamp, body, good, now=now - 60)  # a fast clock
    # Replayed ten minutes later: refused, though the signature is genuine.
    assert not verify_signature(SECRET, timestamp, body, good, now=now + 600)
    assert verify_signature(SECRET, timestamp, body, good, now=now + 600, tolerance_s=900)
    assert not verify_signature(SECRET, f"{now + 1:.0f}", body, good, now=now)  # moved
    assert not verify_signature(SECRET, timestamp, body + b" ", good, now=now)
    for garbled in ("soon", "nan", "-1", "1.8e9", " 1800000000", ""):
        forged = sign(SECRET, garbled, body)  # even signed with the secret: not a timestamp
        assert not verify_signature(SECRET, garbled, body, forged, now=now)
    assert not verify_signature(SECRET, timestamp, body, good[:-1] + "é", now=now)


def test_a_redirect_is_a_failed_attempt(tmp_path: Path) -> None:
    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()

        def do_GET(self) -> None:  # followed, the POST would become this GET's 200
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        propose(store)
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        assert Sender(store, [Webhook(url, "json", SECRET)], timeout_s=2).send_due() == 0
        (row,) = store.list_notifications()
        assert row.delivered_at is None
        assert "HTTP 302" in json.loads(row.record_json)["last_error"]
    finally:
        store.close()
        server.shutdown()
        server.server_close()


def test_tether_notify_delivers_the_outbox(tmp_path: Path) -> None:
    receiver = Receiver(fail_first=1)
    db = f"sqlite:///{tmp_path}/t.db"
    store = SQLiteStore(db)
    try:
        propose(store)
        propose(store, amount=3)
    finally:
        store.close()
    env = {**os.environ, "TETHER_WEBHOOK_SECRET": SECRET.decode()}
    cmd = [sys.executable, "-m", "tether", "notify", "--db", db, "--webhook", receiver.url]
    try:
        first = subprocess.run(
            [*cmd, "--once", "--json", "--retry-base", "0.01"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert json.loads(first.stdout)["waiting"] == 2  # both refused once
        time.sleep(0.05)
        second = subprocess.run(
            [*cmd, "--once", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert json.loads(second.stdout) == {
            "notifications": 2,
            "delivered": 2,
            "waiting": 0,
            "failed_attempts": 0,
        }
        assert len(receiver.delivered()) == 2
        missing = subprocess.run(
            [*cmd[:-2]], check=False, env=env, capture_output=True, text=True, timeout=60
        )
        assert missing.returncode == 2 and "--webhook" in missing.stderr
    finally:
        receiver.close()


def test_a_webhook_must_say_where_and_a_generic_one_needs_its_secret() -> None:
    from tether.errors import ConfigurationError
    from tether.gate.notify import check_base_url

    with pytest.raises(ConfigurationError, match="TETHER_WEBHOOK_SECRET"):
        Webhook("https://hooks.example/x", "json", None)
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        Webhook("https://hooks.example/x", "json", b"short")
    for url, problem in (
        ("file:///etc/passwd", "http"),
        ("https:///no-host", "with a host"),
        ("https://hooks.example/a b", "spaces"),
        ("https://hooks.example/\r\nX-Injected: 1", "control"),
        ("https://user:pw@hooks.example/x", "user name or password"),
        ("https://hooks.example:port/x", "not a URL"),
    ):
        with pytest.raises(ConfigurationError, match=problem):
            Webhook(url, "json", SECRET)
    # A Slack URL is a credential: https, and never repeated in an error.
    with pytest.raises(ConfigurationError, match="https://") as refused:
        Webhook("http://hooks.slack.com/services/T0/B0/secret", "slack")
    assert "secret" not in str(refused.value).replace("may hold a secret", "")
    with pytest.raises(ConfigurationError) as refused:
        Webhook("https://hooks.example/x?token=s3cr3t value", "json", SECRET)
    assert "s3cr3t" not in str(refused.value)
    Webhook("http://127.0.0.1:9/hook", "slack")  # a receiver on this machine may be http
    for bad in ("https://inbox.example/?x=1", "https://inbox.example/#f", "https://i.example|x"):
        with pytest.raises(ConfigurationError, match="base-url"):
            check_base_url(bad)
    check_base_url("https://inbox.example/")


def test_a_receiver_that_is_down_loses_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path}/t.db")
    try:
        aid = propose(store)
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        down = Sender(
            store,
            [Webhook(f"http://127.0.0.1:{port}/", "json", SECRET)],
            retry_base_s=0.01,
            timeout_s=1,
        )
        assert down.send_due() == 0
        (row,) = store.list_notifications()
        assert row.delivered_at is None and row.attempts == 1
        assert "json webhook" in json.loads(row.record_json)["last_error"]
        receiver = Receiver()
        try:
            time.sleep(0.05)
            up = Sender(store, [Webhook(receiver.url, "json", SECRET)])
            assert up.send_due() == 1
            assert list(receiver.delivered()) == [f"ntf-{aid}"]
        finally:
            receiver.close()
    finally:
        store.close()
