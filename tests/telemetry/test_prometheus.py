"""``GET /metrics`` on a real ``tether serve``: the store's numbers in the Prometheus text
format, to a loopback scraper or an admin's credential, and to nobody else; and the same
numbers through the OpenTelemetry metrics API (``watch``)."""

from __future__ import annotations

import http.client
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.telemetry.conftest import Recorded
from tests.telemetry.test_spans import CREDENTIAL, PRINCIPAL, SECRET, build
from tether.errors import ApprovalRequired, OutcomeUnknown
from tether.gate.plan import ToolCall
from tether.identity import add_identity
from tether.telemetry.state import watch

SAMPLE = re.compile(r'^[a-z_]+(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+]+$|^# (HELP|TYPE) ')


def seeded(tmp_path: Path) -> tuple[str, str, str]:
    """A store with one call committed and one waiting; an admin's and an approver's
    credentials."""
    gate, store = build(tmp_path)
    try:
        run = gate.start_run(PRINCIPAL)
        gate.call(run, ToolCall(call_id="c1", tool="lookup", arguments={"order_id": "A"}))
        arguments = {"user": "u", "password": SECRET, "pin": "1", "note": CREDENTIAL}
        gate.call(run, ToolCall(call_id="c2", tool="login", arguments=arguments))
        with pytest.raises(OutcomeUnknown):
            gate.call(run, ToolCall(call_id="c4", tool="hang", arguments={"order_id": "A"}))
        with pytest.raises(ApprovalRequired):
            call = ToolCall(call_id="c3", tool="refund", arguments={"order_id": "A", "amount": 3})
            gate.call(run, call)
        _, admin = add_identity(store, "root", "admin", now=time.time())
        _, approver = add_identity(
            store, "finance-1", "approver", now=time.time(), tenants=["acme"]
        )
    finally:
        store.close()
    return f"sqlite:///{tmp_path / 'tether.db'}", admin, approver


def test_metrics_are_served_to_loopback_or_an_admin_and_parse(tmp_path: Path) -> None:
    db, admin, approver = seeded(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--db", db, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def get(headers: dict[str, str]) -> tuple[int, str, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/metrics", headers=headers)
            response = connection.getresponse()
            kind = response.getheader("content-type") or ""
            return response.status, kind, response.read().decode()
        finally:
            connection.close()

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                code, kind, text = get({})
                break
            except OSError:
                alive = server.poll() is None and time.monotonic() < deadline
                assert alive, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        assert code == 200 and kind.startswith("text/plain; version=0.0.4")
        assert get({"X-Forwarded-For": "203.0.113.9"})[0] == 401  # came through a proxy
        proxied = {"X-Forwarded-For": "203.0.113.9"}
        assert get({**proxied, "Authorization": f"Bearer {admin}"})[0] == 200
        assert get({**proxied, "Authorization": f"Bearer {approver}"})[0] == 401
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
    lines = text.strip().splitlines()
    assert all(SAMPLE.match(line) for line in lines), [x for x in lines if not SAMPLE.match(x)]
    assert 'tether_approvals_pending{tool="refund"} 1.0' in lines
    assert 'tether_effects{status="committed",tool="lookup"} 1.0' in lines
    assert 'tether_effects{status="committed",tool="login"} 1.0' in lines
    assert "tether_approval_time_to_decision_seconds_count 0.0" in lines
    assert "# TYPE tether_approval_time_to_decision_seconds histogram" in lines
    assert 'tether_effects_unknown{tool="hang"} 1.0' in lines
    assert "tth_" not in text and SECRET not in text


def test_pending_and_unknown_are_observable_gauges(otel: Recorded, tmp_path: Path) -> None:
    db, _, _ = seeded(tmp_path)
    from tether.store import SQLiteStore

    with SQLiteStore(db) as store:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        assert watch(store, provider)
        data = reader.get_metrics_data()
        provider.shutdown()
    assert data is not None
    points = {
        metric.name: [
            (dict(p.attributes or {}), getattr(p, "value", None)) for p in metric.data.data_points
        ]
        for r in data.resource_metrics
        for scope in r.scope_metrics
        for metric in scope.metrics
    }
    assert points["tether.approvals.pending"] == [({"gen_ai.tool.name": "refund"}, 1)]
    assert points["tether.effects.unknown"] == [({"gen_ai.tool.name": "hang"}, 1)]
