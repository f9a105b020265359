"""Telling approvers that a call waits for them: an outbox, and a sender that empties it.

The gate writes a notification row in the very transaction that records the approval request
(``notification_for``), so a request never exists without its notification and a rolled-back
one never announces anything. It never sends: a slow or dead receiver cannot hold up a call.
A ``Sender`` (run by ``tether serve``, or alone by ``tether notify``) later claims due rows and
POSTs them to the configured webhooks, retrying with exponential backoff until each webhook
has answered 2xx. Delivery is at least once: a receiver may see a notification twice (a
sender that dies after the POST but before recording it), so every delivery carries the
notification's id for the receiver to deduplicate on.

Generic webhooks get JSON signed with HMAC-SHA256 over ``<timestamp>.<body>`` (header
``X-Tether-Signature: sha256=<hex>``, ``X-Tether-Timestamp``); a receiver checks both with
``verify_signature`` (a constant-time comparison, and a timestamp no older than five minutes,
so a captured delivery cannot be replayed later). Slack incoming webhooks get Slack's
``{"text": ...}`` message (Slack signs nothing on that path; the URL is the secret).

A notification holds no arguments: they are attacker-controlled and may be sensitive, and
the approval page shows them to whoever signs in. The generic body does carry the approval's
``resource`` label, which is made from an ``*_id`` argument: receivers treat it as untrusted
text. The Slack message carries nothing made from arguments at all: a chat message is read by
people, and a label such as ``<https://evil.example|approve here>`` or a bare link would be a
phishing line in a trusted channel. Its few fields (tool, tenant, requester: set by the
operator's code, not by the model) are shown as code, which Slack neither formats nor links.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tether.core.approvals import Approval
from tether.core.digest import canonical_json
from tether.errors import ConfigurationError
from tether.evidence.keys import AuditKeys
from tether.gate.links import approval_link, link_seal
from tether.gate.slack_message import slack_blocks, slack_code
from tether.store.base import Store
from tether.store.rows import NotificationRecord

APPROVAL_REQUESTED = "approval_requested"
SIGNATURE_HEADER = "X-Tether-Signature"
TIMESTAMP_HEADER = "X-Tether-Timestamp"
ID_HEADER = "X-Tether-Notification-Id"

Format = Literal["json", "slack"]


def notification_for(approval: Approval, now: float) -> NotificationRecord:
    """The outbox row announcing a new approval request (its id is the receivers' dedup key)."""
    about = {
        "approval_id": approval.approval_id,
        "run_id": approval.run_id,
        "tenant": approval.tenant,
        "tool": approval.tool,
        "resource": approval.resource,  # never from a sensitive field (approvals.resource_of)
        "requested_by": approval.actor,
        "policy_version": approval.policy_version,
        "requested_at": approval.created_at,
        "expires_at": approval.expires_at,
    }
    return NotificationRecord(
        notification_id=f"ntf-{approval.approval_id}",
        kind=APPROVAL_REQUESTED,
        created_at=now,
        next_attempt_at=now,
        attempts=0,
        delivered_at=None,
        record_json=canonical_json({"about": about, "delivered_to": [], "last_error": None}),
    )


@dataclass(frozen=True)
class Webhook:
    """Where notifications go. ``secret`` signs generic deliveries (required for them)."""

    url: str
    format: Format = "json"
    secret: bytes | None = None

    def __post_init__(self) -> None:
        check_url(self.url, "webhook", https_only=self.format == "slack")
        if self.format == "json" and not self.secret:
            raise ConfigurationError(
                "a generic webhook needs a signing secret: set $TETHER_WEBHOOK_SECRET "
                "(receivers check X-Tether-Signature with it)"
            )
        if self.format == "json" and self.secret is not None and len(self.secret) < 16:
            raise ConfigurationError(
                "$TETHER_WEBHOOK_SECRET is too short to sign with: use at least 16 bytes "
                "(e.g. `openssl rand -hex 32`)"
            )

    @property
    def key(self) -> str:
        """How the outbox remembers this webhook was served, without storing its URL (a
        Slack URL is a credential)."""
        return hashlib.sha256(f"{self.format} {self.url}".encode()).hexdigest()[:16]


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def check_url(url: str, what: str, *, https_only: bool = False) -> None:
    """An absolute http(s) URL with a host and nothing that does not belong in one; https
    when ``https_only`` (a Slack URL is a credential), except on this machine."""
    from urllib.parse import urlsplit

    # A webhook URL may carry its receiver's secret (Slack's always does): never repeated.
    shown = url if what != "webhook" else "(not shown: it may hold a secret)"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ConfigurationError(f"{what} URL {shown!r} holds spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        raise ConfigurationError(f"{what} URL {shown!r} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"{what} URL {shown!r} must be an absolute http:// or https:// URL with a host"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(
            f"{what} URL {shown!r} must not hold a user name or password; sign with "
            "$TETHER_WEBHOOK_SECRET instead"
        )
    if https_only and parts.scheme != "https" and parts.hostname not in LOOPBACK_NAMES:
        raise ConfigurationError(f"{what} URL {shown!r} must be https://")


def check_base_url(base_url: str) -> None:
    """The inbox's public address, put in every notification's link."""
    from urllib.parse import urlsplit

    check_url(base_url, "--base-url")
    parts = urlsplit(base_url)
    if parts.query or parts.fragment or any(c in base_url for c in '<>|"\\'):
        raise ConfigurationError(
            f"--base-url {base_url!r} must be the inbox's address alone, e.g. "
            'https://inbox.example (no query, fragment or <>|" characters)'
        )


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={mac}"


def verify_signature(
    secret: bytes,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
    notification_id: str | None = None,
) -> bool:
    """What a receiver checks: the body is the one tether signed at ``timestamp``, and that
    was at most ``tolerance_s`` ago (or ahead, for clock skew), so an old delivery replayed
    is refused. Compares in constant time (``hmac.compare_digest``): a receiver writing its
    own check must too, or the time the comparison takes leaks the signature byte by byte.
    Deduplicate on the notification id as well: a retry is a new, validly signed delivery.
    Pass the ``X-Tether-Notification-Id`` header as ``notification_id``: it is then covered
    by the signature too (it must be the signed body's ``id``), so a forged header cannot
    make a receiver drop a real notification as a duplicate."""
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return False  # tether sends whole seconds; "nan" would pass any age comparison
    at = float(timestamp)
    if abs((time.time() if now is None else now) - at) > tolerance_s:
        return False
    if not hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.encode()):
        return False
    if notification_id is None:
        return True
    try:
        signed_id = json.loads(body).get("id")
    except (ValueError, AttributeError):
        return False
    return isinstance(signed_id, str) and hmac.compare_digest(
        signed_id.encode(), notification_id.encode("utf-8", "replace")
    )


def render(
    notification: NotificationRecord,
    webhook: Webhook,
    base_url: str | None,
    now: float,
    keys: AuditKeys | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one delivery (its link sealed with ``keys``, if given)."""
    about = json.loads(notification.record_json)["about"]
    seal = link_seal(keys, about["approval_id"], float(about["expires_at"]))
    link = approval_link(base_url, about["approval_id"], seal)
    headers = {"Content-Type": "application/json", ID_HEADER: notification.notification_id}
    if webhook.format == "slack":
        c = slack_code
        # No resource: it is made from the call's arguments (see the module's docstring).
        text = (
            f"Approval needed: {c(about['tool'])} in tenant {c(about['tenant'])}, "
            f"requested by {c(about['requested_by'])}."
        )
        if link:
            text += f" <{link}|Review it in the inbox>"
        message = {
            "text": text,
            "blocks": slack_blocks(text, about["approval_id"], link),
            "unfurl_links": False,
            "unfurl_media": False,
        }
        return json.dumps(message).encode(), headers
    body = canonical_json(
        {
            "id": notification.notification_id,
            "kind": notification.kind,
            "approval": about,
            "link": link,
        }
    ).encode()
    timestamp = f"{now:.0f}"
    assert webhook.secret is not None  # __post_init__ requires one for this format
    headers[TIMESTAMP_HEADER] = timestamp
    headers[SIGNATURE_HEADER] = sign(webhook.secret, timestamp, body)
    return body, headers


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> None:
    """POST, raising ``OSError`` unless the receiver answered 2xx."""
    import http.client
    import urllib.error
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        # A redirect is a failed attempt: followed, it would turn the POST into a GET (whose
        # 200 would count as delivered) or send the notification somewhere not configured.
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(NoRedirects)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        raise OSError(f"HTTP {e.code}") from None
    except http.client.HTTPException as e:  # a garbled answer is a failed attempt too
        raise OSError(f"bad HTTP answer ({type(e).__name__})") from None
    if not 200 <= status < 300:
        raise OSError(f"HTTP {status}")


@dataclass
class SendStats:
    delivered: int = 0
    failed_attempts: int = 0


class Sender:
    """Delivers due notifications to every webhook; safe to run in several processes at once
    (a row is claimed by a compare-and-swap on its attempt count)."""

    def __init__(
        self,
        store: Store,
        webhooks: Sequence[Webhook],
        *,
        base_url: str | None = None,
        retry_base_s: float = 2.0,
        max_backoff_s: float = 600.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        deliver: Callable[[str, bytes, dict[str, str], float], None] = post,
    ) -> None:
        self.store, self.webhooks, self.base_url = store, tuple(webhooks), base_url
        self.retry_base_s, self.max_backoff_s, self.timeout_s = (
            retry_base_s,
            max_backoff_s,
            timeout_s,
        )
        self.clock, self.deliver = clock, deliver
        self.stats = SendStats()
        self._stop = threading.Event()

    def backoff(self, attempts: int) -> float:
        return float(min(self.retry_base_s * 2 ** max(attempts - 1, 0), self.max_backoff_s))

    def send_due(self, limit: int = 50) -> int:
        """One pass: claim what is due and try it; how many were fully delivered."""
        if not self.webhooks:
            return 0  # kept in the outbox until a sender with somewhere to send comes along
        done = 0
        for claimed in self._claim(limit):
            if self._attempt(claimed):
                done += 1
        return done

    def _claim(self, limit: int) -> list[NotificationRecord]:
        now = self.clock()
        # The claim pushes the next attempt past this one's worst case, so no other sender
        # takes the row while it is in flight; the outcome then sets the real retry time.
        lease = self.timeout_s * len(self.webhooks) + self.backoff(1)
        claimed = []
        with self.store.transaction() as tx:
            for row in tx.due_notifications(now, limit):
                mine = replace(row, attempts=row.attempts + 1, next_attempt_at=now + lease)
                if tx.update_notification(mine, row.attempts):
                    claimed.append(mine)
        return claimed

    def _attempt(self, row: NotificationRecord) -> bool:
        record = json.loads(row.record_json)
        served: set[str] = set(record["delivered_to"])
        errors = []
        for webhook in self.webhooks:
            if webhook.key in served:
                continue
            body, headers = render(row, webhook, self.base_url, self.clock(), self.store.keys)
            try:
                self.deliver(webhook.url, body, headers, self.timeout_s)
            except OSError as e:
                # The URL is not in the message: a Slack URL is a credential.
                errors.append(f"{webhook.format} webhook {webhook.key}: {e}")
                self.stats.failed_attempts += 1
                continue
            served.add(webhook.key)
        now = self.clock()
        record = {**record, "delivered_to": sorted(served), "last_error": "; ".join(errors) or None}
        finished = replace(
            row,
            record_json=canonical_json(record),
            delivered_at=None if errors else now,
            next_attempt_at=now + self.backoff(row.attempts) if errors else row.next_attempt_at,
        )
        with self.store.transaction() as tx:
            tx.update_notification(finished, row.attempts)
        if not errors:
            self.stats.delivered += 1
        return not errors

    def stop(self) -> None:
        self._stop.set()

    def run(self, *, poll_s: float = 1.0, until: Callable[[], bool] | None = None) -> SendStats:
        """Send until stopped (or until ``until()`` says so after a pass)."""
        while not self._stop.is_set():
            try:
                self.send_due()
            except Exception as e:  # a store hiccup must not end the sender; say it, go on
                import sys

                print(f"tether notify: {e}", file=sys.stderr)
            if until is not None and until():
                break
            self._stop.wait(poll_s)
        return self.stats


def pending_count(store: Store) -> int:
    return sum(1 for n in store.list_notifications() if n.delivered_at is None)


def outbox_summary(store: Store) -> dict[str, Any]:
    rows = store.list_notifications()
    return {
        "notifications": len(rows),
        "delivered": sum(1 for n in rows if n.delivered_at is not None),
        "waiting": sum(1 for n in rows if n.delivered_at is None),
    }
