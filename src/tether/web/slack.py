"""Deciding from Slack: the interactive message's buttons (Approve, Deny with a reason, Open)
post to ``/api/slack/interactions``.

A request counts only if Slack signed it: ``X-Slack-Signature`` is ``v0=`` and the
HMAC-SHA256, under the app's signing secret, of ``v0:{X-Slack-Request-Timestamp}:{body}``;
the timestamp is at most five minutes from now, and a signature already seen is a replay and
is refused. Whoever clicked is not who decides: the Slack user id must be linked to a
registered approver (``tether serve --slack-user U123=alice``), and the decision is that
approver's, under every rule the inbox applies (their tenants, the approvers the policy
names, no self-approval). An irreversible or admin call is never approved from a chat
message: it needs the typed confirmation on its page.

When a decision is made here, the message is replaced in place through the ``response_url``
Slack sent with the click; a decision made anywhere else (the page, the API, the command line
through this inbox) updates every message a click on that approval has shown us.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from tether.core.approvals import Approval
from tether.web import triage
from tether.web.auth import identity_by_name
from tether.web.context import Site, error_json
from tether.web.service import WebError

WINDOW_S = 300.0
APPROVE, DENY, OPEN = "tether_approve", "tether_deny", "tether_open"
REASON_BLOCK, REASON_INPUT = "tether_reason", "reason"


def slack_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret, b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256)
    return "v0=" + mac.hexdigest()


@dataclass
class SlackVerifier:
    """Checks Slack's signature, its age, and that it was not seen before."""

    secret: bytes
    clock: Callable[[], float] = time.time
    _seen: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def problem(self, timestamp: str | None, signature: str | None, body: bytes) -> str | None:
        """Why the request is refused, or None if Slack sent it just now, once."""
        if not timestamp or not signature:
            return "the request is not signed by Slack"
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return "the request's timestamp is not a time"
        now = self.clock()
        if abs(now - float(timestamp)) > WINDOW_S:
            return "the request is older than five minutes"
        expected = slack_signature(self.secret, timestamp, body)
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            return "the request's signature is not Slack's"
        with self._lock:
            for seen, at in list(self._seen.items()):
                if now - at > 2 * WINDOW_S:
                    del self._seen[seen]
            if signature in self._seen:
                return "the request was already received (a replay)"
            self._seen[signature] = now
        return None


