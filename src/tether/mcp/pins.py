"""Pins: what an operator reviewed of each upstream tool, and whether it is still that.

A tool's digest is SHA-256 over the canonical JSON of everything a model or the gate is
shown of it: name, title, description, input and output schemas, annotations, and the
server (its id in the config, the name and version it reports). Pinning only the
description would let a server widen a schema, drop a ``readOnlyHint`` or quietly ship a
new version under a reviewed description; pinning all of it makes any of those drift.

The lock file (``gateway.lock.json`` beside ``gateway.toml``) keeps each pinned tool's
digest and the snapshot it was computed from, so a drifted tool's error can say what
changed rather than only that something did. It is written whole, to a temporary file
renamed over the old one: a pin that fails half-way leaves the previous lock intact.

``poisoning_findings`` (from ``tether.mcp.poisoning``, re-exported here) says whether a
tool's text is addressed to the model. Everything here is pure except ``read_lock`` and
``write_lock``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.digest import canonical_json, sha256_hex
from tether.errors import ConfigurationError
from tether.mcp.poisoning import poisoning_findings

__all__ = [
    "Lock",
    "PinnedTool",
    "changes",
    "poisoning_findings",
    "read_lock",
    "snapshot",
    "tool_digest",
    "write_lock",
]

LOCK_FORMAT = 1
SNAPSHOT_FIELDS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "server",
    "version",
)


def snapshot(
    tool: Mapping[str, Any], *, server_id: str, server_name: str | None, version: str | None
) -> dict[str, Any]:
    """The pinned fields of a tool as its server lists it (``tool`` is the wire form of an
    MCP ``Tool``: camelCase keys), plus which server offers it."""
    return {
        "name": tool.get("name"),
        "title": tool.get("title"),
        "description": tool.get("description"),
        "inputSchema": tool.get("inputSchema"),
        "outputSchema": tool.get("outputSchema"),
        "annotations": tool.get("annotations"),
        "server": {"id": server_id, "name": server_name},
        "version": version,
    }


def tool_digest(snap: Mapping[str, Any]) -> str:
    return "sha256:" + sha256_hex(canonical_json({k: snap.get(k) for k in SNAPSHOT_FIELDS}))


def changes(pinned: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between two snapshots, as the paths that changed (``inputSchema.
    properties.path.type``), most specific first within each field; at most 10."""
    found: list[str] = []
    for key in SNAPSHOT_FIELDS:
        _diff(pinned.get(key), current.get(key), key, found)
    return found[:10] + ([f"and {len(found) - 10} more"] if len(found) > 10 else [])


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if a == b:
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k} added")
            elif k not in b:
                out.append(f"{path}.{k} removed")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
        return
    out.append(f"{path} changed")


# -- the lock file ---------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PinnedTool:
    key: str  # server/upstream name
    digest: str
    snapshot: Mapping[str, Any]
    pinned_at: float
    accepted_findings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "pinned_at": self.pinned_at,
            "accepted_findings": list(self.accepted_findings),
            "snapshot": dict(self.snapshot),
        }


@dataclass(frozen=True)
class Lock:
    tools: Mapping[str, PinnedTool]

    def get(self, key: str) -> PinnedTool | None:
        return self.tools.get(key)


def read_lock(path: Path) -> Lock:
    """The lock at ``path``; an empty lock if there is none yet (nothing is pinned)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Lock({})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigurationError(
            f"lock file {path} cannot be read ({e}); re-create it with `tether mcp pin`"
        ) from e
    if not isinstance(raw, dict) or raw.get("format") != LOCK_FORMAT:
        raise ConfigurationError(
            f"lock file {path} is not a tether MCP lock (format {LOCK_FORMAT}); re-create it "
            "with `tether mcp pin`"
        )
    tools: dict[str, PinnedTool] = {}
    for key, entry in (raw.get("tools") or {}).items():
        try:
            snap = entry["snapshot"]
            pinned = PinnedTool(
                key=key,
                digest=str(entry["digest"]),
                snapshot=snap,
                pinned_at=float(entry["pinned_at"]),
                accepted_findings=tuple(entry.get("accepted_findings") or ()),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigurationError(
                f"lock file {path}: entry {key!r} is malformed ({e!r}); re-pin with "
                "`tether mcp pin`"
            ) from e
        if tool_digest(snap) != pinned.digest:
            # A hand-edited snapshot must not become what the gateway offers.
            raise ConfigurationError(
                f"lock file {path}: entry {key!r} does not match its own digest (edited by "
                "hand?); re-pin with `tether mcp pin`"
            )
        tools[key] = pinned
    return Lock(tools)


def write_lock(path: Path, lock: Lock) -> None:
    body = {
        "format": LOCK_FORMAT,
        "tools": {k: lock.tools[k].to_dict() for k in sorted(lock.tools)},
    }
    text = json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
