"""Finding OpenTelemetry, cheaply: the tracer and the instruments tether reports to, or None.

tether uses the ``opentelemetry-api`` package only (the ``[otel]`` extra), and only if it is
installed. With no package, or with no tracer or meter provider configured (the API's proxy or
no-op provider), ``tracer()`` and ``instruments()`` return None and the gate takes its plain
path: one function call and a branch per governed call, nothing allocated.

A provider is found the way every OpenTelemetry instrumentation finds it (the global one the
application set with ``trace.set_tracer_provider``), or given to tether directly with ``use``
(tests, or an application that keeps tether's spans apart). The first real provider seen is
kept: the API lets the global one be set once per process, so it cannot change under us.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Instruments", "active", "instruments", "metrics_api", "tracer", "use"]

try:  # the [otel] extra
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ModuleNotFoundError:  # pragma: no cover - exercised where the extra is absent
    _trace = None  # type: ignore[assignment]
    _metrics = None  # type: ignore[assignment]

# The API's module-level globals where a provider set with ``set_*_provider`` lives; with
# the environment naming a provider class the API loads it on first use, so then the
# globals say nothing and the API is asked.
_metrics_state: Any = None
_GLOBALS = False
if _metrics is not None and _trace is not None:
    import os

    from opentelemetry.metrics import _internal as _metrics_state

    _GLOBALS = (
        hasattr(_trace, "_TRACER_PROVIDER")
        and hasattr(_metrics_state, "_METER_PROVIDER")
        and not os.environ.get("OTEL_PYTHON_TRACER_PROVIDER")
        and not os.environ.get("OTEL_PYTHON_METER_PROVIDER")
    )

NAME = "tether"
# Buckets for durations in seconds: the gate's own work is tens of microseconds to a few
# milliseconds; an approval waits seconds to days.
GATE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)
DECISION_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)

_tracer: Any = None
_instruments: Instruments | None = None
_tracer_provider: Any = None  # given with ``use``
_meter_provider: Any = None
# A provider found to be a no-op, so it is not looked at again (the API's no-op providers).
_tracer_off_seen: Any = None
_meter_off_seen: Any = None


@dataclass(frozen=True)
class Instruments:
    """tether's metrics, made once from the meter of the provider in force."""

    calls: Any  # counter: governed calls by tool, verdict and outcome
    gate_duration: Any  # histogram (s): tether's own work on a call, the tool's time apart
    approvals_requested: Any  # counter, by tool
    approvals_decided: Any  # counter, by tool and decision
    approvals_expired: Any  # counter, by tool
    time_to_decision: Any  # histogram (s): request to decision
    audit_verifications: Any  # counter, by result (intact / broken)


def use(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Report to these providers instead of the global ones (None: the global one again)."""
    global _tracer, _instruments, _tracer_provider, _meter_provider
    _tracer_provider, _meter_provider = tracer_provider, meter_provider
    _tracer, _instruments = None, None


def tracer() -> Any:
    """The tracer to report spans to, or None when tracing is off."""
    global _tracer, _tracer_off_seen
    if _tracer is not None:
        return _tracer
    if _trace is None:
        return None
    if _GLOBALS and _tracer_provider is None and _trace._TRACER_PROVIDER is None:
        return None
    provider = _tracer_provider or _trace.get_tracer_provider()
    if provider is _tracer_off_seen or isinstance(
        provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider
    ):
        _tracer_off_seen = provider
        return None
    _tracer = provider.get_tracer(NAME)
    return _tracer


def _meter_off(provider: Any) -> bool:
    # The API's proxy provider is private (``_ProxyMeterProvider``): told apart by name.
    assert _metrics is not None
    return isinstance(provider, _metrics.NoOpMeterProvider) or type(provider).__name__.startswith(
        "_Proxy"
    )


def instruments() -> Instruments | None:
    """The instruments to record metrics with, or None when metrics are off."""
    global _instruments, _meter_off_seen
    if _instruments is not None:
        return _instruments
    if _metrics is None:
        return None
    if _GLOBALS and _meter_provider is None and _metrics_state._METER_PROVIDER is None:
        return None  # none set: the common case, without the API's lookup
    provider = _meter_provider or _metrics.get_meter_provider()
    if provider is _meter_off_seen or _meter_off(provider):
        _meter_off_seen = provider
        return None
    meter = provider.get_meter(NAME)
    _instruments = Instruments(
        calls=meter.create_counter(
            "tether.calls", unit="{call}", description="Governed tool calls by verdict, outcome"
        ),
        gate_duration=meter.create_histogram(
            "tether.gate.duration",
            unit="s",
            description="tether's own time on a governed call, the tool's time excluded",
            explicit_bucket_boundaries_advisory=GATE_BUCKETS,
        ),
        approvals_requested=meter.create_counter("tether.approvals.requested", unit="{approval}"),
        approvals_decided=meter.create_counter("tether.approvals.decided", unit="{approval}"),
        approvals_expired=meter.create_counter("tether.approvals.expired", unit="{approval}"),
        time_to_decision=meter.create_histogram(
            "tether.approvals.time_to_decision",
            unit="s",
            description="From an approval's request to its decision",
            explicit_bucket_boundaries_advisory=DECISION_BUCKETS,
        ),
        audit_verifications=meter.create_counter(
            "tether.audit.verifications", unit="{verification}"
        ),
    )
    return _instruments


def metrics_api() -> Any:
    """The ``opentelemetry.metrics`` module, or None without the extra."""
    return _metrics


def active() -> bool:
    """Whether anything would be recorded: a tracer or a meter provider is configured."""
    if _tracer is not None or _instruments is not None:
        return True
    # No provider can be in force: the API's own globals are unset (two attribute reads,
    # the common case when tracing is off, without the API's lookups, which read the
    # environment on every call). Any doubt takes the API's way.
    if (
        _GLOBALS
        and _tracer_provider is None
        and _meter_provider is None
        and _trace._TRACER_PROVIDER is None
        and _metrics_state._METER_PROVIDER is None
    ):
        return False
    return tracer() is not None or instruments() is not None
