"""What ``tether mcp pin`` and ``tether mcp inspect`` show an operator: every upstream
tool, whether the config offers it, its tier, its pin status, its poisoning findings and
what the policy would do with a call to it. ``survey`` connects; the rest is pure."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TextIO

from tether.core.verdicts import Verdict
from tether.mcp.config import GatewayConfig, ToolConfig, effective_risk
from tether.mcp.pins import (
    Lock,
    PinnedTool,
    changes,
    poisoning_findings,
    snapshot,
    tool_digest,
)
from tether.mcp.reads import read_config, read_snapshots
from tether.mcp.upstream import Upstream
from tether.policy.rules import Policy
from tether.tools.registry import Risk

__all__ = ["Reviewed", "pin", "policy_verdict", "review", "survey"]


@dataclass(frozen=True, kw_only=True)
class Reviewed:
    key: str  # server/upstream name
    server: str
    upstream_name: str
    config: ToolConfig | None  # None: on the server, not in the config (never offered)
    snapshot: dict[str, Any] | None  # None: in the config, not on the server
    digest: str | None
    pinned: PinnedTool | None
    findings: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.config is None:
            return "not offered (not in the config)"
        if self.snapshot is None:
            return "missing: the server does not offer it"
        if self.pinned is None:
            return "not pinned"
        if self.pinned.digest == self.digest:
            return "pinned"
        return "drifted: " + ", ".join(changes(self.pinned.snapshot, self.snapshot))

    def risk(self) -> Risk | None:
        if self.config is None:
            return None
        notes = (self.snapshot or {}).get("annotations")
        return effective_risk(self.config.risk, notes)

    def to_dict(self, policy: Policy) -> dict[str, Any]:
        risk = self.risk()
        return {
            "tool": self.key,
            "offered_as": self.config.name if self.config is not None else None,
            "risk": risk.value if risk is not None else None,
            "configured_risk": self.config.risk.value if self.config is not None else None,
            "pin": self.status,
            "digest": self.digest,
            "pinned_digest": self.pinned.digest if self.pinned is not None else None,
            "findings": list(self.findings),
            "policy": policy_verdict(policy, self) if self.config is not None else None,
            "annotations": (self.snapshot or {}).get("annotations"),
        }


def policy_verdict(policy: Policy, reviewed: Reviewed) -> str:
    """What the policy does with a call to the tool, before its arguments are known."""
    assert reviewed.config is not None
    risk = reviewed.risk()
    assert risk is not None
    name = reviewed.config.name
    rule = policy.tools.get(name)
    if rule is not None and rule.verdict is not None:
        verdict, why = rule.verdict, f"tool rule '{name}'"
    else:
        verdict, why = policy.tiers.get(risk, Verdict.DENY), f"tier {risk.value}"
    if risk is Risk.IRREVERSIBLE and verdict is Verdict.ALLOW:
        verdict, why = Verdict.ASK, "irreversible tools always ask"
    text = f"{verdict.value} ({why})"
    if verdict is Verdict.ASK:
        text += f"; approvers: {', '.join(sorted(policy.approvers_for(name))) or 'none'}"
    if rule is not None and rule.constraints:
        text += "; constraints on " + ", ".join(sorted({c.argument for c in rule.constraints}))
    if reviewed.config.required_scope:
        text += f"; needs scope {reviewed.config.required_scope}"
    return text


async def survey(
    config: GatewayConfig, errlog: TextIO | None = None
) -> dict[str, tuple[Upstream, dict[str, dict[str, Any]]]]:
    """Connect to every upstream and take its tools' snapshots (server id -> upstream,
    upstream name -> snapshot)."""
    found: dict[str, tuple[Upstream, dict[str, dict[str, Any]]]] = {}
    async with AsyncExitStack() as stack:
        for sid, server in config.servers.items():
            upstream = Upstream(server, errlog=errlog)
            await upstream.connect(stack)
            snaps = {
                name: snapshot(
                    tool,
                    server_id=sid,
                    server_name=upstream.server_name,
                    version=upstream.server_version,
                )
                for name, tool in upstream.tools.items()
            }
            snaps.update(read_snapshots(upstream))  # prompts and templates, if offered
            found[sid] = (upstream, snaps)
    return found


def review(
    config: GatewayConfig,
    lock: Lock,
    snapshots: dict[str, dict[str, dict[str, Any]]],
) -> list[Reviewed]:
    """Every tool on every server, and every configured tool the server lacks."""
    rows: list[Reviewed] = []
    for sid, server in config.servers.items():
        snaps = snapshots.get(sid, {})
        for name in sorted(set(snaps) | set(server.tools)):
            snap = snaps.get(name)
            key = f"{sid}/{name}"
            rows.append(
                Reviewed(
                    key=key,
                    server=sid,
                    upstream_name=name,
                    config=server.tools.get(name) or read_config(server, name),
                    snapshot=snap,
                    digest=tool_digest(snap) if snap is not None else None,
                    pinned=lock.get(key),
                    findings=tuple(poisoning_findings(snap)) if snap is not None else (),
                )
            )
    return rows


def pin(
    rows: Iterable[Reviewed], lock: Lock, *, accept: set[str], now: float
) -> tuple[Lock, list[str], list[str]]:
    """The new lock: every configured tool the server offers, pinned as it is now, except
    those with poisoning findings an operator has not accepted (``accept`` holds their
    keys or offered names). Returns the lock, what was pinned, and the problems."""
    tools = dict(lock.tools)
    pinned: list[str] = []
    problems: list[str] = []
    for row in rows:
        if row.config is None:
            continue
        if row.snapshot is None or row.digest is None:
            problems.append(f"{row.key}: the server does not offer it (check the config)")
            continue
        accepted = row.key in accept or row.config.name in accept
        if row.findings and not accepted:
            problems.append(
                f"{row.key}: not pinned, it looks poisoned: {'; '.join(row.findings)} "
                f"(if you have reviewed it: --accept {row.key})"
            )
            tools.pop(row.key, None)
            continue
        old = tools.get(row.key)
        if old is not None and old.digest == row.digest:
            pinned.append(row.key)
            continue
        tools[row.key] = PinnedTool(
            key=row.key,
            digest=row.digest,
            snapshot=row.snapshot,
            pinned_at=now,
            accepted_findings=row.findings,
        )
        pinned.append(row.key)
    return Lock(tools), pinned, problems
