"""The Prometheus exposition of tether's numbers, through ``prometheus_client`` (the ``[web]``
extra): the store's state (``tether.telemetry.state``) and this process's audit verifications,
collected afresh at each scrape. ``tether serve`` answers ``/metrics`` with this text
(``tether.web.metrics``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from tether.extras import missing
from tether.telemetry.otel import DECISION_BUCKETS
from tether.telemetry.state import StoreState

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
except ModuleNotFoundError as e:  # pragma: no cover - exercised without the extra
    raise missing("web", "tether's /metrics", e) from e

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["CONTENT_TYPE", "exposition"]

# The text format every Prometheus-compatible scraper reads.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class _Snapshot:
    """A collector over numbers already read: the store's state and the verifications."""

    def __init__(self, state: StoreState, verifications: Mapping[str, int]) -> None:
        self.state, self.verifications = state, verifications

    def collect(self) -> Iterator[Metric]:
        state = self.state
        approvals = GaugeMetricFamily(
            "tether_approvals",
            "Approvals in the store by tool and status.",
            labels=["tool", "status"],
        )
        for (tool, status), n in sorted(state.approvals.items()):
            approvals.add_metric([tool, status], n)
        yield approvals
        pending = GaugeMetricFamily(
            "tether_approvals_pending",
            "Approvals waiting for a decision now, by tool.",
            labels=["tool"],
        )
        for tool, n in state.pending().items():
            pending.add_metric([tool], n)
        yield pending
        waits = sorted(state.waits)
        buckets = [(repr(float(b)), sum(1 for w in waits if w <= b)) for b in DECISION_BUCKETS]
        yield HistogramMetricFamily(
            "tether_approval_time_to_decision_seconds",
            "From an approval's request to its decision, over the approvals in the store.",
            buckets=[*buckets, ("+Inf", len(waits))],
            sum_value=float(sum(waits)),
        )
        effects = GaugeMetricFamily(
            "tether_effects", "Effects in the ledger by tool and status.", labels=["tool", "status"]
        )
        for (tool, status), n in sorted(state.effects.items()):
            effects.add_metric([tool, status], n)
        yield effects
        unknown = GaugeMetricFamily(
            "tether_effects_unknown",
            "Effects whose outcome is unknown now (to reconcile), by tool.",
            labels=["tool"],
        )
        for tool, n in state.unknown().items():
            unknown.add_metric([tool], n)
        yield unknown
        verified = CounterMetricFamily(
            "tether_audit_verifications",
            "Audit log verifications this process ran, by result.",
            labels=["result"],
        )
        for result, n in sorted(self.verifications.items()):
            verified.add_metric([result], n)
        yield verified


def exposition(state: StoreState, verifications: Mapping[str, int]) -> str:
    """The text a scraper reads: every family above, from these numbers."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(state, verifications))
    return generate_latest(registry).decode("utf-8")
