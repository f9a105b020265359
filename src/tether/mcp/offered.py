"""A tool as the gateway offers it, and a session's calls waiting on approvals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.mcp.config import ToolConfig
from tether.mcp.pins import PinnedTool
from tether.tools.registry import Manifest


@dataclass
class Offered:
    """A configured, pinned tool as the gateway offers it."""

    config: ToolConfig
    pinned: PinnedTool
    manifest: Manifest
    blocked: str | None = None  # why it is refused now (drift, gone from the server)

    def listing(self) -> dict[str, Any]:
        """The tool as the client is shown it: as pinned, under the offered name — output
        schema included, since results pass through as the server gave them."""
        snap = self.pinned.snapshot
        tool: dict[str, Any] = {
            "name": self.config.name,
            "description": snap.get("description") or "",
            "inputSchema": dict(self.manifest.parameters),
        }
        for key in ("title", "annotations", "outputSchema"):
            if snap.get(key):
                tool[key] = snap[key]
        return tool


@dataclass
class AskedCalls:
    # (tool, argument digest) -> the call that asked for approval and has not run yet.
    asked: dict[tuple[str, str], str] = field(default_factory=dict)
    # A new request that repeats an asked call is that call: its own call id -> the asked
    # call's (kept for the session, so a retry of the request replays the same call).
    aliases: dict[str, str] = field(default_factory=dict)
