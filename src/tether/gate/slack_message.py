"""The Slack message announcing an approval: its text as inline code (never formatted or
linked) and its interactive blocks (a reason to type, Approve, Deny, Open), which post to
the inbox's ``/api/slack/interactions`` (``tether.web.slack``)."""

from __future__ import annotations

from typing import Any


def slack_code(text: object) -> str:
    """``text`` as Slack inline code: not formatted, not linked. A backtick would end the
    code span, and <, >, & are Slack's control characters: gone or escaped."""
    clean = str(text).replace("`", "'").replace("\n", " ")
    clean = clean.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"`{clean[:100]}`"


def slack_blocks(text: str, approval_id: str, link: str | None) -> list[dict[str, Any]]:
    """The interactive message: its text, a reason to type, and Approve / Deny / Open (the
    buttons post to the inbox's ``/api/slack/interactions``, see ``tether.web.slack``)."""
    buttons: list[dict[str, Any]] = [
        {
            "type": "button",
            "action_id": "tether_approve",
            "style": "primary",
            "text": {"type": "plain_text", "text": "Approve"},
            "value": approval_id,
        },
        {
            "type": "button",
            "action_id": "tether_deny",
            "style": "danger",
            "text": {"type": "plain_text", "text": "Deny"},
            "value": approval_id,
        },
    ]
    if link:
        buttons.append(
            {
                "type": "button",
                "action_id": "tether_open",
                "text": {"type": "plain_text", "text": "Open"},
                "url": link,
                "value": approval_id,
            }
        )
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "input",
            "block_id": "tether_reason",
            "optional": True,
            "label": {"type": "plain_text", "text": "Reason (to deny: the model is told)"},
            "element": {"type": "plain_text_input", "action_id": "reason", "max_length": 2000},
        },
        {"type": "actions", "block_id": "tether_decide", "elements": buttons},
    ]
