"""Turning a provider's HTTP error into one sentence: what it said, and what to check."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_COMMON_HINTS = {
    400: "check the messages, tools and parameters sent",
    401: "check the API key",
    403: "check that the API key may use this model",
    404: "check the model name and the base URL",
    408: "the request timed out; try again",
    429: "rate limit or quota reached; wait and try again, or check the account's limits",
}


def hint(status: int, extra: Mapping[int, str] | None = None) -> str:
    hints = {**_COMMON_HINTS, **(extra or {})}
    if status in hints:
        return hints[status]
    if status >= 500:
        return "the provider failed; try again later"
    return "check the request and the provider's status"


def short(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def api_message(body: Any, message: str) -> str:
    """The provider's own error text (from an SDK status error's ``body`` and ``message``),
    without the SDK's "Error code: 401 - " prefix."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return short(error["message"])
    return short(re.sub(r"^Error code: \d+ - ", "", message))


def retryable_status(status: int) -> bool:
    """Whether asking again may get another answer: a timeout, a conflict, a rate limit or
    the provider's own failure (the statuses the providers' SDKs retry themselves)."""
    return status in (408, 409, 429) or status >= 500
