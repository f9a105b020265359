"""Spans over the wire: OTLP/HTTP to a receiver this test runs on 127.0.0.1, decoded from
protobuf; and an approval's wait recorded by another process (``tether approvals approve``
with an approver's credential, its spans sent to the receiver), tied to the calls in this
process by the approval's derived trace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.telemetry.conftest import Receiver, Recorded, attributes, dumped
from tests.telemetry.test_spans import PRINCIPAL, build
from tether import telemetry
from tether.errors import ApprovalRequired
from tether.gate.plan import ToolCall
from tether.identity import add_identity

ROOT = Path(__file__).resolve().parents[2]
# The deciding process: the SDK configured as an application would, sending to the receiver,
# then the command line exactly as a reviewer runs it.
DECIDER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
trace.set_tracer_provider(provider)
sys.argv = ["tether", *sys.argv[2:]]
from tether.cli import run
try:
    run()
finally:
    provider.shutdown()
"""


def test_spans_reach_an_otlp_http_collector_and_decode(receiver: Receiver, tmp_path: Path) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
    telemetry.use(provider)
    gate, store = build(tmp_path)
    try:
        run = gate.start_run(PRINCIPAL)
        gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
        provider.force_flush()
    finally:
        telemetry.use()
        provider.shutdown()
        store.close()
    assert receiver.arrived.wait(10)
    (span,) = receiver.spans()
    assert span.name == "execute_tool lookup"
    a = attributes(span)
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.call.id"] == "c1"
    assert a["tether.verdict"] == "allow" and a["tether.effect.status"] == "committed"
    assert [e.name for e in span.events] == ["dispatched", "settled"]
    assert len(span.trace_id) == 16 and len(span.span_id) == 8


def test_an_approval_decided_in_another_process_is_a_span_from_request_to_decision(
    otel: Recorded, receiver: Receiver, tmp_path: Path
) -> None:
    gate, store = build(tmp_path)
    try:
        run = gate.start_run(PRINCIPAL)
        call = ToolCall(call_id="c1", tool="refund", arguments={"order_id": "A", "amount": 3})
        try:
            gate.call(run, call)
            raise AssertionError("the refund should ask")
        except ApprovalRequired as e:
            approval_id = e.approval_id
        _, token = add_identity(store, "finance-1", "approver", now=time.time(), tenants=["acme"])
        token_file = tmp_path / "finance.token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        time.sleep(0.3)  # the approval waits a little, measurably
        decided = subprocess.run(
            [
                sys.executable,
                "-c",
                DECIDER,
                receiver.endpoint,
                "approvals",
                "approve",
                approval_id,
                "--db",
                f"sqlite:///{tmp_path / 'tether.db'}",
                "--token-file",
                str(token_file),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=False,
        )
        assert decided.returncode == 0, decided.stderr
        gate.call(run, call)  # runs under the grant, in this process
        approval = store.list_approvals()[0]
    finally:
        store.close()

    (wait,) = [s for s in receiver.spans() if s.name == "tether.approval refund"]
    a = attributes(wait)
    assert a["tether.approval.id"] == approval_id
    assert a["tether.approval.decision"] == "approved"
    assert a["tether.approval.approver"] == "finance-1"
    assert a["tether.approval.wait_s"] >= 0.3
    assert wait.start_time_unix_nano == int(approval.created_at * 1e9)
    assert wait.end_time_unix_nano == int((approval.decided_at or 0) * 1e9)
    derived = telemetry.approval_context(approval_id)
    assert int.from_bytes(wait.trace_id, "big") == derived.trace_id
    asked, ran = otel.spans("execute_tool refund")
    for span in (asked, ran):
        assert [link.context.trace_id for link in span.links] == [derived.trace_id]
    assert (ran.attributes or {})["tether.approval.approver"] == "finance-1"
    sent = json.dumps([str(s) for s in receiver.spans()]) + "".join(dumped(s) for s in otel.spans())
    assert token not in sent and "tth_" not in sent
