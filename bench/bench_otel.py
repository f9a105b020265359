"""Benchmark: what OpenTelemetry costs the gate, off and on, beside the same call in one run.

    .venv/bin/python bench/bench_otel.py [--calls 3000] [--json]

An allowed read call on the in-memory store (no SQL, so the gate's own Python is what is
measured, and any added cost shows at its largest), timed five ways in rotating rounds of 100
calls each, so all five see the same machine within milliseconds:

- ``bare``: the tool function called directly (the floor);
- ``plain``: ``Gate._call``, the pipeline without the telemetry check (the code before it);
- ``off``: ``Gate.call`` with no tracer or meter provider configured (the check, then the
  plain path): the cost of tracing off is ``off - plain``;
- ``traced``: ``Gate.call`` with the SDK's tracer provider, a span per call through a
  ``SimpleSpanProcessor`` to an exporter that drops it;
- ``traced+metrics``: as ``traced``, plus the SDK's meter provider and a reader;
- ``sdk span``: no gate, only the SDK making a span like tether's (as current, 20
  attributes, two events) through the same processor: the SDK's own share of ``traced``.

Prints each way's median microseconds per call, the added cost against ``plain``, and the
ratios against the bare call.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import tether
from tether import Gate, Policy, Principal, Registry, Risk, ToolCall, telemetry
from tether.store import SQLiteStore, Store
from tether.store.memory import MemoryStore

ROUND = 100
WAYS = ("bare", "plain", "off", "traced", "traced+metrics", "sdk span")


class Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def lookup(order_id: str) -> dict[str, str]:
    """Look an order up."""
    return {"order_id": order_id, "state": "shipped"}


def make_gate(store: Store | None = None) -> tuple[Gate, str]:
    registry = Registry()
    registry.tool(risk=Risk.READ)(lookup)
    gate = Gate(registry, Policy(version="policy-1"), store or MemoryStore())
    principal = Principal(subject="agent-1", tenant="acme", scopes=frozenset())
    return gate, gate.start_run(principal, run_id="run-bench")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per way")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--store",
        choices=("memory", "sqlite"),
        default="memory",
        help="sqlite: NORMAL, a temp file",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store: Store = MemoryStore()
        if args.store == "sqlite":
            store = SQLiteStore(f"sqlite:///{tmp}/bench.db?synchronous=normal")
        try:
            measure(args, store)
        finally:
            store.close()


def measure(args: argparse.Namespace, store: Store) -> None:

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    gate, run_id = make_gate(store)
    counter = iter(range(10**9))

    def fresh() -> ToolCall:
        return ToolCall(call_id=f"c{next(counter)}", tool="lookup", arguments={"order_id": "A"})

    sdk = tracer_provider.get_tracer("bench")
    attributes = {f"tether.fact{i}": f"value {i}" for i in range(20)}

    def sdk_span() -> None:
        span = sdk.start_span("execute_tool lookup")
        with trace.use_span(span, end_on_exit=False):
            span.add_event("dispatched", {"k": "v"})
            span.add_event("settled", {"k": "v"})
        span.set_attributes(attributes)
        span.end()

    ways: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {
        "sdk span": (sdk_span, telemetry.use),
        "bare": (lambda: lookup("A"), telemetry.use),
        "plain": (lambda: gate._call(run_id, fresh()), telemetry.use),
        "off": (lambda: gate.call(run_id, fresh()), telemetry.use),
        "traced": (lambda: gate.call(run_id, fresh()), lambda: telemetry.use(tracer_provider)),
        "traced+metrics": (
            lambda: gate.call(run_id, fresh()),
            lambda: telemetry.use(tracer_provider, meter_provider),
        ),
    }
    for call, configure in ways.values():  # warm every path up
        configure()
        for _ in range(200):
            call()
    samples: dict[str, list[float]] = {name: [] for name in WAYS}
    rounds = max(1, args.calls // ROUND)
    gc.disable()
    try:
        for r in range(rounds):
            order = WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]
            for name in order:
                call, configure = ways[name]
                configure()
                got = samples[name]
                for _ in range(ROUND):
                    t0 = time.perf_counter_ns()
                    call()
                    got.append((time.perf_counter_ns() - t0) / 1000)
            gc.collect()
    finally:
        gc.enable()
        telemetry.use()
    medians = {name: statistics.median(samples[name]) for name in WAYS}
    bare, plain = medians["bare"], medians["plain"]
    result = {
        "tether": tether.__file__,
        "store": args.store,
        "python": platform.python_version(),
        "load": os.getloadavg(),
        "calls_per_way": len(samples["bare"]),
        "median_us": {k: round(v, 2) for k, v in medians.items()},
        "added_vs_plain_us": {k: round(medians[k] - plain, 2) for k in WAYS[2:5]},
        "ratio_vs_plain": {k: round(medians[k] / plain, 3) for k in WAYS[2:5]},
        "ratio_vs_bare": {k: round(medians[k] / bare, 1) for k in WAYS[1:]},
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"tether from {result['tether']}; {args.store} store; load {result['load']}")
    print(f"{'way':<16} {'median µs':>10} {'vs plain':>10} {'÷ plain':>8} {'÷ bare':>8}")
    for name in WAYS:
        alone = name in ("bare", "plain", "sdk span")
        added = "" if alone else f"{medians[name] - plain:+.2f}"
        ratio = "" if name in ("bare", "sdk span") else f"{medians[name] / plain:.3f}"
        over = "" if name == "bare" else f"{medians[name] / bare:.1f}"
        print(f"{name:<16} {medians[name]:>10.2f} {added:>10} {ratio:>8} {over:>8}")


if __name__ == "__main__":
    main()
