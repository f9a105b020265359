"""The Prometheus text exposition format (0.0.4) of tether's numbers, written by hand: the
store's state (``tether.telemetry.state``) and this process's audit verifications. A few
gauges and one histogram need no client library; ``tether serve`` answers ``/metrics`` with
this text (``tether.web.metrics``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tether.telemetry.otel import DECISION_BUCKETS
from tether.telemetry.state import StoreState

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
    number = repr(float(value)) if isinstance(value, float) else str(value)
    return f"{name}{{{inner}}} {number}" if inner else f"{name} {number}"


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def exposition(state: StoreState, verifications: Mapping[str, int]) -> str:
    lines: list[str] = []
    lines += _family(
        "tether_approvals",
        "gauge",
        "Approvals in the store by tool and status.",
        (
            _sample("tether_approvals", {"tool": t, "status": s}, n)
            for (t, s), n in sorted(state.approvals.items())
        ),
    )
    lines += _family(
        "tether_approvals_pending",
        "gauge",
        "Approvals waiting for a decision now, by tool.",
        (_sample("tether_approvals_pending", {"tool": t}, n) for t, n in state.pending().items()),
    )
    lines += _histogram(
        "tether_approval_time_to_decision_seconds",
        "From an approval's request to its decision, over the approvals in the store.",
        state.waits,
    )
    lines += _family(
        "tether_effects",
        "gauge",
        "Effects in the ledger by tool and status.",
        (
            _sample("tether_effects", {"tool": t, "status": s}, n)
            for (t, s), n in sorted(state.effects.items())
        ),
    )
    lines += _family(
        "tether_effects_unknown",
        "gauge",
        "Effects whose outcome is unknown now (to reconcile), by tool.",
        (_sample("tether_effects_unknown", {"tool": t}, n) for t, n in state.unknown().items()),
    )
    lines += _family(
        "tether_audit_verifications_total",
        "counter",
        "Audit log verifications this process ran, by result.",
        (
            _sample("tether_audit_verifications_total", {"result": r}, n)
            for r, n in sorted(verifications.items())
        ),
    )
    return "\n".join(lines) + "\n"


def _histogram(name: str, help_text: str, values: Iterable[float]) -> list[str]:
    seen = sorted(values)
    samples = []
    for bound in DECISION_BUCKETS:
        count = sum(1 for v in seen if v <= bound)
        samples.append(_sample(f"{name}_bucket", {"le": repr(float(bound))}, count))
    samples.append(_sample(f"{name}_bucket", {"le": "+Inf"}, len(seen)))
    samples.append(_sample(f"{name}_sum", {}, float(sum(seen))))
    samples.append(_sample(f"{name}_count", {}, len(seen)))
    return _family(name, "histogram", help_text, samples)
