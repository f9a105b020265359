"""OpenTelemetry traces and metrics of governed calls (the ``[otel]`` extra).

tether reports through the ``opentelemetry-api`` package to whatever tracer and meter
providers the application configured; with none (or without the package) nothing is recorded
and the gate's added cost is one branch per call. ``use`` hands tether providers directly.
"""

from tether.telemetry.capture import capture
from tether.telemetry.otel import active, use
from tether.telemetry.spans import approval_context

__all__ = ["active", "approval_context", "capture", "use"]