def read_payload(body: bytes) -> dict[str, Any] | None:
    """The interaction payload Slack posts as ``payload=<json>`` (a form)."""
    try:
        values = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = json.loads(values["payload"][0])
    except (ValueError, KeyError, IndexError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def typed_reason(payload: Mapping[str, Any]) -> str | None:
    """The reason typed in the message's input, if any."""
    values = (payload.get("state") or {}).get("values") or {}
    for block in values.values() if isinstance(values, Mapping) else ():
        found = block.get(REASON_INPUT) if isinstance(block, Mapping) else None
        if isinstance(found, Mapping) and isinstance(found.get("value"), str):
            text = found["value"].strip()
            return text[:2000] or None
    return None


def decided_message(approval: Approval) -> dict[str, Any]:
    """What replaces the interactive message once the approval is decided."""
    who = approval.approver or "nobody"
    what = {
        "approved": f"Approved by `{code(who)}`",
        "used": f"Approved by `{code(who)}` (and run)",
        "denied": f"Denied by `{code(who)}`",
        "edited": f"Approved with edited arguments by `{code(who)}`",
        "expired": "Expired before anyone decided",
    }.get(approval.status.value, approval.status.value)
    text = f"{what}: `{code(approval.tool)}` in tenant `{code(approval.tenant)}`."
    return {"replace_original": True, "text": text, "blocks": [], "unfurl_links": False}


def code(text: object) -> str:
    """Text for inside Slack inline code: no backtick, no Slack control characters."""
    clean = triage.visible_controls(text).replace("`", "'").replace("\n", " ")
    return clean.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")[:100]


def ephemeral(text: str) -> dict[str, Any]:
    return {"response_type": "ephemeral", "replace_original": False, "text": text}


@dataclass
class SlackReplies:
    """Where messages about an approval can be replaced: the ``response_url`` of each
    click on it (Slack accepts a few replacements within half an hour)."""

    allowed_hosts: tuple[str, ...] = ("hooks.slack.com",)
    post: Callable[[str, dict[str, Any]], None] | None = None
    _urls: dict[str, list[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        local = parts.hostname in ("127.0.0.1", "localhost")
        return (parts.scheme == "https" or local) and parts.hostname in self.allowed_hosts

    def remember(self, approval_id: str, url: object) -> None:
        if not isinstance(url, str) or not self.allowed(url):
            return
        with self._lock:
            urls = self._urls.setdefault(approval_id, [])
            if url not in urls:
                urls.append(url)
            if len(self._urls) > 10_000:
                self._urls.pop(next(iter(self._urls)))

    def decided(self, approval: Approval) -> None:
        """Replace every message shown about ``approval`` (a listener of the inbox)."""
        with self._lock:
            urls = self._urls.pop(approval.approval_id, [])
        if not urls:
            return
        message = decided_message(approval)

        def send() -> None:
            for url in urls:
                # The decision stands either way: a stale chat message is only stale.
                with contextlib.suppress(OSError):
                    (self.post or post_json)(url, message)

        # Apart from the request: Slack wants its answer within three seconds, and a
        # decision on the page must not wait on Slack.
        threading.Thread(target=send, name="tether-slack-reply", daemon=True).start()


def post_json(url: str, message: Mapping[str, Any]) -> None:
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        response.read()


def add_slack(api: FastAPI, site: Site) -> None:
    """The interactions route, if the inbox was given Slack's signing secret."""
    config = site.config
    if not config.slack_signing_secret:
        return
    verifier = SlackVerifier(config.slack_signing_secret, clock=config.clock)
    replies = SlackReplies(allowed_hosts=config.slack_reply_hosts)
    site.inbox.listeners.append(replies.decided)

    @api.post("/api/slack/interactions", include_in_schema=False)
    async def interaction(request: Request) -> Response:
        body = await request.body()
        problem = verifier.problem(
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
            body,
        )
        if problem is not None:
            return error_json(WebError(401, "slack_signature", problem))
        payload = read_payload(body)
        if payload is None:
            return error_json(WebError(400, "invalid_json", "no Slack payload in the body"))
        answer = await run_in_threadpool(act, payload)
        return JSONResponse(answer)

    def act(payload: Mapping[str, Any]) -> dict[str, Any]:
        actions = payload.get("actions") or []
        action = actions[0] if actions and isinstance(actions[0], Mapping) else {}
        kind, approval_id = action.get("action_id"), action.get("value")
        if kind not in (APPROVE, DENY, OPEN) or not isinstance(approval_id, str):
            return ephemeral("That is not a tether button.")
        user = (payload.get("user") or {}).get("id")
        name = config.slack_users.get(user) if isinstance(user, str) else None
        who = identity_by_name(site.store, name, "slack") if name else None
        if who is None:
            # Never "whoever clicked": an unlinked Slack user decides nothing.
            return ephemeral(
                "Your Slack account is not linked to a tether approver; ask an administrator "
                "to add --slack-user YOUR_SLACK_ID=NAME, or decide in the inbox."
            )
        try:
            approval = site.inbox.get(who, approval_id)
            replies.remember(approval.approval_id, payload.get("response_url"))
            if kind == OPEN:
                return {}
            if kind == APPROVE and site.inbox.details(who, approval)["risk"] in (
                triage.CONFIRM_TIERS
            ):
                return ephemeral(
                    "This call cannot be undone (or administers something): approve it on its "
                    "page, where it asks you to confirm."
                )
            reason = typed_reason(payload)
            if kind == DENY and reason is None:
                return ephemeral("Type the reason first (the model is told), then Deny.")
            site.inbox.decide(who, approval.approval_id, approve=kind == APPROVE, reason=reason)
        except WebError as e:
            return ephemeral(f"Not decided: {e.message}")
        return {}
