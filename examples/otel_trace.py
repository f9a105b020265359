"""The spans of one call that waits for an approver: tether reports to OpenTelemetry.

The run (an ``invoke_agent tether`` span under the application's own span) proposes the call
and it is asked for (``execute_tool refund`` with an "asked" event, ``tether.verdict = ask``);
an approver's credential grants it (``tether.approval refund``, a span from the request to
the decision); the resumed run calls the tool under the grant (``tether.verdict =
allow_after_approval``; "granted", "dispatched", "settled"). Each finished span is printed as
one JSON line with its name and attributes; the credential is never in any of them.

Run it with `python examples/otel_trace.py`; it needs the OpenTelemetry SDK (`pip install
-e '.[otel]' opentelemetry-sdk`) and says so, doing nothing, without it. Everything lives in
a temporary directory.
"""

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
except ModuleNotFoundError:
    print("no spans: this needs pip install -e '.[otel]' opentelemetry-sdk", file=sys.stderr)
    sys.exit(0)

from tether import App, ModelToolCall, Policy, Principal, Registry, Risk, ScriptedModel, open_store
from tether.identity import add_identity, authenticate


class JsonLines(SpanExporter):
    """Each finished span as one line of JSON: name, ids, parent, attributes and events."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            ids = span.context
            line = {
                "name": span.name,
                "trace_id": f"{ids.trace_id:032x}" if ids else None,
                "span_id": f"{ids.span_id:016x}" if ids else None,
                "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                "duration_ms": round(((span.end_time or 0) - (span.start_time or 0)) / 1e6, 3),
                "attributes": dict(span.attributes or {}),
                "events": [e.name for e in span.events],
                "links": [f"{link.context.trace_id:032x}" for link in span.links],
            }
            print(json.dumps(line, default=list), flush=True)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
trace.set_tracer_provider(provider)
app_tracer = trace.get_tracer("example-app")  # the application's own spans

workdir = tempfile.TemporaryDirectory()
db = f"sqlite:///{Path(workdir.name) / 'tether.db'}"


def build() -> App:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="payments:write", tenant_path="tenant")
    def refund(tenant: str, order_id: str, amount: int, operation_key: str) -> dict[str, Any]:
        """Refund an order."""
        return {"order_id": order_id, "refunded": amount}

    call = ModelToolCall(id="call-1", name="refund", arguments={"order_id": "A-7", "amount": 30})
    return App(
        registry=registry,
        policy=Policy(version="payments-1", approvers=frozenset({"finance-1"})),
        model=lambda: ScriptedModel([[call], "Refunded A-7."]),
        principal=Principal(subject="agent-7", tenant="acme", scopes=frozenset({"payments:write"})),
    )


app, store = build(), open_store(db)
with app_tracer.start_as_current_span("POST /tickets/A-7/refund"):  # the agent's run nests here
    first = app.runner(store).start("refund order A-7", app.principal)
(approval_id,) = first.approvals

# The approver decides with a credential (only its hash is stored; never printed).
_, token = add_identity(store, "finance-1", "approver", now=time.time(), tenants=["acme"])
time.sleep(0.05)  # a short wait, so the approval span has a visible duration
app.gate(store).approve(approval_id, authenticate(store, token, "approver"))

with app_tracer.start_as_current_span("resume after approval"):
    done = app.runner(store).resume(first.run_id)
store.close()
provider.shutdown()
workdir.cleanup()
