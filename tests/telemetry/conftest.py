"""The OpenTelemetry SDK's in-memory exporter and metric reader, handed to tether for a test
(``tether.telemetry.use``), and an OTLP/HTTP receiver on 127.0.0.1 for the tests that send
spans over the wire, from this process or another."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether import telemetry


@dataclass
class Recorded:
    """What tether reported during a test."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    provider: TracerProvider

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def span(self, name: str) -> ReadableSpan:
        (found,) = self.spans(name)
        return found

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Each metric's points, as (attributes, value or histogram count and sum)."""
        data = self.reader.get_metrics_data()
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value: Any = getattr(point, "value", None)
                        if value is None:
                            value = (getattr(point, "count", 0), getattr(point, "sum", 0))
                        labels = dict(point.attributes or {})
                        out.setdefault(metric.name, []).append((labels, value))
        return out

    def metrics_json(self) -> str:
        data = self.reader.get_metrics_data()
        return "" if data is None else data.to_json()


@pytest.fixture
def otel() -> Iterator[Recorded]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry.use(provider, meters)
    try:
        yield Recorded(exporter, reader, provider)
    finally:
        telemetry.use()
        provider.shutdown()
        meters.shutdown()


def dumped(span: ReadableSpan) -> str:
    """Everything a span carries, as text: to look for values that must not be there."""
    return json.dumps(json.loads(span.to_json()))


@dataclass
class Receiver:
    """A collector's OTLP/HTTP trace endpoint: every POST /v1/traces decoded."""

    port: int
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got: list[ExportTraceServiceRequest] = []
    arrived = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            got.append(request)
            arrived.set()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(server.server_address[1], got, arrived)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def attributes(span: Any) -> dict[str, Any]:
    """An OTLP protobuf span's attributes as a dict."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        value = getattr(kv.value, which)
        if which == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        out[kv.key] = value
    return out
