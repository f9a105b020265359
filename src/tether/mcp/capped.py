"""An upstream result over the tool's ``max_result_bytes``, capped before the gate sees it.

The gate cuts what the *model* reads to the tool's limit, but records the result it was
handed: a 40 MB file read would be 40 MB in the ledger (and copied through redaction,
screening and the answer). So the gateway caps the result itself, as soon as it arrives:
the recorded envelope keeps the beginning of its text blocks and of the strings in its
structured content (its shape, so it still validates against the tool's output schema),
names the blocks it left out, and carries the size and SHA-256 of the whole as the server
sent it (the canonical JSON of its ``content`` and ``structuredContent``) — what a client
or an auditor needs to check a copy fetched another way. The client is told, in the
result's ``_meta["io.tether/capped"]`` and in a text block of its own. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tether.core.digest import canonical_json

__all__ = ["CAPPED", "WHOLE", "cap", "cap_contents", "capped_note", "precap"]

CAPPED = "io.tether/capped"
WHOLE = "io.tether/whole"  # a result's ``_meta``: the size and digest of what was cut away
_ROOM = 400  # bytes of a capped envelope's cap kept for its framing and the note


_FIELDS = ("content", "structuredContent", "contents")  # a tool result's, a resource read's


def measure(body: Mapping[str, Any]) -> tuple[int, str]:
    """The size and SHA-256 of a result's canonical JSON (its ``content`` and
    ``structuredContent``, or a resource read's ``contents``), hashed piece by piece rather
    than joined."""
    whole = {k: body[k] for k in _FIELDS if k in body}
    digest = hashlib.sha256()
    size = 0
    for piece in _ENCODER.iterencode(whole):
        raw = piece.encode()
        size += len(raw)
        digest.update(raw)
    return size, "sha256:" + digest.hexdigest()


_ENCODER = json.JSONEncoder(  # canonical_json's settings
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def precap(box: list[str], cap_bytes: int) -> Any:
    """A JSON-RPC line too long to keep whole (the one string in ``box``, taken out so it
    is freed once parsed), parsed: a result with content gets every string cut to
    ``cap_bytes`` and the size and digest of the whole in its ``_meta`` (``cap`` then caps
    it to its tool's limit and reports the whole)."""
    message = json.loads(box.pop())
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not any(
        isinstance(result.get(k), list) for k in ("content", "contents")
    ):
        return message
    size, digest = measure(result)
    for key in _FIELDS:
        if key in result:
            result[key] = _cut(result[key], cap_bytes)
    meta = result.get("_meta")
    result["_meta"] = {
        **(meta if isinstance(meta, dict) else {}),
        WHOLE: {"bytes": size, "sha256": digest},
    }
    return message


def cap(
    body: dict[str, Any], max_bytes: int, marker: str, whole: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``body`` (an envelope: ``content`` blocks, maybe ``structuredContent``) as the ledger
    may keep it: itself when its canonical JSON fits in ``max_bytes``, else capped.
    ``whole``: the size and digest of the result before the transport cut it (``precap``)."""
    if whole is not None and isinstance(whole.get("bytes"), int):
        size, digest = int(whole["bytes"]), str(whole.get("sha256"))
    else:
        whole_body = {k: body[k] for k in ("content", "structuredContent") if k in body}
        if _size(whole_body) <= max_bytes:
            return body
        size, digest = measure(body)
    budget = max(64, max_bytes - _ROOM)
    kept: list[dict[str, Any]] = []
    omitted: list[str] = []
    room = budget // 2 if "structuredContent" in body else budget
    for block in body.get("content") or []:
        text = block.get("text") if block.get("type") == "text" else None
        if not isinstance(text, str):
            omitted.append(str(block.get("type") or "content"))
            continue
        piece = _prefix(text, room)
        room -= len(piece.encode())
        if piece:
            kept.append({**block, "text": piece})
    capped: dict[str, Any] = {marker: 1, "content": kept}
    if "structuredContent" in body:
        structured = _shrunk(body["structuredContent"], budget - _size(kept))
        if structured is None:
            omitted.append("structuredContent")
        else:
            capped["structuredContent"] = structured
    capped[CAPPED] = {
        "bytes": size,
        "sha256": digest,
        "max_bytes": max_bytes,
        "omitted": omitted,
    }
    return capped


def cap_contents(
    body: dict[str, Any], max_bytes: int, whole: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A resource read's ``contents`` as the ledger may keep them: whole when they fit in
    ``max_bytes``, else the beginning of their texts, their blobs left out (named by URI),
    and the size and digest of the whole under ``CAPPED``."""
    if whole is not None and isinstance(whole.get("bytes"), int):
        size, digest = int(whole["bytes"]), str(whole.get("sha256"))
    elif _size(body.get("contents") or []) <= max_bytes:
        return body
    else:
        size, digest = measure(body)
    room = max(64, max_bytes - _ROOM)
    kept: list[dict[str, Any]] = []
    omitted: list[str] = []
    for item in body.get("contents") or []:
        text = item.get("text")
        if not isinstance(text, str):
            omitted.append(str(item.get("uri") or "blob"))
            continue
        piece = _prefix(text, room)
        room -= len(piece.encode())
        kept.append({**item, "text": piece})
    capped = {k: v for k, v in body.items() if k != "contents"}
    capped["contents"] = kept
    capped[CAPPED] = {"bytes": size, "sha256": digest, "max_bytes": max_bytes, "omitted": omitted}
    return capped


def capped_note(info: Mapping[str, Any]) -> str:
    omitted = ", ".join(info.get("omitted") or [])
    return (
        f"[tether: result capped: the server sent {info['bytes']} bytes ({info['sha256']}), "
        f"over this tool's {info['max_bytes']}-byte limit; what is shown is the beginning"
        + (f", without {omitted}" if omitted else "")
        + "]"
    )


def _prefix(text: str, room: int) -> str:
    if room <= 0:
        return ""
    raw = text.encode()
    return text if len(raw) <= room else raw[:room].decode(errors="ignore")


def _size(value: Any) -> int:
    return len(canonical_json(value).encode())


def _shrunk(value: Any, room: int) -> Any:
    """``value`` with every string cut to the same length, the longest length that fits in
    ``room``; None when even short strings do not fit."""
    limit = max(room, 16)
    while limit >= 16:
        candidate = _cut(value, limit)
        if _size(candidate) <= room:
            return candidate
        limit //= 2
    return None


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _prefix(value, limit)
    if isinstance(value, Mapping):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value]
    return value
