"""What the store holds now, as numbers: approvals by tool and status (pending among them),
how long decided ones waited, effects by tool and status (unknown among them). Read at a
scrape (``tether serve``'s ``/metrics``) or an OpenTelemetry collection (``watch``), so every
process's calls are counted, not only this one's.

Each read lists the approvals and effects (two queries); a scrape every 15-60 s is the use it
is made for, not a per-call path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.ledger import Effect, EffectStatus
from tether.telemetry.otel import instruments, metrics_api

__all__ = ["Listing", "StoreState", "read_state", "verifications", "watch"]


class Listing(Protocol):
    """The part of a store (``tether.store.Store``) the numbers are read from."""

    def list_approvals(
        self, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]: ...

    def list_effects(self, run_id: str | None = None) -> list[Effect]: ...


@dataclass(frozen=True)
class StoreState:
    approvals: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, status)
    effects: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, status)
    waits: tuple[float, ...] = ()  # seconds from request to decision, of decided approvals

    def pending(self) -> dict[str, int]:
        return _where(self.approvals, ApprovalStatus.PENDING.value)

    def unknown(self) -> dict[str, int]:
        return _where(self.effects, EffectStatus.UNKNOWN.value)


def _where(counts: Counter[tuple[str, str]], status: str) -> dict[str, int]:
    return {tool: n for (tool, s), n in sorted(counts.items()) if s == status}


def read_state(store: Listing) -> StoreState:
    approvals = store.list_approvals()
    effects = store.list_effects()
    return StoreState(
        approvals=Counter((a.tool, a.status.value) for a in approvals),
        effects=Counter((e.tool_name, e.status.value) for e in effects),
        waits=tuple(_waits(approvals)),
    )


def _waits(approvals: Iterable[Approval]) -> Iterable[float]:
    for a in approvals:
        if a.decided_at is not None and a.status is not ApprovalStatus.EDITED:
            yield max(0.0, a.decided_at - a.created_at)


# Audit verifications this process ran, by result: rare (not a per-call path), so kept
# always, for ``/metrics``; the OpenTelemetry counter is ``tether.audit.verifications``.
_verified: Counter[str] = Counter()


def count_verification(intact: bool) -> None:
    _verified["intact" if intact else "broken"] += 1
    meters = instruments()
    if meters is not None:
        meters.audit_verifications.add(1, {"tether.audit.result": "intact" if intact else "broken"})


def verifications() -> dict[str, int]:
    return {"intact": _verified["intact"], "broken": _verified["broken"]}


def watch(store: Listing, meter_provider: Any = None) -> bool:
    """Report approvals pending and effects unknown now as OpenTelemetry observable gauges
    (``tether.approvals.pending``, ``tether.effects.unknown``, by tool), read from ``store``
    at each collection. False if the metrics API is not installed."""
    api = metrics_api()
    if api is None:
        return False
    provider = meter_provider or api.get_meter_provider()
    meter = provider.get_meter("tether")

    def pending(_: Any) -> list[Any]:
        state = read_state(store)
        return [api.Observation(n, {"gen_ai.tool.name": t}) for t, n in state.pending().items()]

    def unknown(_: Any) -> list[Any]:
        state = read_state(store)
        return [api.Observation(n, {"gen_ai.tool.name": t}) for t, n in state.unknown().items()]

    meter.create_observable_gauge("tether.approvals.pending", [pending], unit="{approval}")
    meter.create_observable_gauge("tether.effects.unknown", [unknown], unit="{effect}")
    return True
