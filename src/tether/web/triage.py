"""What the inbox's rows say about each approval, and how they are filtered and sorted
(pure: values in, values out). Also the text helpers every page uses for strings a model or
a user chose: bidirectional isolation, and a next-page path that cannot leave the inbox."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from markupsafe import Markup, escape

# Most consequential first: the order "risk" sorts by.
TIERS = ("irreversible", "admin", "write", "sensitive_read", "read")
CONFIRM_TIERS = frozenset({"irreversible", "admin"})
SORTS = ("expires", "newest", "risk", "tool")
SUMMARY_CHARS = 140

# Characters that reorder the text around them (embeddings, overrides, isolates, marks):
# shown as their code point, so a run id or a name cannot make the page read backwards.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible_controls(value: object) -> str:
    text = _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", str(value))
    return _CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def isolate(value: object) -> Markup:
    """``value`` as text inside ``<bdi>``: escaped, its direction its own, and any
    reordering control made visible (a Jinja filter, ``| iso``)."""
    if value is None:
        return Markup("")
    return Markup("<bdi>") + escape(visible_controls(value)) + Markup("</bdi>")


def one_line(value: object, limit: int = SUMMARY_CHARS) -> str:
    text = " ".join(visible_controls(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def summary(arguments: Mapping[str, Any], limit: int = SUMMARY_CHARS) -> str:
    """The arguments in one line (already masked where sensitive): ``name=value, ...``."""
    parts = []
    for name, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{name}={shown}")
    return one_line(", ".join(parts), limit)


def time_left(expires_at: float, now: float) -> str:
    left = expires_at - now
    if left <= 0:
        return "expired"
    minutes = int(left // 60)
    if minutes >= 60:
        return f"{minutes // 60}h {minutes % 60}m"
    return f"{minutes}m {int(left % 60)}s" if minutes else f"{int(left)}s"


def tier_rank(tier: str | None) -> int:
    return TIERS.index(tier) if tier in TIERS else len(TIERS)


def filtered(
    rows: Sequence[Mapping[str, Any]], query: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """``rows`` that match every filter in ``query`` (tier, tool, run, tenant, and ``q``:
    text anywhere in the row), sorted by
    ``query["sort"]`` (soonest expiry first by default)."""
    wanted = {
        "risk": query.get("tier") or None,
        "tool": query.get("tool") or None,
        "run_id": query.get("run") or None,
        "tenant": query.get("tenant") or None,
    }
    out = [r for r in rows if all(v is None or r.get(k) == v for k, v in wanted.items())]
    text = (query.get("q") or "").strip().casefold()
    if text:  # words anywhere in what a row shows
        out = [r for r in out if text in _searchable(r)]
    order = query.get("sort") if query.get("sort") in SORTS else "expires"
    if order == "newest":
        out.sort(key=lambda r: -float(r["created_at"]))
    elif order == "risk":
        out.sort(key=lambda r: (tier_rank(r.get("risk")), float(r["expires_at"])))
    elif order == "tool":
        out.sort(key=lambda r: (str(r["tool"]), float(r["expires_at"])))
    else:
        out.sort(key=lambda r: float(r["expires_at"]))
    return out


def _searchable(row: Mapping[str, Any]) -> str:
    keys = ("tool", "resource", "summary", "why", "requester", "tenant", "run_id")
    return " ".join(str(row.get(k, "")) for k in keys).casefold()


def choices(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """What each filter can be set to: the values the rows hold."""
    rows = list(rows)
    tiers = {str(r["risk"]) for r in rows if r.get("risk")}
    return {
        "tier": sorted(tiers, key=tier_rank),
        "tool": sorted({str(r["tool"]) for r in rows}),
        "run": sorted({str(r["run_id"]) for r in rows}),
        "tenant": sorted({str(r["tenant"]) for r in rows}),
    }


_NEXT_PREFIXES = ("/approvals/", "/runs/", "/history")


def safe_next(value: str | None) -> str:
    """Where to go after signing in: ``value`` if it is a path of this inbox (relative,
    printable ASCII, no scheme, host or backslash), else ``/``. Never an open redirect."""
    if not value or len(value) > 600 or not value.startswith("/"):
        return "/"
    if value.startswith("//") or "\\" in value or not all(33 <= ord(c) < 127 for c in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    if parts.path != "/" and not parts.path.startswith(_NEXT_PREFIXES):
        return "/"
    return value
