"""``tether mcp init``: a first gateway config written from what a server lists now.

Every tool the server offers gets a table, with a risk *guessed* from its annotations and
marked for review: ``readOnlyHint: true`` guesses ``read``, ``destructiveHint: true``
``irreversible``, anything else ``write`` (a tool that says nothing is not taken for a
read). A tool whose schema has a ``tenant`` (or ``tenant_id``) argument is tenant-scoped on
it; the others say ``tenant_scoped = false``, so the operator sees the choice. A tool whose
text looks poisoned is written commented out, with the findings: offering it is a decision
to make after reading it. The text is pure (``render``); the CLI connects, checks the result
with the same parser ``tether mcp serve`` uses, writes it and pins it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.mcp.pins import poisoning_findings

__all__ = ["Scaffold", "guess_risk", "render"]

TENANT_ARGUMENTS = ("tenant", "tenant_id")
_OFFERABLE = re.compile(r"^[A-Za-z0-9_-]+$")  # what config.py takes as an offered name
_OFFERABLE_CHARS = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, kw_only=True)
class Scaffold:
    server_id: str
    command: str | None
    args: Sequence[str]
    url: str | None
    db: str
    subject: str
    tenant: str
    approvers: Sequence[str]
    snapshots: Mapping[str, Mapping[str, Any]]  # upstream name -> pinned fields
    server_name: str | None = None
    server_version: str | None = None


def guess_risk(annotations: Mapping[str, Any] | None) -> tuple[str, str]:
    """The tier to start from and why (the server's hints, which the operator checks)."""
    notes = annotations or {}
    if notes.get("destructiveHint") is True and notes.get("readOnlyHint") is not True:
        return "irreversible", "the server says destructiveHint"
    if notes.get("readOnlyHint") is True:
        return "read", "the server says readOnlyHint"
    if notes.get("readOnlyHint") is False:
        return "write", "the server says it is not read-only"
    return "write", "the server gives no hints"


def _s(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=True)


def render(s: Scaffold) -> str:
    """The config file's text."""
    who = f"{s.server_name or '?'} {s.server_version or ''}".strip()
    lines = [
        f"# A tether gateway for MCP server '{s.server_id}' ({who}), written by",
        "# `tether mcp init` from the tools it listed. REVIEW every tool table: each risk",
        "# is a guess from the server's own hints. `tether mcp inspect` shows what the",
        "# policy does with each; after a change, `tether mcp pin` records it again.",
        "",
        f"principal = {{ subject = {_s(s.subject)}, tenant = {_s(s.tenant)} }}"
        "   # who calls over stdio",
        "",
        "[gateway]",
        f"db = {_s(s.db)}   # the gateway's store: TETHER_DB for `tether approvers add` etc.",
        "",
        "[policy]",
        'version = "gw-1"',
        f"approvers = [{', '.join(_s(a) for a in s.approvers)}]",
        "",
        f"[servers.{s.server_id}]",
    ]
    if s.url is not None:
        lines.append(f"url = {_s(s.url)}")
    else:
        lines.append(f"command = {_s(s.command or '')}")
        lines.append(f"args = [{', '.join(_s(a) for a in s.args)}]")
    for name in sorted(s.snapshots):
        snap = s.snapshots[name]
        risk, why = guess_risk(snap.get("annotations"))
        properties = (snap.get("inputSchema") or {}).get("properties") or {}
        tenant = next((t for t in TENANT_ARGUMENTS if t in properties), None)
        table = [
            f"[servers.{s.server_id}.tools.{_key(name)}]",
            f"risk = {_s(risk)}   # REVIEW: guessed, {why}",
            f"tenant_path = {_s(tenant)}" if tenant else "tenant_scoped = false",
        ]
        if not _OFFERABLE.match(name):
            table.insert(1, f"name = {_s(_OFFERABLE_CHARS.sub('_', name) or 'tool')}")
        findings = poisoning_findings(snap)
        lines.append("")
        if findings:
            lines.append(f"# NOT OFFERED: '{name}' looks poisoned ({'; '.join(findings)[:300]}).")
            lines.append("# Read it (`tether mcp inspect`); to offer it anyway, uncomment")
            lines.append(f"# and pin it with `tether mcp pin --accept {s.server_id}/{name}`.")
            lines += ["# " + line for line in table]
        else:
            lines += table
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    """A tool name as a TOML table key: bare when it can be, quoted otherwise."""
    return name if _OFFERABLE.match(name) else _s(name)
